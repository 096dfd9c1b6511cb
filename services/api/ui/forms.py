"""What the UI's action forms share: reading a form into the REST API's request model and
turning the errors the REST API would answer into messages beside the fields they name.

A form's fields carry the names of the JSON members (``from``, ``to``, ``count``,
``session_time``, ...), so the pointer of an error (``/to``) names the field to mark; an
error naming no member belongs to the whole form (field ``""``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TypeVar

from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from tickwork.services.api.errors import ApiProblem, from_pydantic

Model = TypeVar("Model", bound=BaseModel)

WHOLE_FORM = ""
"""The field an error that names no member belongs to."""


class FormInvalid(Exception):
    """A form that cannot be used: a message for each field named (``""``: the form)."""

    def __init__(self, errors: Mapping[str, str]) -> None:
        super().__init__("; ".join(f"{k or 'form'}: {v}" for k, v in errors.items()))
        self.errors = dict(errors)


def problem_fields(problem: ApiProblem) -> dict[str, str]:
    """The fields an API problem names (by the first segment of each pointer), with why."""
    found: dict[str, str] = {}
    for item in problem.errors or [{"detail": problem.detail}]:
        place = str(item.get("pointer") or item.get("parameter") or "")
        field = place.lstrip("/").split("/", 1)[0]
        found.setdefault(field, str(item.get("detail") or problem.detail))
    return found


@contextmanager
def api_errors() -> Iterator[None]:
    """Errors the REST API answers as a 422 naming a member, raised as FormInvalid."""
    try:
        yield
    except PydanticValidationError as error:
        raise FormInvalid(problem_fields(from_pydantic(error, "json"))) from None
    except ApiProblem as problem:
        if problem.status != 422:
            raise
        raise FormInvalid(problem_fields(problem)) from None


def filled(form: Mapping[str, str], names: tuple[str, ...]) -> dict[str, str]:
    """The fields of ``names`` that hold something, stripped (an empty field is not sent)."""
    values = {name: form.get(name, "").strip() for name in names}
    return {name: value for name, value in values.items() if value}


def whole_number(value: str) -> int | str:
    """A field's digits as a number; anything else as it is, for the model to refuse."""
    return int(value) if value.isdigit() and len(value) < 20 else value


def model_of(model: type[Model], values: Mapping[str, object]) -> Model:
    """``model`` validated from ``values`` (member names, not attribute names)."""
    with api_errors():
        return model.model_validate(dict(values))
