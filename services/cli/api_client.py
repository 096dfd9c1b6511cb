"""A client of tickwork's REST API (docs/rest-api.md): one method per operation, on httpx.

Problem documents become the errors of shared/errors.py (404 NotFound, 409 Conflict with
the existing attempt's id, 400/422 InvalidInput listing every problem, 401/403
Unauthorized); an API that cannot be reached or answers 5xx raises ApiUnavailable with one
line that says what to do. An answer that is not tickwork's (a route it does not have, an
HTML page from some other server) names the URL that gave it. A listing filtered by a
project or workflow name that does not exist is NotFound, with the closest existing name.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx

from tickwork.services.cli.errors import did_you_mean
from tickwork.shared.errors import (
    ApiUnavailable,
    Conflict,
    InvalidInput,
    NotFound,
    Problem,
    TickworkError,
    Unauthorized,
)
from tickwork.shared.json_types import Json

DEFAULT_TIMEOUT_SECONDS = 30.0
PAGE_LIMIT = 100
NO_ROUTE = "no such resource"
"""The detail of tickwork's 404 for a path it has no route for (a 404 that is not JSON
is no route of tickwork's either)."""
WRONG_ENDPOINT = "is --endpoint (or TICKWORK_ENDPOINT) where `tickwork api` listens?"


class NoRoute(NotFound):
    """Raised when the server has no route for a request's path: the endpoint is not a
    tickwork API (or a path segment, such as an id, is malformed), not a missing record."""


@dataclass(frozen=True)
class LogChunk:
    """A piece of an attempt's log text from the follow stream, and where the next starts;
    the last one of a stream has ``ended`` set and the attempt's final ``state``."""

    text: str
    next_offset: int | None
    task: str | None = None
    ended: bool = False
    state: str = ""


@dataclass(frozen=True)
class LogPage:
    """Bytes of a log file from ``offset`` on, and the size of the whole file."""

    data: bytes
    offset: int
    size_bytes: int

    @property
    def next_offset(self) -> int:
        """Where the next page starts."""
        return self.offset + len(self.data)


class ApiClient:
    """Talks to one tickwork API endpoint with an optional bearer token."""

    def __init__(
        self,
        endpoint: str,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(base_url=self.endpoint, headers=headers, timeout=timeout)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- projects ------------------------------------------------------------------------

    def push_project(
        self,
        name: str,
        archive: bytes,
        *,
        revision: str | None = None,
        schedule_from: datetime | str | None = None,
    ) -> Json:
        """Upload a tar.gz as a new revision of project ``name`` (created if needed)."""
        params = _query(revision=revision, schedule_from=_time(schedule_from))
        headers = {"Content-Type": "application/gzip"}
        return self._json(
            "PUT", f"/api/projects/{_seg(name)}", params=params, content=archive, headers=headers
        )

    def list_projects(self, name: str | None = None, *, limit: int | None = None) -> Iterator[Json]:
        """Projects, optionally only the one named ``name``."""
        return self._pages("/api/projects", _query(name=name), limit)

    def get_project(self, name: str) -> Json:
        """One project with its latest revision."""
        return self._json("GET", f"/api/projects/{_seg(name)}")

    def delete_project(self, name: str) -> Json:
        """Soft-delete a project: its schedules go, its history stays."""
        return self._json("DELETE", f"/api/projects/{_seg(name)}")

    def list_secrets(self, project: str) -> list[Json]:
        """The names of a project's secrets and when they were set (never their values)."""
        with self._names_checked(project):
            return _items(self._json("GET", f"/api/projects/{_seg(project)}/secrets"))

    def set_secret(
        self, project: str, name: str, value: str, *, create_project: bool = False
    ) -> Json:
        """Set (or replace) a secret of a project; of a new, empty one if ``create_project``
        and there is none."""
        path = f"/api/projects/{_seg(project)}/secrets/{_seg(name)}"
        body: Json = {"value": value}
        if create_project:
            body["create_project"] = True
        return self._json("PUT", path, json=body)

    def delete_secret(self, project: str, name: str) -> None:
        """Delete a secret of a project."""
        with self._names_checked(project):
            self._send("DELETE", f"/api/projects/{_seg(project)}/secrets/{_seg(name)}")

    def list_tokens(self) -> list[Json]:
        """The tokens of the store, revoked ones too (never their secrets)."""
        return _items(self._json("GET", "/api/tokens"))

    def create_token(
        self,
        name: str,
        role: str,
        expires_in: str | None = None,
        projects: Sequence[str] = (),
    ) -> Json:
        """Create a token of the store, limited to the project globs ``projects`` if any;
        the answer holds its secret, this once."""
        body: Json = {"name": name, "role": role}
        if expires_in is not None:
            body["expires_in"] = expires_in
        if projects:
            body["projects"] = list(projects)
        return self._json("POST", "/api/tokens", json=body)

    def revoke_token(self, name: str) -> Json:
        """Revoke a token of the store at once, with its web UI sessions."""
        return self._json("DELETE", f"/api/tokens/{_seg(name)}")

    def list_audit(
        self,
        *,
        since: str | None = None,
        until: str | None = None,
        actor: str | None = None,
        action: str | None = None,
        project: str | None = None,
        limit: int | None = None,
    ) -> Iterator[Json]:
        """The audit log, newest first, filtered (an admin token's read)."""
        query = _query(since=since, until=until, actor=actor, action=action, project=project)
        return self._pages("/api/audit", query, limit)

    def list_notifications(
        self,
        *,
        failed: bool = False,
        project: str | None = None,
        rule: str | None = None,
        limit: int | None = None,
    ) -> Iterator[Json]:
        """Notification deliveries, newest first."""
        query = _query(failed="true" if failed else None, project=project, rule=rule)
        return self._pages("/api/notifications", query, limit)

    def get_notification(self, delivery_id: str) -> Json:
        """One notification delivery."""
        return self._json("GET", f"/api/notifications/{_seg(delivery_id)}")

    def list_notification_rules(self, project: str) -> list[Json]:
        """A project's notification rules."""
        return _items(self._json("GET", f"/api/projects/{_seg(project)}/notification-rules"))

    def test_notification_rule(self, project: str, rule: str) -> Json:
        """Send a sample event through one rule; the delivery it made."""
        path = f"/api/projects/{_seg(project)}/notification-rules/{_seg(rule)}/test"
        return self._json("POST", path)

    def list_triggers(self, project: str | None = None) -> list[Json]:
        """Triggers, of one project or every one."""
        return _items(self._json("GET", "/api/triggers", params=_query(project=project)))

    def get_trigger(self, trigger_id: str) -> Json:
        """One trigger with its latest firings."""
        return self._json("GET", f"/api/triggers/{_seg(trigger_id)}")

    def pause_trigger(self, trigger_id: str) -> Json:
        return self._json("POST", f"/api/triggers/{_seg(trigger_id)}/pause")

    def resume_trigger(self, trigger_id: str) -> Json:
        return self._json("POST", f"/api/triggers/{_seg(trigger_id)}/resume")

    def list_pools(self) -> list[Json]:
        """Every pool, and every name tasks give that no pool has (``slots`` None)."""
        return _items(self._json("GET", "/api/pools"))

    def get_pool(self, name: str) -> Json:
        """One pool: its slots, those in use, the tasks waiting for one."""
        return self._json("GET", f"/api/pools/{_seg(name)}")

    def set_pool(self, name: str, slots: int, description: str | None = None) -> Json:
        """Create pool ``name`` or change its slots (and description, when given)."""
        body: Json = {"slots": slots}
        if description is not None:
            body["description"] = description
        return self._json("PUT", f"/api/pools/{_seg(name)}", json=body)

    def delete_pool(self, name: str) -> None:
        """Delete pool ``name``: its tasks wait until a pool of that name is set again."""
        self._send("DELETE", f"/api/pools/{_seg(name)}")

    def whoami(self) -> Json:
        """The name, role and project globs of the token this client sends."""
        return self._json("GET", "/api/whoami")

    def list_project_workflows(
        self, name: str, revision: str | None = None, *, limit: int | None = None
    ) -> Iterator[Json]:
        """Workflows of a project's latest (or a given) revision."""
        path = f"/api/projects/{_seg(name)}/workflows"
        return self._pages(path, _query(revision=revision), limit)

    def get_project_workflow(self, name: str, workflow: str, revision: str | None = None) -> Json:
        """One workflow of a project, with its definition."""
        path = f"/api/projects/{_seg(name)}/workflows/{_seg(workflow)}"
        with self._names_checked(name, workflow):
            return self._json("GET", path, params=_query(revision=revision))

    def download_archive(self, name: str, revision: str | None = None) -> bytes:
        """The tar.gz of a project's latest (or a given) revision, as pushed."""
        path = f"/api/projects/{_seg(name)}/archive"
        with self._names_checked(name):
            return self._send("GET", path, params=_query(revision=revision)).content

    # -- workflows and schedules ---------------------------------------------------------

    def list_workflows(
        self, project: str | None = None, *, limit: int | None = None
    ) -> Iterator[Json]:
        """Workflows of every project's latest revision, with last state and next run."""
        return self._named_pages("/api/workflows", _query(project=project), limit, project)

    def get_workflow(self, workflow_id: str) -> Json:
        """One workflow definition by id."""
        return self._json("GET", f"/api/workflows/{_seg(workflow_id)}")

    def list_schedules(
        self, project: str | None = None, workflow: str | None = None, *, limit: int | None = None
    ) -> Iterator[Json]:
        """Schedules, optionally of one project or workflow."""
        query = _query(project=project, workflow=workflow)
        return self._named_pages("/api/schedules", query, limit, project, workflow)

    def get_schedule(self, schedule_id: str) -> Json:
        """One schedule with its next times, checkpoint and recent missed times."""
        return self._json("GET", f"/api/schedules/{_seg(schedule_id)}")

    def find_schedule(self, project: str, workflow: str) -> Json:
        """The schedule of ``project``/``workflow``; NotFound if it has none."""
        for schedule in self.list_schedules(project, workflow):
            if schedule.get("project") == project and schedule.get("workflow") == workflow:
                return schedule
        self.require_names(project, workflow)
        raise NotFound(f"{project}/{workflow} has no schedule")

    def pause_schedule(self, schedule_id: str) -> Json:
        """Pause a schedule."""
        return self._json("POST", f"/api/schedules/{_seg(schedule_id)}/pause", json={})

    def resume_schedule(self, schedule_id: str, *, replay: bool = False) -> Json:
        """Resume a schedule; with ``replay`` the times due while paused run too."""
        path = f"/api/schedules/{_seg(schedule_id)}/resume"
        return self._json("POST", path, json={"replay": replay})

    def skip_schedule(
        self, schedule_id: str, *, to: datetime | str | None = None, count: int | None = None
    ) -> Json:
        """Skip ahead to a time or by a number of session times (recorded as missed)."""
        body = {"to": _time(to)} if to is not None else {"count": count}
        return self._json("POST", f"/api/schedules/{_seg(schedule_id)}/skip", json=body)

    def backfill_schedule(
        self,
        schedule_id: str,
        *,
        start: datetime | str,
        end: datetime | str | None = None,
        count: int | None = None,
        parallel: bool = False,
        dry_run: bool = False,
    ) -> Json:
        """Sessions for the past session times from ``start`` to ``end`` (or ``count`` of them)."""
        body: Json = {"from": _time(start), "parallel": parallel, "dry_run": dry_run}
        if end is not None:
            body["to"] = _time(end)
        if count is not None:
            body["count"] = count
        return self._json("POST", f"/api/schedules/{_seg(schedule_id)}/backfill", json=body)

    # -- sessions and attempts -----------------------------------------------------------

    def list_sessions(
        self,
        project: str | None = None,
        workflow: str | None = None,
        state: str | None = None,
        *,
        limit: int | None = None,
    ) -> Iterator[Json]:
        """Sessions, newest first, each with its last attempt."""
        query = _query(project=project, workflow=workflow, state=state)
        return self._named_pages("/api/sessions", query, limit, project, workflow)

    def get_session(self, session_id: str) -> Json:
        """One session."""
        return self._json("GET", f"/api/sessions/{_seg(session_id)}")

    def list_session_attempts(self, session_id: str, *, limit: int | None = None) -> Iterator[Json]:
        """The attempts of one session."""
        return self._pages(f"/api/sessions/{_seg(session_id)}/attempts", {}, limit)

    def list_attempts(
        self,
        project: str | None = None,
        workflow: str | None = None,
        state: str | None = None,
        *,
        limit: int | None = None,
    ) -> Iterator[Json]:
        """Attempts, newest first."""
        query = _query(project=project, workflow=workflow, state=state)
        return self._named_pages("/api/attempts", query, limit, project, workflow)

    def start_attempt(
        self,
        project: str,
        workflow: str,
        *,
        session_time: datetime | str | None = None,
        params: Json | None = None,
        idempotency_key: str | None = None,
        revision: str | None = None,
    ) -> Json:
        """Start a session by hand (of ``revision``'s workflow; default the latest);
        Conflict (with ``attempt_id``) if it already exists."""
        body: Json = {"project": project, "workflow": workflow}
        if revision is not None:
            body["revision"] = revision
        if session_time is not None:
            body["session_time"] = _time(session_time)
        if params:
            body["params"] = params
        if idempotency_key is not None:
            body["idempotency_key"] = idempotency_key
        with self._names_checked(project, workflow):
            return self._json("POST", "/api/attempts", json=body)

    def get_attempt(self, attempt_id: str) -> Json:
        """One attempt."""
        return self._json("GET", f"/api/attempts/{_seg(attempt_id)}")

    def kill_attempt(self, attempt_id: str) -> Json:
        """Kill an attempt: its running tasks are stopped and it ends killed."""
        return self._json("POST", f"/api/attempts/{_seg(attempt_id)}/kill", json={})

    def retry_attempt(
        self,
        attempt_id: str,
        *,
        mode: str = "failed",
        from_task: str | None = None,
        params: Json | None = None,
        revision: str | None = None,
        name: str | None = None,
    ) -> Json:
        """A new attempt of the same session: ``all``, ``failed`` or ``from`` a task on;
        of ``revision``'s workflow (``latest``; default: the attempt's), named ``name``."""
        body: Json = {"mode": mode}
        if revision is not None:
            body["revision"] = revision
        if name is not None:
            body["name"] = name
        if from_task is not None:
            body["from"] = from_task
        if params:
            body["params"] = params
        return self._json("POST", f"/api/attempts/{_seg(attempt_id)}/retry", json=body)

    def get_failures(self, attempt_id: str) -> Json:
        """Why an attempt failed: ``items`` (task, message, log_tail) and ``not_shown``."""
        return self._json("GET", f"/api/attempts/{_seg(attempt_id)}/failures")

    def list_tasks(self, attempt_id: str) -> list[Json]:
        """The task tree of an attempt."""
        return _items(self._json("GET", f"/api/attempts/{_seg(attempt_id)}/tasks"))

    # -- logs ------------------------------------------------------------------------------

    def list_log_files(self, attempt_id: str, task: str | None = None) -> list[Json]:
        """The log files of an attempt, optionally of tasks under ``task`` only."""
        path = f"/api/logs/{_seg(attempt_id)}/files"
        return _items(self._json("GET", path, params=_query(task=task)))

    def read_log_page(self, attempt_id: str, file_id: str, offset: int = 0) -> LogPage:
        """One page of a log file from ``offset`` on (the server sends at most 16 MiB)."""
        path = f"/api/logs/{_seg(attempt_id)}/files/{_seg(file_id)}"
        params = _query(offset=offset or None)
        response = self._send("GET", path, params=params, headers={"Accept": "text/plain"})
        size = response.headers.get("X-Log-Size", "")
        data = response.content
        return LogPage(data, offset, int(size) if size.isdigit() else offset + len(data))

    def read_log(self, attempt_id: str, file_id: str) -> Iterator[bytes]:
        """Every byte of a log file, page after page until its end."""
        offset = 0
        while True:
            page = self.read_log_page(attempt_id, file_id, offset)
            if page.data:
                yield page.data
            offset = page.next_offset
            if not page.data or offset >= page.size_bytes:
                return

    def follow_log(self, attempt_id: str, offset: int = 0) -> Iterator[LogChunk]:
        """Log text of an attempt as it is written, until the attempt ends (server-sent
        events; a stream the server ends on its time limit is resumed where it stopped)."""
        path = f"/api/logs/{_seg(attempt_id)}/follow"
        headers = {"Accept": "text/event-stream"}
        timeout = httpx.Timeout(self._http.timeout.connect, read=None)
        while True:
            try:
                with self._http.stream(
                    "GET", path, params={"offset": offset}, headers=headers, timeout=timeout
                ) as response:
                    if response.status_code >= 400:
                        response.read()
                        raise_for_problem(response)
                    for chunk in _sse_chunks(response.iter_lines()):
                        if chunk.ended:
                            return
                        offset = chunk.next_offset if chunk.next_offset is not None else offset
                        if chunk.text:
                            yield chunk
            except httpx.TransportError as exc:
                raise self._unreachable(exc) from exc

    # -- service ---------------------------------------------------------------------------

    def ready(self) -> bool:
        """Whether the API answers ``/readyz`` with 200 (database reachable and migrated)."""
        try:
            return self._http.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False

    def require_names(self, project: str, workflow: str | None = None) -> None:
        """Raise NotFound, with the closest existing name, unless project ``project`` exists
        and (if given) its latest revision has workflow ``workflow``."""
        try:
            self.get_project(project)
        except NoRoute:
            raise
        except NotFound:
            names = [str(item.get("name")) for item in self.list_projects()]
            raise NotFound(f"no project '{project}'{did_you_mean(project, names)}") from None
        if workflow is None:
            return
        names = [str(item.get("name")) for item in self.list_project_workflows(project)]
        if workflow not in names:
            raise NotFound(
                f"no workflow '{workflow}' in project '{project}'{did_you_mean(workflow, names)}"
            )

    # -- plumbing --------------------------------------------------------------------------

    @contextmanager
    def _names_checked(self, project: str, workflow: str | None = None) -> Iterator[None]:
        """A record the block does not find is reported by :meth:`require_names` when the
        project or the workflow is what does not exist."""
        try:
            yield
        except NoRoute:
            raise
        except NotFound:
            self.require_names(project, workflow)
            raise

    def _named_pages(
        self,
        path: str,
        query: dict[str, str],
        limit: int | None,
        project: str | None,
        workflow: str | None = None,
    ) -> Iterator[Json]:
        """:meth:`_pages` of a listing filtered by name: when it is empty, a name that does
        not exist is NotFound rather than an empty answer."""
        listed = False
        for item in self._pages(path, query, limit):
            listed = True
            yield item
        if not listed and project is not None:
            self.require_names(project, workflow)

    def _pages(self, path: str, query: dict[str, str], limit: int | None) -> Iterator[Json]:
        """Every item of a paged list (at most ``limit``), following ``next_cursor``."""
        cursor: str | None = None
        remaining = limit
        while True:
            page_limit = PAGE_LIMIT if remaining is None else min(PAGE_LIMIT, remaining)
            params = {**query, "limit": str(page_limit)}
            if cursor:
                params["cursor"] = cursor
            page = self._json("GET", path, params=params)
            items = _items(page)
            yield from items
            if remaining is not None:
                remaining -= len(items)
                if remaining <= 0:
                    return
            cursor = page.get("next_cursor")
            if not cursor or not items:
                return

    def _json(self, method: str, path: str, **kwargs: Any) -> Json:
        response = self._send(method, path, **kwargs)
        if not response.content:
            return {}
        try:
            body = response.json()
        except ValueError as exc:
            raise ApiUnavailable(_not_tickwork(response)) from exc
        return body if isinstance(body, dict) else {"items": body}

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from exc
        raise_for_problem(response)
        return response

    def _unreachable(self, exc: httpx.TransportError) -> ApiUnavailable:
        return ApiUnavailable(
            f"cannot reach the tickwork API at {self.endpoint}: {_reason(exc)}; "
            "is `tickwork api` or `tickwork standalone` running?"
        )


def raise_for_problem(response: httpx.Response) -> None:
    """Raise the error a 4xx/5xx answer stands for; do nothing for a success."""
    status = response.status_code
    if status < 400:
        return
    if _is_html(response):
        raise ApiUnavailable(_not_tickwork(response))
    problem = _problem(response)
    detail = str(problem.get("detail") or problem.get("title") or response.reason_phrase)
    if status == 404 and (detail == NO_ROUTE or not _is_json(response)):
        raise NoRoute(_no_route(response))
    if status in (400, 413, 415, 422):
        raise InvalidInput(_problems(problem, detail))
    if status in (401, 403):
        raise Unauthorized(detail)
    if status == 404:
        raise NotFound(detail)
    if status == 409:
        attempt_id = problem.get("attempt_id")
        raise Conflict(detail, attempt_id=None if attempt_id is None else str(attempt_id))
    if status == 429 or status >= 500:
        raise ApiUnavailable(f"the tickwork API answered {status}: {detail}")
    raise TickworkError(f"the tickwork API answered {status}: {detail}")


def _is_json(response: httpx.Response) -> bool:
    return "json" in response.headers.get("Content-Type", "").lower()


def _is_html(response: httpx.Response) -> bool:
    kind = response.headers.get("Content-Type", "").lower()
    return "html" in kind or response.text.lstrip()[:15].lower().startswith(("<!doctype", "<html"))


def _not_tickwork(response: httpx.Response) -> str:
    """Why an answer cannot be tickwork's, naming the URL that gave it."""
    url = response.request.url
    what = "an HTML page" if _is_html(response) else "something that is not JSON"
    return f"the server at {url} answered with {what}, not the tickwork API; {WRONG_ENDPOINT}"


def _no_route(response: httpx.Response) -> str:
    """A 404 for a path the API has no route for: the endpoint is wrong, or the id is."""
    url = response.request.url
    return f"{url} answered 404 (no such resource); {WRONG_ENDPOINT}"


def _problem(response: httpx.Response) -> Json:
    try:
        body = response.json()
    except ValueError:
        return {"detail": response.text.strip()[:200] or response.reason_phrase}
    return body if isinstance(body, dict) else {}


def _problems(problem: Json, detail: str) -> list[Problem]:
    """Every error of a problem document as ``Problem(place, line, message)``."""
    found: list[Problem] = []
    for error in problem.get("errors") or []:
        if not isinstance(error, dict):
            continue
        message = str(error.get("detail") or error.get("message") or detail)
        if error.get("file"):
            line = error.get("line")
            found.append(Problem(str(error["file"]), int(line) if line else None, message))
        elif error.get("pointer") is not None:
            found.append(Problem(str(error["pointer"]) or "/", None, message))
        elif error.get("parameter"):
            found.append(Problem(str(error["parameter"]), None, message))
        else:
            found.append(Problem("request", None, message))
    return found or [Problem("request", None, detail)]


def _sse_chunks(lines: Iterator[str]) -> Iterator[LogChunk]:
    """Chunks of a follow stream: ``log`` events carry text (their id is the offset to
    resume from), ``end`` says the attempt ended, ``timeout`` that the stream stopped."""
    event, event_id, data = "message", "", []
    for line in lines:
        if line.startswith(":"):
            continue
        if line:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                event = value
            elif name == "id":
                event_id = value
            elif name == "data":
                data.append(value)
            continue
        if data or event != "message":
            yield _chunk(event, event_id, "\n".join(data))
        event, event_id, data = "message", "", []


def _chunk(event: str, event_id: str, data: str) -> LogChunk:
    try:
        decoded = json.loads(data) if data else {}
    except ValueError:
        decoded = {"text": data}
    if not isinstance(decoded, dict):
        decoded = {"text": data}
    if event == "end":
        return LogChunk("", None, ended=True, state=str(decoded.get("state") or ""))
    offset = event_id if event_id.isdigit() else decoded.get("offset")
    next_offset = int(offset) if offset is not None and str(offset).isdigit() else None
    text = str(decoded.get("text", "")) if event in ("log", "message") else ""
    return LogChunk(text, next_offset, task=decoded.get("task"))


def _items(body: Json) -> list[Json]:
    items = body.get("items", [])
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _reason(exc: httpx.TransportError) -> str:
    text = str(exc).lower()
    if isinstance(exc, httpx.TimeoutException):
        return "no answer in time"
    if "refused" in text:
        return "connection refused"
    if "name or service not known" in text or "nodename nor servname" in text:
        return "unknown host"
    return str(exc) or type(exc).__name__


def _query(**values: object) -> dict[str, str]:
    return {key: str(value) for key, value in values.items() if value is not None}


def _time(value: datetime | str | None) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value


def _seg(value: str) -> str:
    """One path segment, escaped (a project name may hold characters URLs reserve)."""
    return quote(str(value), safe="")
