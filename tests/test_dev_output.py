"""How ``tickwork dev`` writes its records and its services': one format for every service,
JSON lines or text, and an output whose reader went away noticed before any write."""

from __future__ import annotations

import io
import json
import os

from tickwork.services.compose.dev_processes import DevOutput, record_of

RECORD = {
    "time": "2026-12-02T09:00:00+00:00",
    "level": "warning",
    "logger": "tickwork.services.agent.worker",
    "message": "lost the lease task_id=7",
}


def test_a_json_record_gets_the_service_name_and_stays_one_line() -> None:
    stream = io.StringIO()
    DevOutput(stream, json_lines=True, width=9).write_record("agent.1", dict(RECORD))
    (line,) = stream.getvalue().splitlines()
    assert json.loads(line) == {**RECORD, "service": "agent.1"}


def test_a_text_record_is_prefixed_by_time_and_service_on_each_of_its_lines() -> None:
    output = DevOutput(io.StringIO(), json_lines=False, width=9)
    record = {**RECORD, "exception": "Traceback (most recent call last):\nValueError: x"}
    lines = output.render("agent.1", record).splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == [
        "agent.1   | WARNING tickwork.services.agent.worker lost the lease task_id=7",
        "agent.1   | Traceback (most recent call last):",
        "agent.1   | ValueError: x",
    ]


def test_a_line_printed_outside_logging_becomes_a_record_of_its_own() -> None:
    record = record_of("worker: Warm shutdown (MainProcess)")
    assert record["logger"] == "output"
    assert record["message"] == "worker: Warm shutdown (MainProcess)"
    assert record_of(json.dumps(RECORD)) == RECORD


def test_blank_lines_of_a_service_are_left_out() -> None:
    stream = io.StringIO()
    DevOutput(stream, json_lines=True, width=9).write_service_line("api", b"  \n")
    assert stream.getvalue() == ""


def test_an_output_whose_reader_is_gone_is_broken_before_anything_is_written() -> None:
    # Given an output into a pipe
    read_end, write_end = os.pipe()
    with open(write_end, "w", encoding="utf-8") as writer:
        output = DevOutput(writer, json_lines=True, width=9)
        output.say("api at http://127.0.0.1:8765")
        assert not output.broken
        # When its reader closes it
        os.close(read_end)
        # Then the output is broken, and writing to it drops the record without an error
        assert output.broken
        output.say("stopping")
