"""``http>``: an HTTP request, as Digdag's ``http>`` sends it.

Params (each also read from a nested ``http:`` mapping, as Digdag merges it in):

- ``method`` (GET); ``query`` (a mapping, or a string added to the URL's query);
  ``headers``: a list of single-entry mappings (Digdag's form: ``- Accept: text/csv``,
  a name may repeat) or one mapping;
- ``content``, sent as ``content_format`` says: ``text`` (a scalar as it is written,
  ``text/plain``), ``json`` (``application/json``) or ``form`` (a mapping of scalars,
  ``application/x-www-form-urlencoded``); by default ``json`` for a mapping or a list,
  ``text`` for anything else; ``content_type`` replaces the ``Content-Type`` it implies;
- ``retry``: whether a connection error, a 408, a 429 or a 5xx is tried again. By default
  only for GET, HEAD, OPTIONS and TRACE (a POST that fails once is not sent again, as in
  Digdag), or when ``retries`` (how many more times: 3) is given; another 4xx never is;
- ``timeout`` (seconds, 30) and ``store_content`` (the answer's body as
  ``${http.last_content}``, parsed when it is JSON); ``${http.last_status}`` is always set;
- ``follow_redirects`` (true: up to 8 redirects are followed; false: a 3xx answer ends the
  task, successfully, as in Digdag), ``insecure`` (true: an HTTPS server's certificate is
  not checked), and ``proxy`` (``{enabled: true, host: H, port: P}``: the request goes
  through that HTTP proxy; without it, the agent's ``http_proxy``/``https_proxy``/
  ``no_proxy`` environment applies, as in Digdag).

The project's secrets ``http.uri`` (the URL, when it must not be written in the
workflow), ``http.authorization`` (the ``Authorization`` header) or ``http.user`` and
``http.password`` (Basic authentication) are used when set; ``${secret:name}`` may stand
in the URL, ``headers``, ``query`` and ``content``. Every request carries an
``Idempotency-Key`` made of the attempt and the task, the same on every retry.
``http_call>`` sends its request with the same options (:func:`send`).
"""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from email.message import Message
from typing import Any

from tickwork.services.agent.operators.base import OperatorContext, OperatorFailed
from tickwork.shared.domain.numbers import decimal_number

DEFAULT_TIMEOUT_SECONDS = 30.0
DEFAULT_RETRIES = 3
MAX_RETRIES = 10
RETRY_BASE_SECONDS = 0.5
MAX_CONTENT_BYTES = 4 * 1024 * 1024
RETRIED_CLIENT_ERRORS = frozenset({408, 429})
"""The 4xx answers tried again (when the request may be): a timeout, too many requests."""
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"})
RETRIED_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
"""Methods tried again by default: sending them twice changes nothing (Digdag's list)."""
CONTENT_FORMATS = ("text", "json", "form")
MAX_REDIRECTS = 8
"""Redirects followed before the request fails (Digdag's ``config.http.max_redirects``)."""


@dataclass(frozen=True)
class HttpResponse:
    """A final answer: its status, its ``Content-Type`` (without parameters, lower case,
    "" when missing), and its body decoded with the charset it names (UTF-8 otherwise).

    ``body`` holds at most the byte limit the request was sent with, plus one byte: a
    longer body shows that the answer was cut.
    """

    url: str
    status: int
    content_type: str
    body: bytes
    charset: str

    def text(self, limit: int) -> str:
        """The first ``limit`` bytes of the body, decoded."""
        return self.body[:limit].decode(self.charset, errors="replace")


def run_http(context: OperatorContext) -> dict[str, Any]:
    """Send the request; a final status of 400 or more fails the task. Stores
    ``http.last_status``, and ``http.last_content`` with ``store_content``."""
    response = send(context, "http>", MAX_CONTENT_BYTES)
    stored: dict[str, Any] = {"last_status": response.status}
    if _option(context.message.params, "store_content"):
        content = response.text(MAX_CONTENT_BYTES)
        try:
            stored["last_content"] = json.loads(content)
        except ValueError:
            stored["last_content"] = content
    return {"http": stored}


def _option(params: dict[str, Any], name: str, default: Any = None) -> Any:
    """The task's param ``name``, else the nested ``http:`` mapping's, else ``default``."""
    if name in params:
        return params[name]
    nested = params.get("http")
    if isinstance(nested, dict) and name in nested:
        return nested[name]
    return default


def send(context: OperatorContext, key: str, max_bytes: int) -> HttpResponse:
    """Send the request a task's command (the URL) and params describe, retrying as they
    say; read at most ``max_bytes`` + 1 bytes of the answer. A final status of 400 or
    more fails the task; ``key`` (``http>``) names the operator in errors."""
    message = context.message
    params = message.params
    secrets = context.secrets
    url = secrets.get("http.uri") or str(message.command)
    url = _with_query(url, _option(params, "query"), key)
    method = str(_option(params, "method", "GET")).upper()
    if method not in METHODS:
        raise OperatorFailed(f"'{key}' method must be one of {', '.join(sorted(METHODS))}")
    headers = _headers(_option(params, "headers"), key)
    _authorize(headers, secrets)
    headers.append(("Idempotency-Key", f"tickwork-{message.attempt_id}-{message.task_id}"))
    body = _body(params, headers, key)
    timeout = _number(_option(params, "timeout", DEFAULT_TIMEOUT_SECONDS), "timeout", key)
    retries = _retries(params, method, key)
    request = _Request(url, method, headers, body, timeout, max_bytes)
    response = _send(context, request, retries, _opener(params, key))
    if response.status >= 400:
        raise OperatorFailed(f"{method} {url} answered {response.status}")
    return response


@dataclass(frozen=True)
class _Request:
    url: str
    method: str
    headers: list[tuple[str, str]]  # in order; a name may repeat
    body: bytes | None
    timeout: float
    max_bytes: int


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Follows at most :data:`MAX_REDIRECTS` redirects, or none: a 3xx is then the answer."""

    max_redirections = MAX_REDIRECTS

    def __init__(self, follow: bool) -> None:
        self.follow = follow

    def redirect_request(
        self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> Any:
        if not self.follow:
            return None  # urllib then raises HTTPError with the 3xx, read as the answer
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _opener(params: dict[str, Any], key: str) -> urllib.request.OpenerDirector:
    """The opener the options describe: redirects, certificate checks, proxy."""
    follow = _flag(_option(params, "follow_redirects", True), "follow_redirects", key)
    handlers: list[urllib.request.BaseHandler] = [_Redirects(follow)]
    if _flag(_option(params, "insecure", False), "insecure", key):
        unchecked = ssl.create_default_context()
        unchecked.check_hostname = False
        unchecked.verify_mode = ssl.CERT_NONE
        handlers.append(urllib.request.HTTPSHandler(context=unchecked))
    proxy = _proxy(_option(params, "proxy"), key)
    if proxy is not None:
        handlers.append(urllib.request.ProxyHandler({"http": proxy, "https": proxy}))
    return urllib.request.build_opener(*handlers)


def _proxy(value: Any, key: str) -> str | None:
    """The ``proxy`` option's URL when it is enabled (Digdag's ``enabled``, ``host``,
    ``port``); a proxy reached over TLS is refused, as urllib cannot speak TLS to one."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise OperatorFailed(f"'{key}' proxy must be a mapping of enabled, host and port")
    if not _flag(value.get("enabled", False), "proxy.enabled", key):
        return None
    host, port = value.get("host"), value.get("port")
    if not isinstance(host, str) or not host or any(c in host for c in "/@?# "):
        raise OperatorFailed(f"'{key}' proxy.host must be a host name, got {host!r}")
    number = decimal_number(port)
    if number is None or number != int(number) or not 0 < number < 65536:
        raise OperatorFailed(f"'{key}' proxy.port must be a port number, got {port!r}")
    if _flag(value.get("tls", False), "proxy.tls", key):
        raise OperatorFailed(f"'{key}' proxy.tls is not supported: reach the proxy over plain HTTP")
    return f"http://{host}:{int(number)}"


def _flag(value: Any, name: str, key: str) -> bool:
    """A true-or-false option, also written as the text ``true``/``false`` (from ``${...}``)."""
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise OperatorFailed(f"'{key}' {name} must be true or false, got {value!r}")
    return value


def _send(
    context: OperatorContext,
    request: _Request,
    retries: int,
    opener: urllib.request.OpenerDirector,
) -> HttpResponse:
    method, url = request.method, request.url
    for attempt in range(retries + 1):
        sent = urllib.request.Request(url, request.body, method=method)
        for name, value in request.headers:
            _add_header(sent, name, value)
        try:
            with opener.open(sent, timeout=request.timeout) as answer:
                status, headers = answer.status, answer.headers
                content = answer.read(request.max_bytes + 1)
        except urllib.error.HTTPError as exc:
            status, headers, content = exc.code, exc.headers, exc.read(request.max_bytes + 1)
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            context.write_log(f"{method} {url}: {reason}\n")
            if attempt == retries:
                raise OperatorFailed(f"{method} {url} failed: {reason}") from None
            time.sleep(RETRY_BASE_SECONDS * 2**attempt)
            continue
        context.write_log(f"{method} {url}: {status}\n")
        if not _retried(status) or attempt == retries:
            return _response(url, status, headers, content)
        time.sleep(RETRY_BASE_SECONDS * 2**attempt)
    raise AssertionError("unreachable")


def _response(url: str, status: int, headers: Message, content: bytes) -> HttpResponse:
    content_type = headers.get_content_type() if headers.get("Content-Type") else ""
    charset = headers.get_content_charset() or "utf-8"
    try:
        "".encode(charset)
    except LookupError:
        charset = "utf-8"
    return HttpResponse(url, status, content_type, content, charset)


def _with_query(url: str, query: Any, key: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise OperatorFailed(f"'{key}' needs an http:// or https:// URL, got {url!r}")
    if query is None or query == "" or query == {}:
        return url
    if isinstance(query, dict):
        text = urllib.parse.urlencode({str(k): _query_value(v) for k, v in query.items()})
    elif isinstance(query, str):
        text = query.removeprefix("?")
    else:
        raise OperatorFailed(f"'{key}' query must be a mapping or a string, got {query!r}")
    return f"{url}{'&' if '?' in url else '?'}{text}"


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def _retried(status: int) -> bool:
    """Whether an answer of ``status`` is tried again (if the request may be): a 408 or a
    429, a 5xx, or a status no class names; never a success, a redirect or another 4xx."""
    if status < 200 or status >= 600:
        return True
    return status in RETRIED_CLIENT_ERRORS or 500 <= status < 600


def _add_header(request: urllib.request.Request, name: str, value: str) -> None:
    """Add a header; one of a name already there gets the value after a comma, as HTTP
    reads repeated headers (urllib keeps one per name). ``Authorization`` is not sent on
    to where a redirect leads."""
    key = name.capitalize()  # as urllib keys them
    existing = request.headers.get(key) or request.unredirected_hdrs.get(key)
    joined = value if existing is None else f"{existing}, {value}"
    if key == "Authorization":
        request.add_unredirected_header(key, joined)
    else:
        request.add_header(key, joined)


def _headers(value: Any, key: str) -> list[tuple[str, str]]:
    """The ``headers`` param: a list of single-entry mappings (Digdag's form, in order,
    names may repeat) or one mapping."""
    if value is None:
        return []
    if isinstance(value, dict):
        return [(str(k), _scalar_text(v)) for k, v in value.items()]
    if isinstance(value, list):
        found = []
        for index, entry in enumerate(value):
            if not isinstance(entry, dict) or len(entry) != 1:
                raise OperatorFailed(
                    f"'{key}' headers[{index}] must be one 'Name: value' entry, got {entry!r}"
                )
            ((name, header),) = entry.items()
            found.append((str(name), _scalar_text(header)))
        return found
    raise OperatorFailed(
        f"'{key}' headers must be a list of 'Name: value' entries or a mapping, got {value!r}"
    )


def _authorize(headers: list[tuple[str, str]], secrets: dict[str, str]) -> None:
    """The secret ``http.authorization`` as the Authorization header, else ``http.user``
    and ``http.password`` as Basic authentication (Digdag's order)."""
    authorization = secrets.get("http.authorization")
    user = secrets.get("http.user")
    if authorization:
        headers.append(("Authorization", authorization))
    elif user:
        pair = f"{user}:{secrets.get('http.password', '')}".encode()
        headers.append(("Authorization", "Basic " + base64.b64encode(pair).decode("ascii")))


def _scalar_text(value: Any) -> str:
    """A scalar as Digdag writes it in text: strings as they are, others as JSON does
    (``true``, ``42``, ``null``)."""
    return value if isinstance(value, str) else json.dumps(value)


def _body(params: dict[str, Any], headers: list[tuple[str, str]], key: str) -> bytes | None:
    """The ``content`` param as ``content_format`` says; its Content-Type added unless
    ``content_type`` or a ``Content-Type`` header names another."""
    content = _option(params, "content")
    if content is None:
        return None
    container = isinstance(content, dict | list)
    given = _option(params, "content_format")
    form = str(given).lower() if given is not None else ("json" if container else "text")
    if form not in CONTENT_FORMATS:
        raise OperatorFailed(
            f"'{key}' content_format must be one of {', '.join(CONTENT_FORMATS)}, got {given!r}"
        )
    if form == "json":
        body, implied = json.dumps(content).encode(), "application/json"
    elif form == "text":
        if container:
            raise OperatorFailed(
                f"'{key}' content_format text needs a scalar content, not a "
                f"{'mapping' if isinstance(content, dict) else 'list'} (use json)"
            )
        body, implied = _scalar_text(content).encode(), "text/plain; charset=utf-8"
    else:
        if not isinstance(content, dict) or any(
            isinstance(v, dict | list) for v in content.values()
        ):
            raise OperatorFailed(
                f"'{key}' content_format form needs a mapping of scalars, got {content!r}"
            )
        pairs = [(str(k), _scalar_text(v)) for k, v in content.items()]
        body, implied = urllib.parse.urlencode(pairs).encode(), "application/x-www-form-urlencoded"
    content_type = _option(params, "content_type")
    if not any(name.lower() == "content-type" for name, _ in headers):
        headers.append(("Content-Type", str(content_type) if content_type else implied))
    return body


def _retries(params: dict[str, Any], method: str, key: str) -> int:
    """How many more times a failed request is sent: ``retries`` (3) when ``retry`` is
    true, or, without ``retry``, when the method may be sent twice or ``retries`` is
    given; else none."""
    retry = _option(params, "retry")
    count = _option(params, "retries")
    if isinstance(retry, int) and not isinstance(retry, bool):
        retry = None  # the built-in ${retry} (the task's retry count), not this option
    if retry is not None:
        retry = _flag(retry, "retry", key)
    else:
        retry = method in RETRIED_METHODS or count is not None
    if not retry:
        return 0
    retries = int(_number(DEFAULT_RETRIES if count is None else count, "retries", key))
    if not 0 <= retries <= MAX_RETRIES:
        raise OperatorFailed(f"'{key}' retries must be from 0 to {MAX_RETRIES}")
    return retries


def _number(value: Any, name: str, key: str) -> float:
    number = decimal_number(value)
    if number is None:
        raise OperatorFailed(f"'{key}' {name} must be a number, got {value!r}")
    if number < 0:
        raise OperatorFailed(f"'{key}' {name} must not be negative")
    return number
