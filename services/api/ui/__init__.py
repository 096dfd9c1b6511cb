"""The web UI: HTML pages served by the API service itself under ``/ui``.

Pages are Flask blueprints rendering Jinja templates (``templates/ui/``, autoescaped),
reading through the same store functions as the REST routes. They work as plain HTML;
the scripts under ``static/`` (ours, and pinned libraries under ``static/vendor/`` with
their versions and licences beside them) only improve them. Nothing is fetched from
elsewhere at run time.

Each page module defines ``blueprint``; :mod:`tickwork.services.api.ui.pages` imports them all and
registers them from one list (``register_ui``). This package holds what the pages and the
API's request checks share: the prefix and the shell blueprint.
"""

from __future__ import annotations

from flask import Blueprint

UI_PREFIX = "/ui"
FAVICON_PATH = "/favicon.ico"
FAVICON_FILE = "favicon.svg"

shell = Blueprint(
    "ui",
    __name__,
    url_prefix=UI_PREFIX,
    template_folder="templates",
    static_folder="static",
    static_url_path="/static",
)
"""What every page shares: the templates, the static files and the root redirect."""


def is_ui_path(path: str) -> bool:
    """Whether ``path`` is a page of the UI (or its static files), not the REST API."""
    return path == "/" or path == UI_PREFIX or path.startswith(UI_PREFIX + "/")
