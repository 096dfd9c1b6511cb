"""``http>`` as Digdag's ``http>`` sends a request, against a real HTTP server on a local
port: which failures are tried again (a POST is not, unless told), headers written as
Digdag's list of entries, the content formats and their Content-Type, the ``http.*``
secrets, redirects, certificate checks and proxies, and what the task stores."""

from __future__ import annotations

import base64
import http.server
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs

import pytest

from tests.support.servers import serve_http
from tests.support.smtp import self_signed_certificate, server_tls_context
from tickwork.services.agent.operators import http as http_operator
from tickwork.services.agent.operators.base import OperatorContext, OperatorFailed
from tickwork.services.agent.operators.http import run_http
from tickwork.shared.dispatch.messages import TaskMessage
from tickwork.shared.secrets import Masker


@dataclass(frozen=True)
class Seen:
    """One request the server got."""

    method: str
    path: str
    headers: Message
    body: bytes


class _Server(http.server.BaseHTTPRequestHandler):
    """Answers ``/status/N`` with N, ``/redirect`` with a 302 to ``/ok``, ``/ok`` (and
    anything else) with a JSON 200."""

    seen: ClassVar[list[Seen]] = []

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.seen.append(Seen(self.command, self.path, self.headers, body))
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/ok")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        status = int(self.path.split("/")[2]) if self.path.startswith("/status/") else 200
        payload = b'{"rows": 7}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    """One server for the module (stopping one takes half a second)."""
    with serve_http(_Server) as url:
        yield url


@pytest.fixture
def server(server_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The server's base URL, nothing seen yet; retries wait no time."""
    monkeypatch.setattr(http_operator, "RETRY_BASE_SECONDS", 0.0)
    _Server.seen = []
    return server_url


def run(
    tmp_path: Path, url: str, params: dict[str, Any], secrets: dict[str, str] | None = None
) -> dict[str, Any]:
    message = TaskMessage(1, 1, 1, "+wf+call", "http", url, params, str(tmp_path))
    with (tmp_path / "task.log").open("w") as log_file:
        context = OperatorContext(message, log_file, tmp_path / "task.log", secrets=secrets or {})
        return run_http(context)


def sent() -> list[Seen]:
    return list(_Server.seen)


class TestRetries:
    def test_a_post_that_fails_is_not_sent_again(self, tmp_path: Path, server: str) -> None:
        with pytest.raises(OperatorFailed, match="answered 503"):
            run(tmp_path, f"{server}/status/503", {"method": "POST", "content": "x"})
        assert len(sent()) == 1

    def test_a_get_that_fails_with_a_5xx_408_or_429_is_sent_again(
        self, tmp_path: Path, server: str
    ) -> None:
        for status in (500, 503, 408, 429):
            _Server.seen = []
            with pytest.raises(OperatorFailed, match=f"answered {status}"):
                run(tmp_path, f"{server}/status/{status}", {})
            assert len(sent()) == 1 + http_operator.DEFAULT_RETRIES, status

    def test_another_client_error_is_never_sent_again(self, tmp_path: Path, server: str) -> None:
        with pytest.raises(OperatorFailed, match="answered 404"):
            run(tmp_path, f"{server}/status/404", {"retry": True})
        assert len(sent()) == 1

    def test_retry_true_sends_a_post_again_and_false_a_get_once(
        self, tmp_path: Path, server: str
    ) -> None:
        with pytest.raises(OperatorFailed):
            run(tmp_path, f"{server}/status/502", {"method": "POST", "retry": True})
        assert len(sent()) == 1 + http_operator.DEFAULT_RETRIES
        _Server.seen = []
        with pytest.raises(OperatorFailed):
            run(tmp_path, f"{server}/status/502", {"retry": False})
        assert len(sent()) == 1

    def test_retries_given_on_a_post_sends_it_that_many_more_times_with_one_key(
        self, tmp_path: Path, server: str
    ) -> None:
        with pytest.raises(OperatorFailed):
            run(tmp_path, f"{server}/status/503", {"method": "PUT", "retries": 1})
        keys = {seen.headers["Idempotency-Key"] for seen in sent()}
        assert len(sent()) == 2 and len(keys) == 1

    def test_the_built_in_retry_count_is_not_the_retry_option(
        self, tmp_path: Path, server: str
    ) -> None:
        with pytest.raises(OperatorFailed):
            run(tmp_path, f"{server}/status/503", {"method": "POST", "retry": 2})
        assert len(sent()) == 1  # ${retry} is the task's retry count: the default holds
        _Server.seen = []
        with pytest.raises(OperatorFailed):
            run(tmp_path, f"{server}/status/503", {"method": "POST", "retry": "true"})
        assert len(sent()) == 1 + http_operator.DEFAULT_RETRIES

    def test_retry_must_be_a_boolean(self, tmp_path: Path, server: str) -> None:
        with pytest.raises(OperatorFailed, match="retry must be true or false"):
            run(tmp_path, f"{server}/ok", {"retry": "sometimes"})
        assert sent() == []


class TestHeaders:
    def test_digdag_s_list_of_entries_is_sent_in_order_with_repeats(
        self, tmp_path: Path, server: str
    ) -> None:
        headers = [{"Accept": "application/json"}, {"X-Tag": "a"}, {"X-Tag": "b"}, {"X-N": 3}]
        run(tmp_path, f"{server}/ok", {"headers": headers})
        ((seen,),) = [sent()]
        assert seen.headers["Accept"] == "application/json"
        assert seen.headers["X-Tag"] == "a, b" and seen.headers["X-N"] == "3"

    def test_a_mapping_of_headers_is_sent_too(self, tmp_path: Path, server: str) -> None:
        run(tmp_path, f"{server}/ok", {"headers": {"X-One": "1"}})
        assert sent()[0].headers["X-One"] == "1"

    def test_an_entry_of_more_than_one_header_fails_naming_it(
        self, tmp_path: Path, server: str
    ) -> None:
        with pytest.raises(OperatorFailed, match=r"headers\[1\] must be one 'Name: value' entry"):
            run(tmp_path, f"{server}/ok", {"headers": [{"A": "1"}, {"B": "2", "C": "3"}]})
        assert sent() == []


class TestContent:
    @pytest.mark.parametrize(
        ("params", "body", "content_type"),
        [
            ({"content": "hello"}, b"hello", "text/plain; charset=utf-8"),
            ({"content": 42}, b"42", "text/plain; charset=utf-8"),
            ({"content": True, "content_format": "json"}, b"true", "application/json"),
            ({"content": {"a": [1]}}, b'{"a": [1]}', "application/json"),
            ({"content": [1, 2]}, b"[1, 2]", "application/json"),
            (
                {"content": {"status": "RUNNING", "n": 2}, "content_format": "form"},
                b"status=RUNNING&n=2",
                "application/x-www-form-urlencoded",
            ),
            (
                {"content": "<x/>", "content_format": "text", "content_type": "application/xml"},
                b"<x/>",
                "application/xml",
            ),
        ],
    )
    def test_content_is_sent_as_its_format_says(
        self, tmp_path: Path, server: str, params: dict[str, Any], body: bytes, content_type: str
    ) -> None:
        run(tmp_path, f"{server}/ok", {"method": "POST", **params})
        (seen,) = sent()
        assert (seen.body, seen.headers["Content-Type"]) == (body, content_type)

    @pytest.mark.parametrize(
        ("params", "words"),
        [
            ({"content": {"a": 1}, "content_format": "text"}, "text needs a scalar content"),
            ({"content": [1], "content_format": "form"}, "form needs a mapping of scalars"),
            ({"content": {"a": {"b": 1}}, "content_format": "form"}, "form needs a mapping"),
            ({"content": "x", "content_format": "xml"}, "must be one of text, json, form"),
        ],
    )
    def test_content_its_format_cannot_hold_fails_before_sending(
        self, tmp_path: Path, server: str, params: dict[str, Any], words: str
    ) -> None:
        with pytest.raises(OperatorFailed, match=words):
            run(tmp_path, f"{server}/ok", {"method": "POST", **params})
        assert sent() == []

    def test_options_may_come_from_a_nested_http_mapping(self, tmp_path: Path, server: str) -> None:
        nested = {"method": "POST", "content": {"a": 1}, "content_format": "form"}
        run(tmp_path, f"{server}/ok", {"http": nested})
        (seen,) = sent()
        assert (seen.method, parse_qs(seen.body.decode())) == ("POST", {"a": ["1"]})


class TestSecrets:
    def test_http_authorization_is_the_authorization_header(
        self, tmp_path: Path, server: str
    ) -> None:
        secrets = {"http.authorization": "Bearer s3cret", "http.user": "ignored"}
        run(tmp_path, f"{server}/ok", {}, secrets)
        assert sent()[0].headers["Authorization"] == "Bearer s3cret"

    def test_http_user_and_password_are_basic_authentication(
        self, tmp_path: Path, server: str
    ) -> None:
        run(tmp_path, f"{server}/ok", {}, {"http.user": "etl", "http.password": "pw"})
        expected = "Basic " + base64.b64encode(b"etl:pw").decode()
        assert sent()[0].headers["Authorization"] == expected

    def test_http_uri_is_the_url_and_never_reaches_the_log(
        self, tmp_path: Path, server: str
    ) -> None:
        url = f"{server}/ok?key=hidden"
        message = TaskMessage(1, 1, 1, "+wf+call", "http", "https://unused.invalid", {}, "")
        with (tmp_path / "task.log").open("w") as log_file:
            context = OperatorContext(
                message,
                log_file,
                tmp_path / "task.log",
                masker=Masker([url]),
                secrets={"http.uri": url},
            )
            run_http(context)
        assert sent()[0].path == "/ok?key=hidden"
        assert "hidden" not in (tmp_path / "task.log").read_text()


class TestStored:
    def test_the_status_is_always_stored_and_the_content_when_asked(
        self, tmp_path: Path, server: str
    ) -> None:
        assert run(tmp_path, f"{server}/ok", {}) == {"http": {"last_status": 200}}
        stored = run(tmp_path, f"{server}/ok", {"store_content": True})
        assert stored == {"http": {"last_status": 200, "last_content": {"rows": 7}}}
        assert sent()[0].body == b""  # no content: no body


class TestConnection:
    def test_a_redirect_is_followed_by_default(self, tmp_path: Path, server: str) -> None:
        assert run(tmp_path, f"{server}/redirect", {}) == {"http": {"last_status": 200}}
        assert [seen.path for seen in sent()] == ["/redirect", "/ok"]

    def test_follow_redirects_false_ends_the_task_with_the_redirect(
        self, tmp_path: Path, server: str
    ) -> None:
        stored = run(tmp_path, f"{server}/redirect", {"follow_redirects": False})
        assert stored == {"http": {"last_status": 302}}
        assert [seen.path for seen in sent()] == ["/redirect"]

    def test_an_enabled_proxy_carries_the_request(self, tmp_path: Path, server: str) -> None:
        port = int(server.rsplit(":", 1)[1])
        proxy = {"enabled": True, "host": "127.0.0.1", "port": port}
        run(tmp_path, "http://tickwork-target.invalid/ok", {"proxy": proxy})
        assert [seen.path for seen in sent()] == ["http://tickwork-target.invalid/ok"]

    def test_a_disabled_proxy_is_not_used(self, tmp_path: Path, server: str) -> None:
        proxy = {"enabled": False, "host": "127.0.0.1", "port": 1}
        run(tmp_path, f"{server}/ok", {"proxy": proxy})
        assert [seen.path for seen in sent()] == ["/ok"]

    @pytest.mark.parametrize(
        ("proxy", "words"),
        [
            ({"enabled": True, "port": 3128}, "proxy.host must be a host name"),
            ({"enabled": True, "host": "p", "port": 0}, "proxy.port must be a port number"),
            ({"enabled": True, "host": "p", "port": 3128, "tls": True}, "proxy.tls is not"),
            ({"enabled": "yes", "host": "p", "port": 3128}, "proxy.enabled must be true"),
            ("p:3128", "proxy must be a mapping"),
        ],
    )
    def test_a_proxy_it_cannot_use_fails_before_sending(
        self, tmp_path: Path, server: str, proxy: Any, words: str
    ) -> None:
        with pytest.raises(OperatorFailed, match=words):
            run(tmp_path, f"{server}/ok", {"proxy": proxy})
        assert sent() == []

    def test_an_unknown_certificate_fails_unless_insecure(
        self, tmp_path: Path, https_server: str
    ) -> None:
        with pytest.raises(OperatorFailed, match="CERTIFICATE_VERIFY_FAILED"):
            run(tmp_path, f"{https_server}/ok", {"retry": False})
        stored = run(tmp_path, f"{https_server}/ok", {"insecure": True})
        assert stored == {"http": {"last_status": 200}}


@pytest.fixture(scope="module")
def https_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An HTTPS server with a certificate no one trusts."""
    cert, key = self_signed_certificate(tmp_path_factory.mktemp("tls"))
    with serve_http(_Server, server_tls_context(cert, key)) as url:
        yield url
