"""Signing in to the web UI, and what guards its pages.

A person signs in at ``/ui/login`` with one of the REST API's tokens (``read``,
``operate`` or ``admin``; of the environment or of the store, services/api/auth.py).
Signing in starts a session in the store (shared/store/ui_sessions.py, a row every API
replica reads) and answers with Flask's session cookie: signed, HttpOnly, SameSite=Strict,
Secure when the request came over https. The cookie holds the session's random id (the
store keeps only its SHA-256) and its CSRF token, never the token. Every guarded request
reads the session's row by its primary key: a session that ended, or was not used for 12
hours, no longer opens a page, whichever replica is asked and whatever copy of the cookie
is shown. Its last use is written at most once a minute. Signing out ends the row, so
every copy of the cookie stops working at once; a session whose token (kept on the row as
a keyed digest, or for a store token as the store's digest) is no longer configured, or
was revoked or has expired, ends, with every other session of that token, at its next
request (revoking a token ends them at once). Ended and idle rows are deleted at each
sign-in.

Failed sign-ins, and requests to ``/ui`` with a bearer token that is not valid, are
limited per client address together, in each API process (10 at once, then one every 6
seconds; then 429 with ``Retry-After``).

The cookie's signing key (``app.secret_key``) is derived with HKDF-SHA256 and a purpose
label, never used raw: from ``TICKWORK_SECRET_KEY`` when it is set, else from every
configured token together (so a read token's holder cannot forge a cookie), else, with
neither (a loopback standalone without tokens), it is random for the life of the server.

Every ``/ui`` page but the login page and the static files needs a session; every other
method than GET and HEAD needs the session's CSRF token (the form field ``csrf_token``, or
the header ``X-CSRF-Token`` from a script) and an operate or admin token (a read token
gets 403). A request carrying ``Authorization: Bearer TOKEN`` is that token's holder
without a cookie or a CSRF token: a browser never adds that header to a request on its
own, so a forged cross-site request cannot carry it. With authentication off, pages are
open and everyone may act (the page says so); their forms still carry the CSRF token.

Every UI answer carries a Content-Security-Policy without inline scripts or styles,
``X-Content-Type-Options: nosniff`` and ``Referrer-Policy: same-origin``, and every
guarded one ``Cache-Control: no-store`` unless it says otherwise (no signed-in page stays
in a cache after signing out; the state colours' stylesheet may be kept); errors on UI
paths are HTML pages (``templates/ui/error.html``), not problem documents.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode, urlsplit

from apiflask import APIFlask
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from flask import (
    Blueprint,
    Flask,
    Response,
    current_app,
    flash,
    g,
    redirect,
    render_template,
    request,
    session,
)
from flask.sessions import SecureCookieSessionInterface
from werkzeug.wrappers import Response as WerkzeugResponse

from tickwork.services.api.auth import (
    READ_METHODS,
    Identity,
    identify,
    may,
    required_role,
    stored_identity,
)
from tickwork.services.api.config import ApiConfig
from tickwork.services.api.database import read_connection, write_transaction
from tickwork.services.api.errors import ERROR_PAGE_KEY, PROBLEM_TYPES, ApiProblem
from tickwork.services.api.ratelimit import RateLimiter, retry_after_header
from tickwork.services.api.ui import UI_PREFIX, is_ui_path
from tickwork.shared.clock import utc_now
from tickwork.shared.store.api_tokens import find_token_by_digest, secret_digest
from tickwork.shared.store.ui_sessions import (
    end_token_ui_sessions,
    end_ui_session,
    find_ui_session,
    remove_finished_ui_sessions,
    start_ui_session,
    touch_ui_session,
)

HOME = UI_PREFIX + "/"
LOGIN_PATH = UI_PREFIX + "/login"
LOGOUT_PATH = UI_PREFIX + "/logout"
STATIC_PREFIX = UI_PREFIX + "/static/"
SESSION_COOKIE = "tickwork_session"
SESSION_LIFETIME = timedelta(hours=12)
SESSION_TOUCH_INTERVAL = timedelta(minutes=1)  # how often a session's last use is written
SESSION_ID_KEY = "sid"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"
SIGN_IN_KEY = "tickwork.ui_sign_in"
FAILED_SIGN_INS_BURST = 10
FAILED_SIGN_INS_PER_SECOND = 1 / 6
AUTH_OFF_NOTICE = "Sign-in is off: this server takes no tokens (loopback standalone)"
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "frame-ancestors 'none'",
        "base-uri 'self'",
        "form-action 'self'",
    )
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}

blueprint = Blueprint("ui_auth", __name__, url_prefix=UI_PREFIX)


@dataclass(frozen=True)
class SignIn:
    """What signing in needs: the settings, the key of token digests, each configured
    token's digest with its identity, and the count of failed sign-ins per client."""

    config: ApiConfig
    digest_key: bytes
    digests: tuple[tuple[str, Identity], ...]
    failures: RateLimiter

    @classmethod
    def of(cls, config: ApiConfig, session_key: bytes) -> SignIn:
        """The sign-in of ``config``, its digests keyed from ``session_key``."""
        digest_key = derive_key(session_key, b"tickwork web UI token digests")
        digests = tuple(
            (token_digest(digest_key, t.token), Identity(t.label, t.role, stored=False))
            for t in config.tokens
        )
        failures = RateLimiter(FAILED_SIGN_INS_PER_SECOND, FAILED_SIGN_INS_BURST)
        return cls(config, digest_key, digests, failures)

    def limit_attempt(self) -> None:
        """Count one try of a token from this client (a sign-in, a bearer token on a
        page): 429 once the client's tries are used up. A try that matches gives it back
        (:meth:`RateLimiter.release`)."""
        client: str = g.client  # the address here (services/api/auth.py)
        wait = self.failures.acquire(client)
        if wait is not None:
            raise ApiProblem(
                429,
                "too many tokens that are not valid from this address; wait and try again",
                headers={"Retry-After": retry_after_header(wait)},
            )

    def check_token(self, given: str) -> Identity | None:
        """The identity of token ``given`` (of the environment or the store), counted by
        :meth:`limit_attempt` when it is none."""
        self.limit_attempt()
        identity = identify(given, self.config)
        if identity is not None:
            self.failures.release(g.client)
        return identity

    def session_digest(self, given: str, identity: Identity) -> str:
        """What a session of token ``given`` keeps of it: the store's digest for a store
        token (so that revoking it ends the session), else a keyed digest."""
        return secret_digest(given) if identity.stored else token_digest(self.digest_key, given)

    def identity_of(self, digest: str) -> Identity | None:
        """The identity of the token a session's ``digest`` stands for: an environment
        token's (compared against every one in constant time), else a live store token's;
        None when neither has it any more."""
        found: Identity | None = None
        for candidate, identity in self.digests:
            if hmac.compare_digest(candidate.encode(), digest.encode()) and found is None:
                found = identity
        if found is not None:
            return found
        with read_connection() as conn:
            stored = find_token_by_digest(conn, digest, utc_now())
        return stored_identity(stored) if stored is not None else None


class UiSessionInterface(SecureCookieSessionInterface):
    """Flask's signed cookie session, marked Secure when the request came over https."""

    def get_cookie_secure(self, app: Flask) -> bool:
        return request.is_secure


def derive_key(material: bytes, purpose: bytes) -> bytes:
    """A 32-byte key for ``purpose`` derived from ``material`` (HKDF-SHA256)."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose).derive(material)


def token_digest(digest_key: bytes, token: str) -> str:
    """What a session holds instead of ``token``: its HMAC-SHA256 under ``digest_key``."""
    return hmac.new(
        digest_key, token.encode("utf-8", "surrogateescape"), hashlib.sha256
    ).hexdigest()


def session_key(config: ApiConfig) -> bytes:
    """The key signing the UI's cookies: from TICKWORK_SECRET_KEY, else from every token,
    else the server's random key."""
    if config.secret_key:
        return derive_key(config.secret_key.encode(), b"tickwork web UI sessions")
    if config.tokens:
        every = "\n".join(sorted(f"{t.role}:{t.token}" for t in config.tokens))
        return derive_key(every.encode(), b"tickwork web UI sessions from tokens")
    return config.fallback_session_key


def configure(app: APIFlask, config: ApiConfig) -> None:
    """Set the session cookie, the page guard, the security headers and the error pages."""
    key = session_key(config)
    app.secret_key = key
    app.session_interface = UiSessionInterface()
    app.config.update(
        SESSION_COOKIE_NAME=SESSION_COOKIE,
        SESSION_COOKIE_PATH=UI_PREFIX,  # pages only: the REST API never sees it
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        PERMANENT_SESSION_LIFETIME=SESSION_LIFETIME,
    )
    app.extensions[SIGN_IN_KEY] = SignIn.of(config, key)
    app.extensions[ERROR_PAGE_KEY] = error_page
    app.before_request(_guard)
    app.after_request(_secure_headers)
    app.context_processor(_template_context)
    # A global, not a context value: macros imported without context (ui.csrf()) see it.
    app.jinja_env.globals["csrf_token"] = csrf_token


def _sign_in() -> SignIn:
    sign_in: SignIn = current_app.extensions[SIGN_IN_KEY]
    return sign_in


def _guarded(path: str) -> bool:
    """Whether ``path`` is a page that needs a session (all of /ui but login and static)."""
    in_ui = path == UI_PREFIX or path.startswith(UI_PREFIX + "/")
    return in_ui and path != LOGIN_PATH and not path.startswith(STATIC_PREFIX)


def _guard() -> WerkzeugResponse | None:
    """Before a page: who is asking; a redirect to sign in; 400 without the CSRF token,
    403 for a read token (but to sign out), on anything but GET and HEAD."""
    if not _guarded(request.path):
        return None
    sign_in = _sign_in()
    if not sign_in.config.auth_enabled:
        g.ui_signed_in, g.ui_identity, by_bearer = True, None, False
    else:
        g.ui_identity, by_bearer = _who_is_asking(sign_in)
        g.ui_signed_in = g.ui_identity is not None
        if not g.ui_signed_in:
            return _to_sign_in()
    g.ui_role = g.ui_identity.role if g.ui_identity is not None else None
    if request.method not in READ_METHODS and not by_bearer:
        _check_csrf()
    identity: Identity | None = g.ui_identity
    required = required_role(request.endpoint, request.method)
    if identity is not None and not may(identity.role, required) and request.path != LOGOUT_PATH:
        if required == "admin":
            raise ApiProblem(403, f"this page is for admin tokens; {identity.name} is not one")
        raise ApiProblem(
            403, "a read token may look but not act; sign in with an operate or admin token"
        )
    return None


def _who_is_asking(sign_in: SignIn) -> tuple[Identity | None, bool]:
    """The identity of the request's bearer token or session, and whether it came as a
    bearer token; a bearer token that is not valid is a 401."""
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and given.strip():
        identity = sign_in.check_token(given.strip())
        if identity is None:
            raise ApiProblem(
                401,
                "the bearer token is not valid",
                headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )
        return identity, True
    return _session_identity(sign_in), False


def _session_identity(sign_in: SignIn) -> Identity | None:
    """The identity of the cookie's session if the store says it is live and its token
    is still configured (or live in the store); else None, the cookie emptied and, for a
    token no longer accepted, every session of that token ended."""
    session_id = session.get(SESSION_ID_KEY)
    if not isinstance(session_id, str):
        return None
    now = utc_now()
    with read_connection() as conn:
        found = find_ui_session(conn, session_id)
    if found is None or not found.is_live(now, SESSION_LIFETIME):
        session.clear()
        return None
    identity = sign_in.identity_of(found.token_digest)
    if identity is None:
        with write_transaction() as conn:
            end_token_ui_sessions(conn, found.token_digest, now)
        session.clear()
        flash("Your token is no longer accepted: sign in again.", "error")
        return None
    if now - found.last_seen_at >= SESSION_TOUCH_INTERVAL:
        with write_transaction() as conn:
            touch_ui_session(conn, session_id, now)
    return identity


def _to_sign_in() -> WerkzeugResponse:
    """A redirect to the login page, coming back here (for a GET) afterwards."""
    if request.method in READ_METHODS:
        query = request.query_string.decode("latin-1")
        back = request.path + ("?" + query if query else "")
    else:  # a form sent after its session ended: back to the page that held it
        back = local_target(
            urlsplit(request.referrer or "")._replace(scheme="", netloc="").geturl()
        )
    if back == HOME:
        return redirect(LOGIN_PATH, code=303)
    return redirect(LOGIN_PATH + "?" + urlencode({"next": back}), code=303)


def _check_csrf() -> None:
    expected = session.get("csrf")
    given = request.headers.get(CSRF_HEADER) or request.form.get(CSRF_FIELD, "")
    if not isinstance(expected, str) or not hmac.compare_digest(expected.encode(), given.encode()):
        raise ApiProblem(
            400, "the form's CSRF token is missing or out of date: reload the page and try again"
        )


def csrf_token() -> str:
    """The session's CSRF token, made when it has none yet."""
    token = session.get("csrf")
    if not isinstance(token, str):
        token = secrets.token_urlsafe(32)
        session["csrf"] = token
    return token


def local_target(value: str | None) -> str:
    """``value`` if it is a path of the UI on this server, else the overview: a ``next=``
    never leads to another site."""
    if not value or any(ord(ch) < 0x20 or ch == "\\" for ch in value):
        return HOME
    parts = urlsplit(value)
    in_ui = parts.path == UI_PREFIX or parts.path.startswith(UI_PREFIX + "/")
    climbs = ".." in parts.path.split("/")
    if parts.scheme or parts.netloc or not in_ui or climbs or parts.path == LOGIN_PATH:
        return HOME
    return value


def _template_context() -> dict[str, Any]:
    config = _sign_in().config
    identity: Identity | None = g.get("ui_identity")
    return {
        "auth_enabled": config.auth_enabled,
        "role": identity.role if identity is not None else None,
        "identity_name": identity.name if identity is not None else None,
        "identity_projects": identity.projects if identity is not None else (),
        "signed_in": bool(g.get("ui_signed_in")),
        "can_act": not config.auth_enabled
        or (identity is not None and may(identity.role, "operate")),
        "auth_off_notice": AUTH_OFF_NOTICE,
    }


def _secure_headers(response: Response) -> Response:
    if is_ui_path(request.path):
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
    if _guarded(request.path):  # unless the page said how it may be kept (a stylesheet)
        response.headers.setdefault("Cache-Control", "no-store")
    return response


def error_page(problem: ApiProblem) -> Response | None:
    """``problem`` as an HTML page for a UI path; None elsewhere (a problem document)."""
    if not is_ui_path(request.path):
        return None
    _, title = PROBLEM_TYPES.get(problem.status, ("error", "Error"))
    message = "There is no page at this address." if problem.status == 404 else problem.detail
    html = render_template("ui/error.html", status=problem.status, title=title, message=message)
    response = Response(html, problem.status, mimetype="text/html")
    for name, value in problem.headers.items():
        response.headers[name] = value
    return response


@blueprint.get("/login")
def login() -> WerkzeugResponse | str:
    """The sign-in form; straight on to ``next`` when already signed in or sign-in is off."""
    target = local_target(request.args.get("next"))
    sign_in = _sign_in()
    if not sign_in.config.auth_enabled or _session_identity(sign_in) is not None:
        return redirect(target, code=303)
    return render_template("ui/login.html", target=target, error=None)


@blueprint.post("/login")
def login_submit() -> WerkzeugResponse | tuple[str, int, dict[str, str]]:
    """Check the token; on a match start a session and go on to ``next``."""
    target = local_target(request.form.get("next"))
    sign_in = _sign_in()
    if not sign_in.config.auth_enabled:
        return redirect(target, code=303)
    _check_origin()
    given = request.form.get("token", "").strip()
    identity = sign_in.check_token(given)
    if identity is None:
        html = render_template("ui/login.html", target=target, error="That token is not valid.")
        return html, 401, {"WWW-Authenticate": 'Bearer realm="tickwork"'}
    g.ui_identity = identity  # the audit log's actor of this sign-in
    session_id = secrets.token_urlsafe(32)
    now = utc_now()
    with write_transaction() as conn:
        remove_finished_ui_sessions(conn, now, SESSION_LIFETIME)
        digest = sign_in.session_digest(given, identity)
        start_ui_session(conn, session_id, digest, identity.role, now)
    session.clear()
    session.permanent = True
    session[SESSION_ID_KEY] = session_id
    session["csrf"] = secrets.token_urlsafe(32)
    return redirect(target, code=303)


def _check_origin() -> None:
    """Refuse a sign-in posted from another site (which would sign a victim in as the
    attacker): a browser names the page's origin, or the kind of site, on every POST."""
    origin = request.headers.get("Origin")
    fetch_site = request.headers.get("Sec-Fetch-Site")
    foreign_origin = origin is not None and urlsplit(origin).netloc != request.host
    foreign_site = fetch_site not in (None, "same-origin", "none")
    if foreign_origin or foreign_site:
        raise ApiProblem(403, "a sign-in must come from this server's own login page")


@blueprint.post("/logout")
def logout() -> WerkzeugResponse:
    """End the session in the store, for every copy of its cookie on every replica (the
    guard has checked its CSRF token), and show the login page."""
    session_id = session.get(SESSION_ID_KEY)
    if isinstance(session_id, str):
        with write_transaction() as conn:
            end_ui_session(conn, session_id, utc_now())
    session.clear()
    return redirect(LOGIN_PATH, code=303)
