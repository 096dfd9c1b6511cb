"""Specification of the unary operators of ``${...}``: ``typeof``, ``void``, ``!``, ``-``, ``+``.

``typeof x === 'undefined' ? default : x`` is how Digdag projects give a param a default,
so ``typeof`` of a variable or key that does not exist is ``"undefined"``, not an error.
"""

from __future__ import annotations

from typing import Any

import pytest

from tickwork.shared.domain.expressions import render
from tickwork.shared.errors import InvalidExpression

CONTEXT: dict[str, Any] = {
    "n": 7,
    "f": 2.5,
    "s": "hi",
    "t": True,
    "nothing": None,
    "config": {"user": "root"},
    "items": ["a"],
}


def ev(expression: str) -> Any:
    return render("${" + expression + "}", CONTEXT)


@pytest.mark.parametrize(
    ("expression", "name"),
    [
        ("typeof missing", "undefined"),
        ("typeof nothing", "object"),
        ("typeof n", "number"),
        ("typeof f", "number"),
        ("typeof s", "string"),
        ("typeof t", "boolean"),
        ("typeof config", "object"),
        ("typeof items", "object"),
        ("typeof config.user", "string"),
        ("typeof config.password", "undefined"),
        ("typeof undefined", "undefined"),
        ("typeof void 0", "undefined"),
        ("typeof (n + 1)", "number"),
        ("typeof typeof missing", "string"),
    ],
)
def test_typeof_names_a_values_type_as_javascript_does(expression: str, name: str) -> None:
    assert ev(expression) == name


def test_typeof_gives_a_missing_param_its_default() -> None:
    default = "typeof region === 'undefined' ? 'us' : region"
    assert render("${" + default + "}", CONTEXT) == "us"
    assert render("${" + default + "}", {"region": "eu"}) == "eu"
    assert render("region=${" + default + "}", {}) == "region=us"


def test_an_undefined_variable_outside_typeof_is_still_an_error() -> None:
    with pytest.raises(InvalidExpression, match="undefined variable 'missing'"):
        ev("missing === undefined")


def test_void_gives_undefined_which_renders_as_null_and_as_empty_text() -> None:
    assert ev("void 0") is None
    assert render("[${void n}]", CONTEXT) == "[]"


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("!t", False),
        ("!!s", True),
        ("!nothing", True),
        ("!undefined", True),
        ("-n", -7),
        ("- -n", 7),
        ("+'3'", 3),
        ("+' 2.5 '", 2.5),
        ("+t", 1),
        ("+n + +'1'", 8),
        ("nothing == undefined", True),
        ("nothing === undefined", False),
        ("nothing != undefined", False),
        ("nothing !== undefined", True),
    ],
)
def test_the_other_unary_operators_follow_javascript(expression: str, value: Any) -> None:
    assert ev(expression) == value


def test_unary_plus_refuses_text_that_is_not_a_number() -> None:
    with pytest.raises(InvalidExpression, match="cannot convert 'hi' to a number"):
        ev("+s")
