"""The REST API's interactive docs at ``/api/docs``: Swagger UI from the vendored copy.

APIFlask's own docs page loads Swagger UI from a CDN and starts it with an inline script,
so it is blank offline and refused by a Content-Security-Policy without ``unsafe-inline``
scripts. This page loads the pinned files under ``/ui/static/vendor/swagger-ui/`` and
starts them from ``/ui/static/api_docs.js``, which reads the OpenAPI document's URL from
a ``data-`` attribute: it works without internet and under ``script-src 'self'``.
"""

from __future__ import annotations

from apiflask import APIFlask
from flask import Response, render_template, url_for

DOCS_PATH = "/api/docs"
DOCS_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)
"""The docs page's Content-Security-Policy: its scripts and everything it fetches come from
this server (Swagger UI sets style attributes, so those stay allowed)."""


def register_docs(app: APIFlask) -> None:
    """Serve the interactive docs of ``app``'s OpenAPI document at :data:`DOCS_PATH`."""

    @app.get(DOCS_PATH)
    @app.doc(hide=True)
    def _api_docs() -> Response:
        page = render_template(
            "ui/api_docs.html",
            title=app.title,
            version=app.version,
            spec_url=url_for("openapi.spec"),
        )
        return Response(page, headers={"Content-Security-Policy": DOCS_POLICY})
