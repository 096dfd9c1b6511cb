"""``http_call>``: a workflow definition fetched over HTTP, run as the task's subtasks.

The request takes the options and secrets of ``http>`` (services/agent/operators/http.py)
but stores nothing. The answer's
``Content-Type`` says how to read the body, as in Digdag: ``application/json`` is JSON,
``application/x-yaml`` (or another YAML type) a workflow file; ``content_type_override``
replaces a missing or wrong one. The body is checked like a workflow file at the top of
the project (its ``call>`` and ``!include`` reach the project's files), and its tasks
become the task's subtasks, counted against the same limits as those a ``py>`` task adds.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from tickwork.services.agent.operators.base import OperatorContext, OperatorFailed
from tickwork.services.agent.operators.http import send
from tickwork.shared.dsl.loader import MAX_FILE_BYTES
from tickwork.shared.dsl.parser import parse_workflow_text
from tickwork.shared.errors import InvalidWorkflow

KEY = "http_call>"
FILE_NAME = "http_call.dig"
"""The name the fetched definition is parsed under (the workflow's name is its stem)."""
JSON_TYPE = "application/json"
YAML_TYPES = frozenset({"application/x-yaml", "application/yaml", "text/yaml", "text/x-yaml"})


def run_http_call(context: OperatorContext) -> dict[str, Any]:
    """Fetch the definition, check it, and hand its tasks to the executor as subtasks."""
    response = send(context, KEY, MAX_FILE_BYTES)
    url = response.url
    if len(response.body) > MAX_FILE_BYTES:
        limit = f"over the limit of {MAX_FILE_BYTES} bytes for a workflow definition"
        raise OperatorFailed(f"{KEY} {url}: the response is {limit}")
    override = context.message.params.get("content_type_override")
    kind = media_type(str(override) if override else response.content_type, url)
    text = response.text(MAX_FILE_BYTES)
    if kind == JSON_TYPE:
        text = json_for_parser(text, url)
    try:
        definition = parse_workflow_text(text, FILE_NAME, context.project_dir)
    except InvalidWorkflow as exc:
        problems = "; ".join(_problem_at(p.file, p.line, p.message) for p in exc.problems)
        raise OperatorFailed(f"{KEY} {url} gave an invalid workflow: {problems}") from None
    context.write_log(f"{KEY} {url}: {len(definition.root.children)} tasks\n")
    context.subtasks = replace(definition.root, name="^sub").to_config()
    return {}


def media_type(content_type: str, url: str) -> str:
    """The body's type without parameters, refused unless it is JSON or YAML."""
    media_type = content_type.split(";", 1)[0].strip().lower()
    if not media_type:
        raise OperatorFailed(
            f"{KEY} {url}: the response has no Content-Type (set content_type_override)"
        )
    if media_type != JSON_TYPE and media_type not in YAML_TYPES:
        raise OperatorFailed(
            f"{KEY} {url}: unsupported Content-Type {content_type!r}"
            " (expected application/json or application/x-yaml)"
        )
    return media_type


def json_for_parser(text: str, url: str) -> str:
    """JSON ``text`` ready for the workflow parser, whose lines stay those of the body.

    JSON is YAML but for tabs between tokens; in valid JSON a tab can stand nowhere
    else (inside a string it is written ``\\t``), so each becomes a space.
    """
    try:
        json.loads(text)
    except ValueError as exc:
        raise OperatorFailed(f"{KEY} {url} gave invalid JSON: {exc}") from None
    return text.replace("\t", " ")


def _problem_at(file: str, line: int | None, message: str) -> str:
    """One problem, placed in the body (``line 3``) or in the project file it names."""
    if file == FILE_NAME:
        return message if line is None else f"line {line}: {message}"
    return f"{file}:{line}: {message}" if line is not None else f"{file}: {message}"
