"""Specifications that the library internals tickwork relies on are still there, in the
shape each relying module was written against.

Where a library offers no public way to do what tickwork needs, one module of ours holds
the reliance, names the internals in its docstring and lists the versions it was checked
against (pinned in constraints.txt). When a library changes under it, these fail with a
message naming that module, so the module is read again before the new version is taken.
"""

from __future__ import annotations

import inspect
import io
import platform
import re
import tarfile
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import pytest


def parameters(function: Callable[..., Any]) -> list[str]:
    """The names of ``function``'s parameters, ``self`` and ``cls`` included."""
    return list(inspect.signature(inspect.unwrap(function)).parameters)


def changed(module: str, distribution: str, what: str) -> str:
    """The failure message: which module of ours to read again, and why."""
    return (
        f"{module} relies on {distribution} internals that changed in the installed "
        f"{distribution} {version(distribution)}: {what}. Read {module} again against this "
        "version, then update the versions it lists and constraints.txt."
    )


def require_version(module: str, distribution: str, checked: tuple[str, ...]) -> None:
    installed = version(distribution)
    if installed not in checked:
        pytest.fail(
            f"{module} was checked against {distribution} {', '.join(checked)}, "
            f"but {installed} is installed: read it again against {installed}, then add "
            "the version to its list and to constraints.txt."
        )


class TestKombu:
    MODULE = "shared/dispatch/kept_client.py"

    def test_the_installed_kombu_is_one_the_kept_client_channel_was_checked_against(
        self,
    ) -> None:
        from tickwork.shared.dispatch.kept_client import CHECKED_KOMBU_VERSIONS

        require_version(self.MODULE, "kombu", CHECKED_KOMBU_VERSIONS)

    def test_the_redis_channel_still_has_the_methods_the_kept_client_channel_overrides(
        self,
    ) -> None:
        from kombu.transport import redis as kombu_redis

        channel = kombu_redis.Channel
        expected = {
            "conn_or_acquire": ["self", "client"],
            "_create_client": ["self", "asynchronous"],
            "_disconnect_pools": ["self"],
        }
        for name, names in expected.items():
            method = getattr(channel, name, None)
            assert method is not None, changed(self.MODULE, "kombu", f"Channel.{name} is gone")
            assert parameters(method) == names, changed(
                self.MODULE,
                "kombu",
                f"Channel.{name} takes {parameters(method)}, not {names}",
            )

    def test_kombu_still_sends_its_commands_through_conn_or_acquire(self) -> None:
        from kombu.transport import redis as kombu_redis

        source = inspect.getsource(kombu_redis)
        uses = source.count("conn_or_acquire(")
        assert uses >= 10, changed(
            self.MODULE,
            "kombu",
            f"the Redis transport calls conn_or_acquire only {uses} times",
        )


class TestTarfile:
    MODULE = "shared/dsl/tar_headers.py"

    def test_the_running_python_is_one_whose_tarfile_the_pax_check_was_read_against(
        self,
    ) -> None:
        from tickwork.shared.dsl.tar_headers import CHECKED_PYTHON_VERSIONS

        running = ".".join(platform.python_version_tuple()[:2])
        assert running in CHECKED_PYTHON_VERSIONS, (
            f"{self.MODULE} was checked against the tarfile of CPython "
            f"{', '.join(CHECKED_PYTHON_VERSIONS)}, but this is {running}: read "
            "TarInfo._proc_pax of this version again, then add it to the module's list."
        )

    def test_tarinfo_still_reads_a_pax_header_through_proc_pax_from_the_tarfile_stream(
        self,
    ) -> None:
        proc_pax = getattr(tarfile.TarInfo, "_proc_pax", None)
        assert proc_pax is not None, changed_python(self.MODULE, "TarInfo._proc_pax is gone")
        assert parameters(proc_pax) == ["self", "tarfile"], changed_python(
            self.MODULE, f"TarInfo._proc_pax takes {parameters(proc_pax)}"
        )
        source = inspect.getsource(proc_pax)
        assert "tarfile.fileobj.read(" in source, changed_python(
            self.MODULE, "TarInfo._proc_pax no longer reads tarfile.fileobj"
        )
        proc_member = tarfile.TarInfo._proc_member  # type: ignore[attr-defined]
        dispatch = inspect.getsource(proc_member)
        assert "self._proc_pax(tarfile)" in dispatch, changed_python(
            self.MODULE, "TarInfo._proc_member no longer hands PAX headers to _proc_pax"
        )

    def test_every_header_block_and_each_pax_header_reach_their_checks(self) -> None:
        from tickwork.shared.dsl.tar_headers import HeaderCheckedTarInfo

        seen: list[bytes] = []
        headers: list[bytes] = []

        class Recording(HeaderCheckedTarInfo):
            @classmethod
            def check_header(cls, header: tarfile.TarInfo) -> None:
                headers.append(header.type)

            def check_pax_data(self, data: bytes) -> None:
                seen.append(data)

        written = io.BytesIO()
        with tarfile.open(fileobj=written, mode="w", format=tarfile.PAX_FORMAT) as tar:
            member = tarfile.TarInfo("a" * 150)  # too long for ustar: a PAX header holds it
            tar.addfile(member, io.BytesIO())
        written.seek(0)
        with tarfile.open(fileobj=written, mode="r|", tarinfo=Recording) as tar:
            names = [member.name for member in tar]
        assert names == ["a" * 150]
        assert headers == [tarfile.XHDTYPE, tarfile.REGTYPE], changed_python(
            self.MODULE, f"frombuf saw the header blocks {headers}, not a PAX one then the member's"
        )
        assert len(seen) == 1 and b" path=" + b"a" * 150 in seen[0], changed_python(
            self.MODULE, "a PAX header's data no longer reaches check_pax_data"
        )


def changed_python(module: str, what: str) -> str:
    """The failure message for a change in the standard library's tarfile."""
    return (
        f"{module} relies on tarfile internals that changed in CPython "
        f"{platform.python_version()}: {what}. Read {module} again against this version."
    )


class TestPsycopg:
    MODULE = "services/api/cooperative_psycopg.py"

    def test_the_installed_psycopg_is_one_the_cooperative_wait_was_checked_against(
        self,
    ) -> None:
        from tickwork.services.api.cooperative_psycopg import CHECKED_PSYCOPG_VERSIONS

        require_version(self.MODULE, "psycopg", CHECKED_PSYCOPG_VERSIONS)

    def test_psycopg_still_waits_through_the_module_names_the_worker_sets(self) -> None:
        from psycopg import connection, waiting

        for name in ("wait", "wait_selector", "wait_conn", "DefaultSelector"):
            assert hasattr(waiting, name), changed(
                self.MODULE, "psycopg", f"psycopg.waiting.{name} is gone"
            )
        assert parameters(waiting.wait_selector)[:2] == ["gen", "fileno"], changed(
            self.MODULE,
            "psycopg",
            f"waiting.wait_selector takes {parameters(waiting.wait_selector)}",
        )
        selector_users = inspect.getsource(waiting.wait_selector) + inspect.getsource(
            waiting.wait_conn
        )
        assert selector_users.count("DefaultSelector()") == 2, changed(
            self.MODULE,
            "psycopg",
            "wait_selector and wait_conn no longer make waiting.DefaultSelector",
        )
        assert "waiting.wait(" in inspect.getsource(connection.Connection.wait), changed(
            self.MODULE,
            "psycopg",
            "Connection.wait no longer calls waiting.wait through the module",
        )


class TestWaitress:
    MODULE = "services/api/waitress_errors.py"

    def test_the_installed_waitress_is_one_the_problem_channel_was_checked_against(
        self,
    ) -> None:
        from tickwork.services.api.waitress_errors import CHECKED_WAITRESS_VERSIONS

        require_version(self.MODULE, "waitress", CHECKED_WAITRESS_VERSIONS)

    def test_waitress_still_has_the_channel_task_and_parser_names_the_module_uses(
        self,
    ) -> None:
        from waitress.channel import HTTPChannel
        from waitress.parser import HTTPRequestParser
        from waitress.server import BaseWSGIServer
        from waitress.task import ErrorTask, Task

        assert BaseWSGIServer.channel_class is HTTPChannel, changed(
            self.MODULE, "waitress", "the server no longer makes its channels of channel_class"
        )
        assert HTTPChannel.error_task_class is ErrorTask, changed(
            self.MODULE, "waitress", "HTTPChannel.error_task_class is not ErrorTask"
        )
        for method, names in (
            (HTTPChannel.handle_read, ["self"]),
            (ErrorTask.execute, ["self"]),
            (Task.set_close_on_finish, ["self"]),
            (Task.write, ["self", "data"]),
        ):
            assert parameters(method) == names, changed(
                self.MODULE, "waitress", f"{method.__qualname__} takes {parameters(method)}"
            )
        channel_init = inspect.getsource(HTTPChannel.__init__)
        for name in ("self.requests_lock", "self.requests", "self.request", "self.server"):
            assert name in channel_init, changed(
                self.MODULE, "waitress", f"HTTPChannel no longer sets {name}"
            )
        task_init = inspect.getsource(Task.__init__)
        for name in ("self.request", "self.response_headers"):
            assert name in task_init, changed(
                self.MODULE, "waitress", f"Task no longer sets {name}"
            )
        for name in (
            "error",
            "headers_finished",
            "completed",
            "chunked",
            "content_length",
            "body_bytes_received",
        ):
            assert hasattr(HTTPRequestParser, name), changed(
                self.MODULE, "waitress", f"HTTPRequestParser.{name} is gone"
            )


class TestGunicorn:
    WORKER = "services/api/worker.py"
    FRAMING = "services/api/framing.py"

    def test_the_installed_gunicorn_is_one_the_worker_and_framing_were_checked_against(
        self,
    ) -> None:
        from tickwork.services.api.worker import CHECKED_GUNICORN_VERSIONS

        require_version(
            f"{self.WORKER} (and {self.FRAMING})", "gunicorn", CHECKED_GUNICORN_VERSIONS
        )

    def test_the_chunked_reader_still_has_the_shape_the_limited_reader_extends(self) -> None:
        from gunicorn.http.body import Body, ChunkedReader
        from gunicorn.http.message import Message

        for method, names in (
            (ChunkedReader.__init__, ["self", "req", "unreader"]),
            (ChunkedReader.parse_chunk_size, ["self", "unreader", "data"]),
            (Body.__init__, ["self", "reader"]),
        ):
            assert parameters(method) == names, changed(
                self.FRAMING, "gunicorn", f"{method.__qualname__} takes {parameters(method)}"
            )
        assert "self.req = req" in inspect.getsource(ChunkedReader.__init__), changed(
            self.FRAMING, "gunicorn", "ChunkedReader no longer keeps its request as req"
        )
        assert "self.reader = reader" in inspect.getsource(Body.__init__), changed(
            self.FRAMING, "gunicorn", "Body no longer keeps its reader as reader"
        )
        assert "self.unreader = unreader" in inspect.getsource(Message.__init__), changed(
            self.FRAMING, "gunicorn", "a request no longer keeps its unreader"
        )

    def test_the_gevent_worker_still_has_the_methods_the_api_worker_overrides(self) -> None:
        from gunicorn import util
        from gunicorn.http.errors import InvalidHeader
        from gunicorn.workers.ggevent import GeventWorker

        for method, names in (
            (GeventWorker.handle_request, ["self", "listener_name", "req", "sock", "addr"]),
            (GeventWorker.handle_error, ["self", "req", "client", "addr", "exc"]),
            (GeventWorker.patch, ["self"]),
            (InvalidHeader.__init__, ["self", "hdr", "req"]),
        ):
            assert parameters(method) == names, changed(
                self.WORKER, "gunicorn", f"{method.__qualname__} takes {parameters(method)}"
            )
        assert parameters(util.close_graceful)[:1] == ["sock"], changed(
            self.WORKER, "gunicorn", "util.close_graceful no longer takes the socket first"
        )


class TestPyYaml:
    MODULE = "shared/dsl/loader.py"

    def test_the_installed_pyyaml_is_one_the_workflow_loader_was_checked_against(
        self,
    ) -> None:
        from tickwork.shared.dsl.loader import CHECKED_PYYAML_VERSIONS

        require_version(self.MODULE, "PyYAML", CHECKED_PYYAML_VERSIONS)

    def test_the_safe_loader_still_has_the_methods_the_workflow_loader_uses(self) -> None:
        import yaml

        loader = yaml.SafeLoader
        for name, names in (
            ("compose_node", ["self", "parent", "index"]),
            ("flatten_mapping", ["self", "node"]),
            ("construct_object", ["self", "node", "deep"]),
            ("construct_yaml_int", ["self", "node"]),
            ("construct_yaml_float", ["self", "node"]),
        ):
            method = getattr(loader, name, None)
            assert method is not None, changed(self.MODULE, "PyYAML", f"SafeLoader.{name} is gone")
            assert parameters(method) == names, changed(
                self.MODULE, "PyYAML", f"SafeLoader.{name} takes {parameters(method)}"
            )
        composer = inspect.getsource(yaml.composer.Composer)
        assert composer.count("self.compose_node(") >= 3, changed(
            self.MODULE,
            "PyYAML",
            "the composer no longer composes every node through self.compose_node",
        )

    def test_the_implicit_resolver_table_still_maps_characters_to_tags_and_patterns(
        self,
    ) -> None:
        import yaml

        table = yaml.SafeLoader.yaml_implicit_resolvers
        assert isinstance(table, dict) and table, changed(
            self.MODULE, "PyYAML", "SafeLoader.yaml_implicit_resolvers is not a dict"
        )
        tags = set()
        for first, resolvers in table.items():
            assert isinstance(first, str | None), changed(
                self.MODULE, "PyYAML", f"a resolver is keyed by {first!r}"
            )
            for tag, regexp in resolvers:
                assert isinstance(tag, str) and isinstance(regexp, re.Pattern), changed(
                    self.MODULE, "PyYAML", f"a resolver is {(tag, regexp)!r}"
                )
                tags.add(tag)
        for dropped in ("int", "float", "timestamp"):
            assert f"tag:yaml.org,2002:{dropped}" in tags, changed(
                self.MODULE, "PyYAML", f"no implicit resolver gives the {dropped} tag"
            )
