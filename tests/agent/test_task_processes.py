"""Specifications of a task's processes under their supervisor (services/agent/operators).

Each test runs real commands through :func:`run_child` or the supervisor itself, and looks
at the processes they started through /proc. Commands that fork write their pids to files
in the test's directory; every wait is bounded, and whatever a test started is killed on
the way out.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fault._cluster import command_line, is_running
from tests.support.waiting import wait_until
from tickwork.services.agent.operators.base import OperatorContext, OperatorFailed, ResourceLimits
from tickwork.services.agent.operators.process import (
    KILL_GRACE_SECONDS,
    SUPERVISOR,
    Supervisors,
    run_child,
    task_environment,
    terminate_children,
)
from tickwork.services.agent.operators.supervisor import descendants_of, parent_of_each_process
from tickwork.shared.dispatch.messages import TaskMessage

REPOSITORY = Path(__file__).resolve().parents[2]
GONE_WITHIN_SECONDS = 2.0
PRIVATE_SIGNALS = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGCHLD,
    signal.SIGUSR1,
    signal.SIGPIPE,
    signal.SIGXFSZ,
)
"""Signals the supervisor takes, or Python ignores."""

# A process that double-forks into a session of its own (out of the task's process group)
# and notes its pid; and one that notes the pid of a process it leaves running.
ESCAPE = "(setsid sh -c 'echo $$ > escaped; exec sleep 30' &)"
BACKGROUND = "sleep 30 & echo $! > background"


def pids_in(directory: Path, *names: str) -> list[int]:
    """Wait until every file ``names`` holds a pid; those pids."""

    def written() -> bool:
        return all((directory / n).exists() and (directory / n).read_text().strip() for n in names)

    wait_until(f"{names} were written", written, 10)
    return [int((directory / name).read_text()) for name in names]


@pytest.fixture
def context(tmp_path: Path) -> Iterator[OperatorContext]:
    log_path = tmp_path / "task.log"
    with log_path.open("w") as log_file:
        yield OperatorContext(_message(tmp_path), log_file, log_path)


@pytest.fixture
def leftovers() -> Iterator[list[int]]:
    """Pids a test started; any still running at the end is killed."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def sh(context: OperatorContext, command: str) -> int:
    return run_child(context, ["/bin/sh", "-c", command], task_environment())


def run_in_thread(context: OperatorContext, command: str) -> threading.Thread:
    thread = threading.Thread(target=lambda: _ignore_failure(context, command), daemon=True)
    thread.start()
    return thread


def _ignore_failure(context: OperatorContext, command: str) -> None:
    with contextlib.suppress(OperatorFailed):
        sh(context, command)


class TestEndingWithTheTask:
    def test_what_a_command_leaves_running_ends_when_it_exits_even_outside_its_group(
        self, context: OperatorContext, tmp_path: Path, leftovers: list[int]
    ) -> None:
        # Given a command that leaves a background child and a double-forked, setsid() one
        code = sh(context, f"{ESCAPE}; {BACKGROUND}; until [ -s escaped ]; do sleep 0.01; done")
        leftovers.extend(pids_in(tmp_path, "escaped", "background"))

        # Then when it exits, both are gone
        assert code == 0
        assert not [pid for pid in leftovers if is_running(pid)]

    def test_a_stop_reaches_a_process_that_left_the_group_and_the_grace_is_not_waited_out(
        self, context: OperatorContext, tmp_path: Path, leftovers: list[int]
    ) -> None:
        # Given a command that ignores SIGTERM until a process outside its group got it
        escaped = (
            '(setsid sh -c \'trap "echo stopped > got-term; exit" TERM; echo $$ > escaped;'
            " while :; do sleep 0.05; done' &)"
        )
        # (trapped after the escape: a shell cannot trap what it was started ignoring)
        command = f"{escaped}; trap '' TERM; until [ -s got-term ]; do sleep 0.05; done"
        thread = run_in_thread(context, command)
        leftovers.extend(pids_in(tmp_path, "escaped"))

        # When the run is stopped (a kill, a lost lease, the agent's drain)
        stopped_at = time.monotonic()
        context.control.stop("killed")
        wait_until("the run ended", lambda: not thread.is_alive(), KILL_GRACE_SECONDS + 5)

        # Then the escaped process got SIGTERM, and the run ended without the grace
        assert (tmp_path / "got-term").read_text() == "stopped\n"
        assert time.monotonic() - stopped_at < KILL_GRACE_SECONDS
        assert not is_running(leftovers[0])

    @pytest.mark.slow
    def test_a_process_that_ignores_sigterm_outside_the_group_is_killed_after_the_grace(
        self, context: OperatorContext, tmp_path: Path, leftovers: list[int]
    ) -> None:
        escaped = "(setsid sh -c \"trap '' TERM; echo \\$\\$ > escaped; sleep 30\" &)"
        thread = run_in_thread(context, f"trap '' TERM; {escaped}; sleep 30")
        leftovers.extend(pids_in(tmp_path, "escaped"))

        context.control.stop("killed")
        wait_until("the run ended", lambda: not thread.is_alive(), KILL_GRACE_SECONDS + 5)

        assert not is_running(leftovers[0])

    def test_terminating_the_children_kills_every_process_of_every_task_at_once(
        self, context: OperatorContext, tmp_path: Path, leftovers: list[int]
    ) -> None:
        thread = run_in_thread(context, f"trap '' TERM; {ESCAPE}; {BACKGROUND}; wait")
        leftovers.extend(pids_in(tmp_path, "escaped", "background"))

        terminate_children()

        wait_until("the run ended", lambda: not thread.is_alive(), GONE_WITHIN_SECONDS)
        assert not [pid for pid in leftovers if is_running(pid)]


class TestDyingWithTheAgent:
    def test_a_task_dies_with_every_process_it_started_when_its_agent_is_killed(
        self, tmp_path: Path, leftovers: list[int]
    ) -> None:
        # Given an "agent" running a command that forks a chain, a pipeline and a
        # double-forked setsid() process
        command = f"{ESCAPE}; sleep 30 | cat & sh -c 'sleep 30; echo' & {BACKGROUND}; wait"
        agent = start_agent(tmp_path, command)
        leftovers.extend(pids_in(tmp_path, "escaped", "background"))
        leftovers.append(agent.pid)  # killed however the test ends
        wait_until("the chain and the pipeline run", lambda: len(sleeps_below(agent)) >= 3, 5)
        leftovers.extend(task_processes(agent))

        # When the agent is killed with SIGKILL
        agent.kill()
        agent.wait(timeout=5)

        # Then within seconds none of the task's processes is left
        wait_until(
            "no process of the task is left",
            lambda: not [pid for pid in leftovers if is_running(pid)],
            GONE_WITHIN_SECONDS,
        )

    def test_no_process_of_a_killed_task_acts_on_another_ones_death(
        self, tmp_path: Path, leftovers: list[int]
    ) -> None:
        # Given an "agent" running pipelines whose readers write once their input ends
        count = 40
        command = f"for i in $(seq {count}); do sleep 30 | (cat; echo $i >> ends) & done; wait"
        agent = start_agent(tmp_path, command)
        leftovers.append(agent.pid)  # killed however the test ends
        wait_until("the pipelines run", lambda: len(sleeps_below(agent)) == count, 10)
        leftovers.extend(task_processes(agent))

        # When the agent is killed, and with it every writer
        agent.kill()
        agent.wait(timeout=5)
        wait_until(
            "no process of the task is left",
            lambda: not [pid for pid in leftovers if is_running(pid)],
            GONE_WITHIN_SECONDS,
        )

        # Then no reader saw its input end: each was stopped before any was killed
        assert not (tmp_path / "ends").exists()

    def test_a_task_outlives_the_thread_that_started_it_but_not_its_agent(
        self, tmp_path: Path, leftovers: list[int]
    ) -> None:
        # Given a task started from a thread that then ends (Linux sends the parent-death
        # signal when the thread that forked exits, not only when the process does)
        agent = start_agent(tmp_path, f"{BACKGROUND}; wait", from_thread=True)
        leftovers.extend(pids_in(tmp_path, "background"))
        leftovers.append(agent.pid)  # killed however the test ends
        wait_until("the thread ended", (tmp_path / "thread-ended").exists, 5)
        time.sleep(0.2)  # a grace for a wrong death to show: there is nothing to wait for

        # Then the task keeps running while the agent lives
        assert is_running(leftovers[0])
        assert agent.poll() is None

        # And dies with it
        agent.kill()
        agent.wait(timeout=5)
        wait_until("the task is gone", lambda: not is_running(leftovers[0]), GONE_WITHIN_SECONDS)

    def test_a_supervisor_whose_agent_died_before_it_started_serves_nothing(
        self, tmp_path: Path
    ) -> None:
        # The supervisor is told a parent that is not its own: the agent is gone.
        argv = [sys.executable, "-I", "-S", str(SUPERVISOR), "1", "5", "0"]
        finished = subprocess.run(argv, cwd=tmp_path, timeout=20, check=False)

        assert finished.returncode == 137


class TestWhatTheCommandSees:
    def test_its_exit_status_and_the_signal_that_killed_it_are_the_tasks(
        self, context: OperatorContext
    ) -> None:
        assert sh(context, "exit 3") == 3
        assert sh(context, "kill -TERM $$") == -signal.SIGTERM

    def test_its_resource_limits_are_set_and_its_input_reaches_it(
        self, context: OperatorContext, tmp_path: Path
    ) -> None:
        context.limits = ResourceLimits(max_open_files=64)
        code = run_child(
            context,
            ["/bin/sh", "-c", "ulimit -n > limit; cat > input"],
            task_environment(),
            stdin_text="hello",
        )
        assert code == 0
        assert (tmp_path / "limit").read_text() == "64\n"
        assert (tmp_path / "input").read_text() == "hello"

    def test_a_broken_pipe_ends_a_writer_as_it_would_in_a_terminal(
        self, context: OperatorContext, tmp_path: Path
    ) -> None:
        # Python ignores SIGPIPE; the command must not inherit that (`yes` would report
        # "Broken pipe" and exit 1 instead of ending quietly).
        assert sh(context, "(yes; echo $? > status) | head -n 1 > /dev/null") == 0
        assert (tmp_path / "status").read_text() == f"{128 + signal.SIGPIPE}\n"

    def test_a_command_that_cannot_start_fails_with_127_and_says_why(
        self, context: OperatorContext
    ) -> None:
        code = run_child(context, ["/no/such/program"], task_environment())

        assert code == 127
        assert "cannot start /no/such/program" in context.log_path.read_text()


class TestTheSupervisors:
    """Each agent process keeps a supervisor per task it runs at a time, task after task."""

    def test_a_command_starts_with_no_signal_ignored_or_blocked_and_only_its_own_files(
        self, context: OperatorContext, tmp_path: Path
    ) -> None:
        # Given another task running meanwhile (its files must not reach this one)
        other = run_in_thread(context, "sleep 30")
        try:
            # When a command looks at what it was given
            code = sh(context, "exec grep -E '^Sig(Ign|Blk)' /proc/self/status > signals")
            listed = sh(context, "exec ls -l /proc/self/fd > fds")

            # Then it ignores none of the signals the supervisor takes or Python ignores,
            # blocks none, and holds no socket or pipe of the supervisor's or another task's
            assert code == listed == 0
            masks = dict(
                line.split(":") for line in (tmp_path / "signals").read_text().splitlines()
            )
            ignored, blocked = int(masks["SigIgn"], 16), int(masks["SigBlk"], 16)
            assert not [s.name for s in PRIVATE_SIGNALS if ignored & 1 << (s - 1)]
            assert blocked == 0
            held = (tmp_path / "fds").read_text()
            assert "socket:" not in held and "pipe:" not in held, held
        finally:
            context.control.stop("killed")
            other.join(timeout=KILL_GRACE_SECONDS + 5)

    def test_tasks_started_from_many_threads_at_once_each_get_their_own_status(
        self, tmp_path: Path
    ) -> None:
        codes: dict[int, int] = {}

        def run(n: int) -> None:
            with (tmp_path / f"{n}.log").open("w") as log:
                context = OperatorContext(_message(tmp_path), log, tmp_path / f"{n}.log")
                codes[n] = sh(context, f"echo {n}; exit {n}")

        threads = [threading.Thread(target=run, args=(n,)) for n in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=20)

        assert codes == {n: n for n in range(16)}
        assert all((tmp_path / f"{n}.log").read_text() == f"{n}\n" for n in range(16))

    def test_one_supervisor_runs_task_after_task_and_one_that_died_is_replaced(
        self, context: OperatorContext
    ) -> None:
        assert sh(context, "echo $PPID > first") == 0
        assert sh(context, "echo $PPID > second") == 0
        directory = context.log_path.parent
        assert (directory / "first").read_text() == (directory / "second").read_text()

        idle = Supervisors._idle[-1]
        idle.process.kill()
        idle.process.wait(timeout=5)

        assert sh(context, "exit 4") == 4

    def test_a_stop_that_came_as_a_task_ended_does_not_reach_the_next_one(
        self, context: OperatorContext
    ) -> None:
        assert sh(context, "true") == 0
        idle = Supervisors._idle[-1]
        # A stop sent while the supervisor was between tasks (the task it was meant for
        # had just ended)
        os.kill(idle.pid, signal.SIGTERM)
        os.kill(idle.pid, signal.SIGUSR1)

        assert sh(context, "sleep 0.2; exit 5") == 5

    def test_after_a_task_its_group_id_gets_no_signal_it_may_lead_another_task_by_now(
        self, context: OperatorContext, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        sent: list[tuple[int, int]] = []
        monkeypatch.setattr(os, "killpg", lambda pgid, signum: sent.append((pgid, signum)))

        assert sh(context, f"{BACKGROUND}; exit 3") == 3

        # The supervisor ended the command's leftovers itself; the agent sent nothing
        directory = context.log_path.parent
        (left,) = pids_in(directory, "background")
        wait_until("the background sleep ended", lambda: not is_running(left), GONE_WITHIN_SECONDS)
        assert sent == []

    def test_the_group_of_a_task_whose_supervisor_died_is_killed_by_the_agent(
        self, context: OperatorContext, leftovers: list[int]
    ) -> None:
        # Given a task running under a supervisor that is then killed with SIGKILL
        thread = run_in_thread(context, "echo $$ > command; exec sleep 30")
        (command,) = pids_in(context.log_path.parent, "command")
        leftovers.append(command)
        supervisor = parent_of_each_process()[command]
        os.kill(supervisor, signal.SIGKILL)
        # Then the task ends, and the agent killed the command's group in its place
        thread.join(timeout=10)
        assert not thread.is_alive()
        wait_until("the command ended", lambda: not is_running(command), GONE_WITHIN_SECONDS)

    def test_a_task_s_environment_is_the_one_it_was_given(
        self, context: OperatorContext, tmp_path: Path
    ) -> None:
        env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "ONLY": "this"}
        (tmp_path / "found-on-path").write_text("#!/bin/sh\nenv | sort > seen\n")
        (tmp_path / "found-on-path").chmod(0o755)

        assert run_child(context, ["found-on-path"], env) == 0
        seen = (tmp_path / "seen").read_text()
        assert "ONLY=this\n" in seen and "TICKWORK_TASK_ID=7\n" in seen
        assert not [line for line in seen.splitlines() if line.startswith("PYTHON")]

    def test_a_task_without_a_path_does_not_search_the_path_of_the_task_before(
        self, context: OperatorContext, tmp_path: Path
    ) -> None:
        (tmp_path / "found-on-path").write_text("#!/bin/sh\nexit 0\n")
        (tmp_path / "found-on-path").chmod(0o755)
        with_path = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
        assert run_child(context, ["found-on-path"], with_path) == 0

        # The same supervisor runs the next task, whose environment has no PATH
        assert run_child(context, ["found-on-path"], {"ONLY": "this"}) == 127
        assert "cannot start found-on-path" in context.log_path.read_text()


def _message(tmp_path: Path) -> TaskMessage:
    return TaskMessage(
        task_id=7,
        attempt_id=3,
        lease_token=1,
        full_name="+wf+task",
        operator="sh",
        command="",
        params={},
        project_dir=str(tmp_path),
        timeout_seconds=60,
    )


def test_descendants_are_found_through_every_generation() -> None:
    parents = {2: 1, 3: 2, 4: 3, 5: 1, 6: 99}
    assert sorted(descendants_of(1, parents)) == [2, 3, 4, 5]


def start_agent(
    tmp_path: Path, command: str, *, from_thread: bool = False
) -> subprocess.Popen[bytes]:
    """A process that starts ``command`` as a task would be (from a thread that ends
    0.5 s later, if asked), then waits to be killed."""
    code = (
        "import os, sys, threading, time\n"
        "from tickwork.services.agent.operators.base import ResourceLimits\n"
        "from tickwork.services.agent.operators.process import start_task\n"
        "argv = ['/bin/sh', '-c', sys.argv[1]]\n"
        "def start():\n"
        "    start_task(argv, cwd='.', env=os.environ, limits=ResourceLimits(),\n"
        "               output=1, given_input=None)\n"
        # The thread outlives the supervisor's start-up (its prctl), then ends.
        "    time.sleep(0.5)\n"
        f"if {from_thread}:\n"
        "    thread = threading.Thread(target=start)\n"
        "    thread.start()\n"
        "    thread.join()\n"
        "    open('thread-ended', 'w').close()\n"
        "else:\n"
        "    start()\n"
        "time.sleep(60)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    return subprocess.Popen([sys.executable, "-c", code, command], cwd=tmp_path, env=env)


def task_processes(agent: subprocess.Popen[bytes]) -> list[int]:
    """Every process below the "agent" (the supervisor and what it started)."""
    return descendants_of(agent.pid, parent_of_each_process())


def sleeps_below(agent: subprocess.Popen[bytes]) -> list[int]:
    return [pid for pid in task_processes(agent) if command_line(pid)[:1] == ["sleep"]]
