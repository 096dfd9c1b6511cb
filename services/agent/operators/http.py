"""``http>``: an HTTP request, retried on connection errors, 429 and 5xx.

Params: ``method`` (GET), ``headers`` (a mapping), ``query`` (a mapping or a string added
to the URL's query), ``content`` (a string is sent as it is, anything else as JSON),
``store_content`` (store the response body as ``${http.last_content}``, parsed when it is
JSON), ``timeout`` (seconds, 30) and ``retries`` (3; 0 sends once).
Every request carries an ``Idempotency-Key`` made of the attempt and the task, the same
on every retry, so a server can tell a repeated request from a new one. ``http_call>``
sends its request with the same options (:func:`send`).
"""

from __future__ import annotations

import json
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
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


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
    """Send the request; a final status of 400 or more fails the task."""
    response = send(context, "http>", MAX_CONTENT_BYTES)
    if not context.message.params.get("store_content"):
        return {}
    content = response.text(MAX_CONTENT_BYTES)
    try:
        parsed: Any = json.loads(content)
    except ValueError:
        parsed = content
    return {"http": {"last_content": parsed}}


def send(context: OperatorContext, key: str, max_bytes: int) -> HttpResponse:
    """Send the request a task's command (the URL) and params describe, retrying as they
    say; read at most ``max_bytes`` + 1 bytes of the answer. A final status of 400 or
    more fails the task; ``key`` (``http>``) names the operator in errors."""
    message = context.message
    params = message.params
    url = _with_query(str(message.command), params.get("query"), key)
    method = str(params.get("method", "GET")).upper()
    if method not in METHODS:
        raise OperatorFailed(f"'{key}' method must be one of {', '.join(sorted(METHODS))}")
    headers = _headers(params.get("headers"), key)
    headers.setdefault("Idempotency-Key", f"tickwork-{message.attempt_id}-{message.task_id}")
    body = _body(params.get("content"), headers)
    timeout = _number(params.get("timeout", DEFAULT_TIMEOUT_SECONDS), "timeout", key)
    retries = _retries(params, key)
    request = _Request(url, method, headers, body, timeout, max_bytes)
    response = _send(context, request, retries)
    if response.status >= 400:
        raise OperatorFailed(f"{method} {url} answered {response.status}")
    return response


@dataclass(frozen=True)
class _Request:
    url: str
    method: str
    headers: dict[str, str]
    body: bytes | None
    timeout: float
    max_bytes: int


def _send(context: OperatorContext, request: _Request, retries: int) -> HttpResponse:
    method, url = request.method, request.url
    for attempt in range(retries + 1):
        sent = urllib.request.Request(url, request.body, request.headers, method=method)
        try:
            with urllib.request.urlopen(sent, timeout=request.timeout) as answer:
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
        if status not in RETRYABLE_STATUS or attempt == retries:
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


def _headers(value: Any, key: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise OperatorFailed(f"'{key}' headers must be a mapping, got {value!r}")
    return {str(k): str(v) for k, v in value.items()}


def _body(content: Any, headers: dict[str, str]) -> bytes | None:
    if content is None:
        return None
    if isinstance(content, str):
        return content.encode()
    headers.setdefault("Content-Type", "application/json")
    return json.dumps(content).encode()


def _retries(params: dict[str, Any], key: str) -> int:
    retries = int(_number(params.get("retries", DEFAULT_RETRIES), "retries", key))
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
