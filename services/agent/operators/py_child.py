"""The child side of ``py>``: imports the target from the project and calls it.

Reads ``{"function", "params", "result_path"}`` as JSON on stdin. The target is
``module.function``, ``module.Class.method`` (the class is instantiated with the params its
constructor names, then the method is called, as Digdag does) or ``module.Class`` (its
``run`` method). Each callable gets the params its signature names as keyword arguments
(all of them if it takes ``**kwargs``). Writes ``{"store", "export", "subtasks"}`` as JSON
to ``result_path``: what the callable returned (a dict, stored) together with what it gave
``digdag.env``; or ``{"error"}`` with exit status 3 when the target cannot be found or
raised, its traceback (the project's frames only) in the log.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

RUNNER_FILE = os.path.realpath(__file__)
IMPORTLIB_DIR = Path(importlib.__file__).parent


class TargetError(Exception):
    """The target names no callable of the project, or a parameter it needs is not set."""


class ImportFailed(Exception):
    """A module of the target raised while being imported (the cause)."""


def _keyword_arguments(function: Any, params: dict[str, Any], name: str) -> dict[str, Any]:
    """The params ``function`` takes by name; TargetError naming a required one not set."""
    accepted = list(inspect.signature(function).parameters.values())
    named = [
        p
        for p in accepted
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    for parameter in named:
        if parameter.name not in params and parameter.default is inspect.Parameter.empty:
            raise TargetError(f"{name} requires parameter '{parameter.name}', which is not set")
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted):
        return dict(params)
    return {p.name: params[p.name] for p in named if p.name in params}


def _import_longest(parts: list[str]) -> tuple[ModuleType, list[str]]:
    """The module named by the longest importable prefix of ``parts``, and the rest."""
    for end in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:end])
        try:
            return importlib.import_module(module_name), parts[end:]
        except ModuleNotFoundError as exc:
            if exc.name != module_name and not module_name.startswith(f"{exc.name}."):
                raise ImportFailed(module_name) from exc
        except Exception as exc:
            raise ImportFailed(module_name) from exc
    raise TargetError(f"no module named '{parts[0]}' in the project")


def _resolve(target: str) -> tuple[Any, Any, str]:
    """The class to instantiate and the name of its method, or None and the function;
    and the dotted name of what is called."""
    found, rest = _import_longest(target.split("."))
    owner: Any = None
    path = found.__name__
    for attribute in rest:
        if not hasattr(found, attribute):
            kind, what = ("class", "method") if inspect.isclass(found) else ("module", "attribute")
            raise TargetError(f"{kind} '{path}' has no {what} '{attribute}'")
        owner, found = found, getattr(found, attribute)
        path = f"{path}.{attribute}"
    if inspect.isclass(found):
        if not hasattr(found, "run"):
            raise TargetError(f"class '{path}' has no method 'run'")
        return found, "run", f"{path}.run"
    if not callable(found):
        raise TargetError(f"'{path}' is not callable")
    if inspect.isclass(owner):
        return owner, rest[-1], path
    return None, found, path


def _call(target: str, params: dict[str, Any]) -> Any:
    """Find the target and call it with the params it takes; a method on a new instance."""
    cls, function, name = _resolve(target)
    if cls is None:
        return function(**_keyword_arguments(function, params, name))
    instance = cls(**_keyword_arguments(cls, params, f"{cls.__module__}.{cls.__qualname__}"))
    method = getattr(instance, function)
    return method(**_keyword_arguments(method, params, name))


def _project_frames(tb: TracebackType | None) -> TracebackType | None:
    """The traceback from the first frame that is neither this runner nor the importer."""
    while tb is not None and _is_runner_frame(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return tb


def _is_runner_frame(filename: str) -> bool:
    return (
        os.path.realpath(filename) == RUNNER_FILE
        or filename.startswith("<frozen ")
        or Path(filename).parent == IMPORTLIB_DIR
    )


def _print_traceback(exc: BaseException) -> None:
    """The exception's traceback in the log, without this runner's frames, naming the
    project's files by their path in the project."""
    sys.stdout.flush()  # what the function printed comes first
    shown = traceback.TracebackException(type(exc), exc, _project_frames(exc.__traceback__))
    chained: traceback.TracebackException | None = shown
    while chained is not None:
        for frame in chained.stack:
            frame.filename = _relative(frame.filename)
        if isinstance(getattr(chained, "filename", None), str):  # a SyntaxError's file
            chained.filename = _relative(chained.filename)
        chained = chained.__cause__ or chained.__context__
    print("".join(shown.format()), end="", file=sys.stderr, flush=True)


def _import_failure(module_name: str, exc: BaseException) -> str:
    """``cannot import module 'm' (FILE, line N): Type: message``."""
    summary = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, SyntaxError) and exc.filename:
        summary = f"{type(exc).__name__}: {exc.msg}"
        where = f"{_relative(exc.filename)}, line {exc.lineno}"
    else:
        frames = traceback.extract_tb(exc.__traceback__)
        ours = [f for f in frames if _is_project_file(f.filename)] or frames
        where = f"{_relative(ours[-1].filename)}, line {ours[-1].lineno}" if ours else ""
    place = f" ({where})" if where else ""
    return f"cannot import module '{module_name}'{place}: {summary}"


def _is_project_file(filename: str) -> bool:
    return Path(filename).resolve().is_relative_to(Path.cwd().resolve())


def _relative(filename: str) -> str:
    path = Path(filename).resolve()
    return str(path.relative_to(Path.cwd().resolve())) if _is_project_file(filename) else filename


def _write(path: str, outcome: dict[str, Any]) -> None:
    with open(path, "w") as out:
        json.dump(outcome, out, default=str)


def _fail(path: str, message: str) -> int:
    _write(path, {"error": message})
    return 3


def main() -> int:
    """Run one py> task; the exit status tells the agent how it went."""
    request = json.load(sys.stdin)
    sys.path.insert(0, ".")
    # The project's own modules come first; `digdag` (the env helper) after them.
    sys.path.append(str(Path(__file__).with_name("py_lib")))
    digdag = importlib.import_module("digdag")
    digdag.env.params = dict(request["params"])
    target = request["function"]
    try:
        result = _call(target, request["params"])
    except TargetError as exc:
        message = f"py> {target}: {exc}"
        sys.stdout.flush()
        print(message, file=sys.stderr, flush=True)
        return _fail(request["result_path"], message)
    except ImportFailed as failure:
        cause = failure.__cause__ or failure
        _print_traceback(cause)
        return _fail(request["result_path"], _import_failure(str(failure), cause))
    except Exception as exc:
        _print_traceback(exc)
        return _fail(request["result_path"], f"{type(exc).__name__}: {exc}")
    if result is not None and not isinstance(result, dict):
        return _fail(
            request["result_path"], f"{target} returned {type(result).__name__}, not a dict"
        )
    outcome = {
        "store": {**digdag.env.store_params, **(result or {})},
        "export": digdag.env.export_params,
        "subtasks": digdag.env.subtask_config or None,
    }
    _write(request["result_path"], outcome)
    return 0


if __name__ == "__main__":
    sys.exit(main())
