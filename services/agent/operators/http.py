"""``http>``: an HTTP request, retried on connection errors, 429 and 5xx.

Params: ``method`` (GET), ``headers`` (a mapping), ``content`` (a string is sent as it is,
anything else as JSON), ``store_content`` (store the response body as
``${http.last_content}``, parsed when it is JSON), ``timeout`` (seconds, 30) and
``retries`` (3). Every request carries an ``Idempotency-Key`` made of the attempt and the
task, the same on every retry, so a server can tell a repeated request from a new one.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from services.agent.operators.base import OperatorContext, OperatorFailed
from shared.domain.numbers import decimal_number

DEFAULT_TIMEOUT_SECONDS = 30.0
DEFAULT_RETRIES = 3
MAX_RETRIES = 10
RETRY_BASE_SECONDS = 0.5
MAX_CONTENT_BYTES = 4 * 1024 * 1024
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def run_http(context: OperatorContext) -> dict[str, Any]:
    """Send the request; a final status of 400 or more fails the task."""
    message = context.message
    params = message.params
    url = str(message.command)
    if not url.startswith(("http://", "https://")):
        raise OperatorFailed(f"'http>' needs an http:// or https:// URL, got {url!r}")
    method = str(params.get("method", "GET")).upper()
    if method not in METHODS:
        raise OperatorFailed(f"'http>' method must be one of {', '.join(sorted(METHODS))}")
    headers = _headers(params.get("headers"))
    headers.setdefault("Idempotency-Key", f"tickwork-{message.attempt_id}-{message.task_id}")
    body = _body(params.get("content"), headers)
    timeout = _number(params.get("timeout", DEFAULT_TIMEOUT_SECONDS), "timeout")
    retries = int(_number(params.get("retries", DEFAULT_RETRIES), "retries"))
    if not 0 <= retries <= MAX_RETRIES:
        raise OperatorFailed(f"'http>' retries must be from 0 to {MAX_RETRIES}")
    status, content = _send(context, url, method, headers, body, timeout, retries)
    if status >= 400:
        raise OperatorFailed(f"{method} {url} answered {status}")
    if not params.get("store_content"):
        return {}
    try:
        parsed: Any = json.loads(content)
    except ValueError:
        parsed = content
    return {"http": {"last_content": parsed}}


def _send(
    context: OperatorContext,
    url: str,
    method: str,
    headers: dict[str, str],
    body: bytes | None,
    timeout: float,
    retries: int,
) -> tuple[int, str]:
    for attempt in range(retries + 1):
        request = urllib.request.Request(url, data=body, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                status, content = response.status, response.read(MAX_CONTENT_BYTES)
        except urllib.error.HTTPError as exc:
            status, content = exc.code, exc.read(MAX_CONTENT_BYTES)
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            context.write_log(f"{method} {url}: {reason}\n")
            if attempt == retries:
                raise OperatorFailed(f"{method} {url} failed: {reason}") from None
            time.sleep(RETRY_BASE_SECONDS * 2**attempt)
            continue
        context.write_log(f"{method} {url}: {status}\n")
        if status not in RETRYABLE_STATUS or attempt == retries:
            return status, content.decode("utf-8", errors="replace")
        time.sleep(RETRY_BASE_SECONDS * 2**attempt)
    raise AssertionError("unreachable")


def _headers(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise OperatorFailed(f"'http>' headers must be a mapping, got {value!r}")
    return {str(k): str(v) for k, v in value.items()}


def _body(content: Any, headers: dict[str, str]) -> bytes | None:
    if content is None:
        return None
    if isinstance(content, str):
        return content.encode()
    headers.setdefault("Content-Type", "application/json")
    return json.dumps(content).encode()


def _number(value: Any, name: str) -> float:
    number = decimal_number(value)
    if number is None:
        raise OperatorFailed(f"'http>' {name} must be a number, got {value!r}")
    if number < 0:
        raise OperatorFailed(f"'http>' {name} must not be negative")
    return number
