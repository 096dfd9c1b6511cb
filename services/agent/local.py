"""Running tasks in the executor's own process (``tickwork run``, ``standalone``) with
their logs streamed as an agent streams them: chunk events that the executor stores.

The run's log goes to a spool (in memory, or a file under the scratch directory once a
child process writes it), the log streamer sends its head while it runs and the rest,
head and tail kept, when it ends, and the result follows the last chunks: the same
events, and so the same stored log, as a run on a distributed agent.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tickwork.services.agent.log_limits import LogLimits
from tickwork.services.agent.log_stream import LogPump, LogStreamer, remove_spool
from tickwork.services.agent.operators.base import RunControl
from tickwork.services.agent.runner import TaskRunner
from tickwork.services.agent.spool import SpoolLog
from tickwork.shared.dispatch.messages import AgentEvent, TaskFinished, TaskMessage, TaskStarted
from tickwork.shared.dispatch.seam import EventSink


class _SinkStream:
    """The event stream of an in-process run: events go straight to the executor's sink."""

    def __init__(self, report: EventSink) -> None:
        self.report = report

    def emit(self, events: Sequence[AgentEvent]) -> None:
        for event in events:
            self.report(event)


class StreamingRunner:
    """Runs messages with ``runner``, streaming each run's log as chunk events through the
    event sink; spool files go under ``runner.log_root`` and are removed after the run."""

    def __init__(self, runner: TaskRunner, limits: LogLimits | None = None) -> None:
        runner.log_root.mkdir(parents=True, exist_ok=True)
        self.runner = runner
        self.limits = limits or LogLimits()
        self.pump = LogPump()

    def __call__(
        self, message: TaskMessage, report: EventSink, control: RunControl | None = None
    ) -> None:
        relative, _ = self.runner.log_file_of(message)
        spool = SpoolLog(self.runner.log_root / relative.name)  # unique: task id and token
        stream = _SinkStream(report)
        streamer = LogStreamer(stream, message, relative, spool, self.pump, self.limits)

        def on_event(event: AgentEvent) -> None:
            if isinstance(event, TaskStarted):
                streamer.start(event)
            elif isinstance(event, TaskFinished):
                stream.emit(streamer.finish(stream.emit))
                report(streamer.describe(event))
            else:
                report(event)

        try:
            self.runner(message, on_event, control, spool=spool)
        finally:
            streamer.stop()
            spool.close()
            remove_spool(spool)

    def close(self) -> None:
        """Stop the streaming thread (runs still going send their logs when they end)."""
        self.pump.close()


def scratch_dir(state_dir: Path) -> Path:
    """Where in-process runs spool logs too large for memory: ``<state dir>/work/spool``."""
    return state_dir / "work" / "spool"
