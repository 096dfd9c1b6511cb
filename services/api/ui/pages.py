"""The UI's pages registered on the application, from one list of their blueprints.

Every page module is imported here by name, so a renamed or missing one fails when the
application is built instead of dropping its pages without a word.
"""

from __future__ import annotations

from apiflask import APIFlask
from flask import Blueprint, redirect
from werkzeug.wrappers import Response as WerkzeugResponse

from tickwork.services.api.config import ApiConfig
from tickwork.services.api.ui import (
    FAVICON_FILE,
    FAVICON_PATH,
    UI_PREFIX,
    actions,
    attempt,
    audit,
    auth,
    formatting,
    notifications,
    overview,
    pools,
    projects,
    runs,
    schedules,
    search,
    shell,
)
from tickwork.shared.store.retention import RETENTION_KEY, RetentionPolicy

PAGE_BLUEPRINTS: tuple[Blueprint, ...] = (
    auth.blueprint,
    overview.blueprint,
    projects.blueprint,
    runs.blueprint,
    attempt.blueprint,
    schedules.blueprint,
    actions.blueprint,
    search.blueprint,
    notifications.blueprint,
    pools.blueprint,
    audit.blueprint,
)
"""The pages' blueprints, registered in this order after the shell's."""


def register_ui(app: APIFlask, config: ApiConfig) -> None:
    """Serve the UI's pages on ``app``: ``/`` leads to the overview."""
    app.register_blueprint(shell)
    formatting.register(app)
    policy: RetentionPolicy = app.extensions[RETENTION_KEY]
    app.context_processor(lambda: {"retention_line": policy.sentence()})
    auth.configure(app, config)  # the session, the page guard, the headers, the error pages
    for blueprint in PAGE_BLUEPRINTS:
        app.register_blueprint(blueprint)

    @app.get("/")
    @app.doc(hide=True)
    def _root() -> WerkzeugResponse:
        return redirect(UI_PREFIX + "/", code=302)

    @app.get(FAVICON_PATH)
    @app.doc(hide=True)
    def _favicon() -> WerkzeugResponse:
        # Open (services/api/auth.py): a browser asks for it before anyone signs in.
        return shell.send_static_file(FAVICON_FILE)
