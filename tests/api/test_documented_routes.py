"""Every REST route README.md and docs/rest-api.md name is in the OpenAPI document.

A route whose blueprint was dropped, or whose path changed while the docs kept the old
one, fails here by name. Mentions are read from code spans and console lines:
``GET /api/sessions/{id}``, ``PUT /api/projects/examples?revision=R``; in a table cell,
``· DELETE ...`` is another method on the same path, ``· /resume`` a sibling of the path
before it, ``· /api/sessions/{id}/attempts`` another path with the same method.
"""

from __future__ import annotations

import re
from pathlib import Path

from flask.testing import FlaskClient

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = ("README.md", "docs/rest-api.md")
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
MENTION = re.compile(rf"\b({'|'.join(METHODS)}) +(/[^\s`?#)|,]*)")
FOLLOWER = re.compile(rf"· *`(?:({'|'.join(METHODS)}) +\.\.\.|(/[^\s`?#)|,]*))")
PARAMETER = re.compile(r"\{[^{}/]+\}")


def _mentions(text: str) -> set[tuple[str, str]]:
    """The (method, path) pairs ``text`` names."""
    found: set[tuple[str, str]] = set()
    for line in text.splitlines():
        for match in MENTION.finditer(line):
            method, path = match.group(1), match.group(2).rstrip(".:")
            found.add((method, path))
            found |= _followers(line[match.end() :], method, path)
    return found


def _followers(rest: str, method: str, path: str) -> set[tuple[str, str]]:
    """Mentions joined to ``method path`` by ``·`` in the rest of its table cell."""
    found: set[tuple[str, str]] = set()
    cell = rest.split(" | ", 1)[0] if "|" in rest else ""
    for match in FOLLOWER.finditer(cell):
        if match.group(1):
            found.add((match.group(1), path))
        else:
            other = match.group(2)
            if not other.startswith("/api/"):
                other = path.rsplit("/", 1)[0] + other
            found.add((method, other))
    return found


def _template(path: str) -> re.Pattern[str]:
    """A pattern a documented path matches when it names this OpenAPI path."""
    parts = PARAMETER.split(path)
    return re.compile("[^/]+".join(re.escape(part) for part in parts) + "$")


def _documented() -> dict[tuple[str, str], str]:
    routes: dict[tuple[str, str], str] = {}
    for name in DOCUMENTS:
        for mention in _mentions((REPO_ROOT / name).read_text(encoding="utf-8")):
            routes.setdefault(mention, name)
    return routes


def test_the_documents_name_the_routes_they_describe() -> None:
    documented = _documented()
    assert ("GET", "/api/projects/{name}/archive") in documented
    assert ("DELETE", "/api/projects/{name}/secrets/{key}") in documented
    assert ("POST", "/api/schedules/{id}/resume") in documented
    assert ("GET", "/api/sessions/{id}/attempts") in documented
    assert len(documented) >= 30


def test_the_openapi_document_lists_every_route_the_docs_name(
    anonymous_api: FlaskClient,
) -> None:
    paths = anonymous_api.get("/api/openapi.json").get_json()["paths"]
    operations = [
        (method.upper(), _template(path)) for path, item in paths.items() for method in item
    ]
    missing = sorted(
        f"{method} {path} ({source})"
        for (method, path), source in _documented().items()
        if not any(m == method and pattern.match(path) for m, pattern in operations)
    )
    assert missing == [], "named in the docs but not in /api/openapi.json: " + ", ".join(missing)


def test_a_table_cell_names_the_other_methods_of_its_path() -> None:
    cell = "| `POST /api/a/{id}/pause` · `/resume` `{}` · `DELETE ...` · `/api/b` | x |"
    assert _mentions(cell) == {
        ("POST", "/api/a/{id}/pause"),
        ("POST", "/api/a/{id}/resume"),
        ("DELETE", "/api/a/{id}/pause"),
        ("POST", "/api/b"),
    }
