"""The web UI: HTML pages served by the API service itself under ``/ui``.

Pages are Flask blueprints rendering Jinja templates (``templates/ui/``, autoescaped),
reading through the same store functions as the REST routes. They work as plain HTML;
the scripts under ``static/`` (ours, and pinned libraries under ``static/vendor/`` with
their versions and licences beside them) only improve them. Nothing is fetched from
elsewhere at run time.

Each page module defines ``blueprint`` (and may define ``configure(app, config)`` for
what it sets on the application); a module not written yet is left out, as the REST
routes' are.
"""

from __future__ import annotations

import importlib
import importlib.util

from apiflask import APIFlask
from flask import Blueprint, redirect
from werkzeug.wrappers import Response as WerkzeugResponse

from services.api.config import ApiConfig
from services.api.ui import formatting
from shared.store.retention import RETENTION_KEY, RetentionPolicy

UI_PREFIX = "/ui"
FAVICON_PATH = "/favicon.ico"
FAVICON_FILE = "favicon.svg"
UI_MODULES = (
    "auth",
    "overview",
    "projects",
    "runs",
    "attempt",
    "schedules",
    "actions",
    "search",
)

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


def register_ui(app: APIFlask, config: ApiConfig) -> None:
    """Serve the UI's pages on ``app``: ``/`` leads to the overview."""
    app.register_blueprint(shell)
    formatting.register(app)
    policy: RetentionPolicy = app.extensions[RETENTION_KEY]
    app.context_processor(lambda: {"retention_line": policy.sentence()})
    for name in UI_MODULES:
        module_name = f"services.api.ui.{name}"
        if importlib.util.find_spec(module_name) is None:
            continue
        module = importlib.import_module(module_name)
        configure = getattr(module, "configure", None)
        if configure is not None:
            configure(app, config)
        app.register_blueprint(module.blueprint)

    @app.get("/")
    @app.doc(hide=True)
    def _root() -> WerkzeugResponse:
        return redirect(UI_PREFIX + "/", code=302)

    @app.get(FAVICON_PATH)
    @app.doc(hide=True)
    def _favicon() -> WerkzeugResponse:
        # Open (services/api/auth.py): a browser asks for it before anyone signs in.
        return shell.send_static_file(FAVICON_FILE)
