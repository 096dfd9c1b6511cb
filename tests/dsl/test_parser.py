"""Specification of the workflow language: what parses into which tree, and every error's place."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.support.files import write_under
from tickwork.shared.domain.delays import StartRule
from tickwork.shared.domain.workflow import IntervalType, RetryPolicy, TaskSpec, WorkflowDefinition
from tickwork.shared.dsl.loader import LineMap, load_yaml
from tickwork.shared.dsl.parser import load_project, parse_workflow_file, parse_workflow_text
from tickwork.shared.errors import InvalidWorkflow


def write(project: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        write_under(project, name, textwrap.dedent(text))


def parse(project: Path, text: str, **files: str) -> WorkflowDefinition:
    """Parse ``text`` as ``wf.dig`` of ``project``; ``files`` are written beside it first."""
    write(project, {name.replace("__", "/") + ".dig": body for name, body in files.items()})
    return parse_workflow_text(textwrap.dedent(text), "wf.dig", project)


def problems(project: Path, text: str, **files: str) -> list[str]:
    """The problems reported for ``text`` as ``wf.dig``, each as ``file:line: message``."""
    with pytest.raises(InvalidWorkflow) as caught:
        parse(project, text, **files)
    return [str(problem) for problem in caught.value.problems]


def child(spec: TaskSpec, name: str) -> TaskSpec:
    return next(c for c in spec.children if c.name == name)


class TestLoader:
    def test_mappings_remember_their_line_and_the_line_of_each_key(self) -> None:
        data = load_yaml("a: 1\nb:\n  c: 2\n  d: 3\n", "wf.dig")
        assert isinstance(data, LineMap)
        assert (data.line, data.key_lines) == (1, {"a": 1, "b": 2})
        assert (data["b"].line, data["b"].key_lines) == (3, {"c": 3, "d": 4})

    def test_a_duplicate_key_is_reported_with_both_lines(self) -> None:
        with pytest.raises(InvalidWorkflow) as caught:
            load_yaml("+a:\n  echo>: 1\n+b:\n  echo>: 2\n+a:\n  echo>: 3\n", "wf.dig")
        assert [str(p) for p in caught.value.problems] == [
            "wf.dig:5: duplicate key '+a' (first at line 1)"
        ]

    def test_a_yaml_syntax_error_is_reported_at_its_line(self) -> None:
        with pytest.raises(InvalidWorkflow) as caught:
            load_yaml("+a:\n  echo>: hi\n   bad: indent\n", "wf.dig")
        assert str(caught.value).startswith("wf.dig:3: invalid YAML: ")

    def test_clock_times_and_dates_stay_strings(self) -> None:
        data = load_yaml("t: 10:00:00\nm: 30:00\nd: 2024-01-01\nn: 12\nf: 1.5\n", "wf.dig")
        assert data == {"t": "10:00:00", "m": "30:00", "d": "2024-01-01", "n": 12, "f": 1.5}

    def test_python_tags_are_refused(self) -> None:
        with pytest.raises(InvalidWorkflow, match="could not determine a constructor"):
            load_yaml("a: !!python/object/apply:os.system ['true']\n", "wf.dig")

    def test_merge_keys_do_not_count_as_duplicates(self) -> None:
        data = load_yaml("base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  y: 3\n", "wf.dig")
        assert data["use"] == {"x": 1, "y": 3}


class TestValidWorkflows:
    def test_the_workflow_is_named_after_the_file_and_children_keep_file_order(
        self, tmp_path: Path
    ) -> None:
        workflow = parse(
            tmp_path,
            """
            +load:
              sh>: ./load.sh
            +transform:
              +a:
                echo>: a
              +b:
                echo>: b
            +report:
              echo>: done
            """,
        )
        assert workflow.name == "wf"
        assert workflow.root.name == "+wf"
        assert workflow.timezone == "UTC"
        assert [c.name for c in workflow.root.children] == ["+load", "+transform", "+report"]
        assert [c.name for c in child(workflow.root, "+transform").children] == ["+a", "+b"]

    def test_an_operator_task_keeps_its_command_and_local_params(self, tmp_path: Path) -> None:
        workflow = parse(
            tmp_path,
            """
            +run:
              sh>: echo ${greeting}
              greeting: hello
              nested: {list: [1, 2]}
            """,
        )
        run = child(workflow.root, "+run")
        assert (run.operator, run.command) == ("sh", "echo ${greeting}")
        assert run.params == {"greeting": "hello", "nested": {"list": [1, 2]}}
        assert type(run.params["nested"]) is dict

    def test_the_long_operator_form_is_the_same_as_the_short_one(self, tmp_path: Path) -> None:
        workflow = parse(tmp_path, "+a:\n  _type: echo\n  _command: hi\n")
        assert (child(workflow.root, "+a").operator, child(workflow.root, "+a").command) == (
            "echo",
            "hi",
        )

    def test_numbers_as_commands_become_strings(self, tmp_path: Path) -> None:
        workflow = parse(tmp_path, "+a:\n  echo>: 42\n")
        assert child(workflow.root, "+a").command == "42"

    def test_py_and_fail_operators(self, tmp_path: Path) -> None:
        workflow = parse(tmp_path, "+a:\n  py>: tasks.etl.run\n+b:\n  fail>: stop here\n")
        assert child(workflow.root, "+a").command == "tasks.etl.run"
        assert child(workflow.root, "+b").command == "stop here"

    def test_top_level_keys(self, tmp_path: Path) -> None:
        workflow = parse(
            tmp_path,
            """
            timezone: Asia/Tokyo
            schedule:
              daily>: 07:00:00
            _export:
              a: 1
              b: ${a}
            _retry: 2
            _parallel: true
            _error:
              echo>: failed ${error.message}
            +only:
              echo>: x
            """,
        )
        assert workflow.timezone == "Asia/Tokyo"
        assert workflow.schedule is not None
        assert workflow.schedule["cron"] == "0 0 * * *"
        assert workflow.schedule["delay_seconds"] == 25200
        assert workflow.schedule["timezone"] == "Asia/Tokyo"
        root = workflow.root
        assert root.export == {"a": 1, "b": "${a}"}
        assert root.retry == RetryPolicy(limit=2)
        assert root.parallel is True
        assert root.error is not None
        assert (root.error.name, root.error.operator) == ("^error", "echo")

    def test_a_workflow_without_tasks_is_an_empty_group(self, tmp_path: Path) -> None:
        workflow = parse(tmp_path, "timezone: UTC\n")
        assert workflow.root == TaskSpec("+wf")

    def test_parallel_accepts_true_the_string_true_and_a_limit(self, tmp_path: Path) -> None:
        workflow = parse(
            tmp_path,
            """
            +p:
              _parallel: "true"
              +a: {echo>: a}
            +q:
              _parallel: {limit: 2}
              +a: {echo>: a}
            +r:
              _parallel: false
              +a: {echo>: a}
            """,
        )
        assert child(workflow.root, "+p").parallel is True
        q = child(workflow.root, "+q")
        assert (q.parallel, q.parallel_limit) == (True, 2)
        assert child(workflow.root, "+r").parallel is False

    def test_retry_policies(self, tmp_path: Path) -> None:
        workflow = parse(
            tmp_path,
            """
            +a:
              echo>: a
              _retry: 0
            +b:
              echo>: b
              _retry: {limit: 3, interval: 10}
            +d:
              echo>: d
              _retry: {limit: 2, interval: 30s, max_interval: 1h}
            +c:
              _retry:
                limit: 4
                interval: 1.5
                interval_type: exponential
                max_interval: 60
              +x: {echo>: x}
            """,
        )
        assert child(workflow.root, "+a").retry == RetryPolicy(limit=0)
        assert child(workflow.root, "+b").retry == RetryPolicy(limit=3, interval_seconds=10.0)
        assert child(workflow.root, "+d").retry == RetryPolicy(
            limit=2, interval_seconds=30.0, max_interval_seconds=3600.0
        )
        assert child(workflow.root, "+c").retry == RetryPolicy(
            limit=4,
            interval_seconds=1.5,
            interval_type=IntervalType.EXPONENTIAL,
            max_interval_seconds=60.0,
        )

    def test_background_in_a_sequential_group(self, tmp_path: Path) -> None:
        workflow = parse(
            tmp_path,
            "+a:\n  echo>: a\n  _background: true\n+b:\n  echo>: b\n  _background: false\n",
        )
        assert child(workflow.root, "+a").background is True
        assert child(workflow.root, "+b").background is False

    def test_after_names_siblings_of_a_parallel_group(self, tmp_path: Path) -> None:
        workflow = parse(
            tmp_path,
            """
            _parallel: true
            +a: {echo>: a}
            +b: {echo>: b}
            +c:
              echo>: c
              _after: [+a, b]
            +d:
              echo>: d
              _after: +c
            """,
        )
        assert child(workflow.root, "+c").after == ("+a", "+b")
        assert child(workflow.root, "+d").after == ("+c",)

    def test_error_and_check_bodies_become_generated_tasks(self, tmp_path: Path) -> None:
        workflow = parse(
            tmp_path,
            """
            +load:
              sh>: ./load.sh
              _check:
                sh>: ./verify.sh
              _error:
                +notify: {echo>: load failed}
                +cleanup: {sh>: ./cleanup.sh}
            """,
        )
        load = child(workflow.root, "+load")
        assert load.check is not None
        assert (load.check.name, load.check.operator, load.check.command) == (
            "^check",
            "sh",
            "./verify.sh",
        )
        assert load.error is not None
        assert load.error.name == "^error"
        assert load.error.is_group
        assert [c.name for c in load.error.children] == ["+notify", "+cleanup"]

    def test_call_embeds_the_called_workflow_as_sub(self, tmp_path: Path) -> None:
        workflow = parse(
            tmp_path,
            "+step:\n  call>: lib/common\n",
            lib__common="_export:\n  level: 2\n+inner:\n  call>: leaf.dig\n",
            lib__leaf="+x:\n  echo>: leaf\n",
        )
        step = child(workflow.root, "+step")
        assert (step.operator, step.command) == ("call", "lib/common.dig")
        assert step.called is not None
        assert step.called.name == "^sub"
        assert step.called.export == {"_workdir": "lib", "level": 2}
        inner = child(step.called, "+inner")
        assert inner.command == "lib/leaf.dig"
        assert inner.called is not None
        assert [c.name for c in inner.called.children] == ["+x"]

    def test_config_round_trips_through_json_form(self, tmp_path: Path) -> None:
        workflow = parse(
            tmp_path,
            """
            schedule: {cron>: "0 * * * *"}
            _parallel: {limit: 3}
            +a:
              echo>: hi
              _retry: {limit: 1, interval: 2}
              _check: {echo>: ok}
            """,
        )
        assert WorkflowDefinition.from_config(workflow.to_config()) == workflow


class TestTopLevelErrors:
    def test_unknown_directive_is_reported_with_line_and_suggestion(self, tmp_path: Path) -> None:
        text = "timezone: UTC\n_paralel: true\n+a:\n  echo>: x\n"
        assert problems(tmp_path, text) == [
            "wf.dig:2: unknown directive '_paralel' (did you mean '_parallel'?)"
        ]

    def test_an_empty_file_is_a_problem_at_line_1(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "# nothing here\n") == ["wf.dig:1: the workflow file is empty"]

    def test_a_top_level_list_is_a_problem_at_line_1(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "- +a\n") == [
            "wf.dig:1: the workflow file is a list, not a mapping of tasks"
        ]

    def test_an_unknown_time_zone_is_reported_with_a_suggestion(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "timezone: Europe/Pari\n") == [
            "wf.dig:1: unknown timezone 'Europe/Pari' (did you mean 'Europe/Paris'?)"
        ]

    def test_a_schedule_error_points_at_the_schedule_key(self, tmp_path: Path) -> None:
        text = "schedule:\n  cron>: 0 0 30 2 *\n  delay: 5\n"
        assert problems(tmp_path, text) == ["wf.dig:2: cron '0 0 30 2 *' never fires"]

    def test_a_six_field_cron_is_rejected(self, tmp_path: Path) -> None:
        text = "schedule:\n  cron>: '0 0 0 * * *'\n"
        assert problems(tmp_path, text) == [
            "wf.dig:2: cron '0 0 0 * * *' must have 5 fields "
            "(minute hour day-of-month month day-of-week), got 6"
        ]

    def test_a_schedule_that_is_not_a_mapping_is_rejected(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "\nschedule: daily\n") == [
            "wf.dig:2: 'schedule' must be a mapping such as {daily>: 07:00:00}, got 'daily'"
        ]

    def test_a_schedule_missing_its_form_points_at_the_schedule_key(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "schedule:\n  delay: 5\n") == [
            "wf.dig:1: 'schedule' needs one of cron>, hourly>, daily>, weekly>, monthly>, "
            "minutes_interval>"
        ]

    def test_check_at_the_top_level_is_rejected(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "_check:\n  echo>: x\n") == [
            "wf.dig:1: '_check' is only valid on an operator task"
        ]


class TestTaskErrors:
    def test_unknown_operator_is_reported_with_a_suggestion(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "+a:\n  ech>: hi\n") == [
            "wf.dig:2: unknown operator 'ech>' (did you mean 'echo>'?)"
        ]

    def test_unknown_type_is_reported(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "+a:\n  _type: ehco\n  _command: ls\n") == [
            "wf.dig:2: unknown operator '_type: ehco' (did you mean 'echo'?)"
        ]

    def test_two_operators_in_one_task(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "+a:\n  sh>: ls\n  echo>: hi\n") == [
            "wf.dig:3: task '+a' has two operators: 'sh>' and 'echo>'"
        ]

    def test_children_under_an_operator_task(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "+a:\n  sh>: ls\n  +b:\n    echo>: hi\n") == [
            "wf.dig:3: operator task '+a' cannot have child tasks ('+b')"
        ]

    def test_a_task_that_is_not_a_mapping(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "+a: echo hi\n+b:\n") == [
            "wf.dig:1: task '+a' must be a mapping, got a string",
            "wf.dig:2: task '+b' must be a mapping, got null",
        ]

    def test_a_task_without_a_name(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "+:\n  echo>: hi\n") == [
            "wf.dig:1: a task needs a name after '+'"
        ]

    def test_unknown_key_in_a_group_suggests_a_directive_or_operator(self, tmp_path: Path) -> None:
        text = "+g:\n  _retyr: 1\n  echo: hi\n  load: x\n  +a: {echo>: a}\n"
        assert problems(tmp_path, text) == [
            "wf.dig:2: unknown directive '_retyr' (did you mean '_retry'?)",
            "wf.dig:3: unknown directive 'echo' (did you mean 'echo>'?)",
            "wf.dig:4: unknown directive 'load' (task names start with '+')",
        ]

    def test_unknown_directive_in_an_operator_task(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "+a:\n  echo>: hi\n  _exports: {}\n") == [
            "wf.dig:3: unknown directive '_exports' (did you mean '_export'?)"
        ]

    def test_check_on_a_group_is_rejected(self, tmp_path: Path) -> None:
        text = "+g:\n  +a: {echo>: a}\n  _check:\n    echo>: c\n"
        assert problems(tmp_path, text) == ["wf.dig:3: '_check' is only valid on an operator task"]

    def test_error_bodies_are_validated_when_parsed(self, tmp_path: Path) -> None:
        text = "+a:\n  echo>: a\n  _error:\n    sh>: x\n    echo>: y\n"
        assert problems(tmp_path, text) == [
            "wf.dig:5: task '^error' has two operators: 'sh>' and 'echo>'"
        ]

    def test_an_error_body_must_be_a_mapping(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "_error: echo failed\n") == [
            "wf.dig:1: '_error' must be a mapping (a task or a group of tasks), got a string"
        ]

    def test_export_must_be_a_mapping(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "_export: [a]\n") == [
            "wf.dig:1: '_export' must be a mapping, got a list"
        ]

    def test_keys_must_be_strings(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "+a:\n  echo>: x\n  1: one\n") == [
            "wf.dig:3: key 1 must be a string (quote it)"
        ]

    def test_all_problems_are_collected_in_line_order(self, tmp_path: Path) -> None:
        text = "+b:\n  ech>: b\n_paralel: true\n+c:\n  sh>: [1]\n"
        assert problems(tmp_path, text) == [
            "wf.dig:2: unknown operator 'ech>' (did you mean 'echo>'?)",
            "wf.dig:3: unknown directive '_paralel' (did you mean '_parallel'?)",
            "wf.dig:5: 'sh>' needs a string, got a list",
        ]


class TestOperatorCommands:
    @pytest.mark.parametrize(
        ("body", "message"),
        [
            ("py>: not a function", "'py>' needs module.function, got 'not a function'"),
            ("py>: run", "'py>' needs module.function, got 'run'"),
            ("py>: ${fn}", "'py>' needs module.function, got '${fn}'"),
            ("echo>: {a: 1}", "'echo>' needs a string, got a mapping"),
            ("echo>: true", "'echo>' needs a string, got a boolean"),
            ("fail>:", "'fail>' needs a string, got null"),
            ("_type: sh", "'sh>' needs a string, got null"),
        ],
    )
    def test_bad_commands_are_reported_at_the_operator_line(
        self, tmp_path: Path, body: str, message: str
    ) -> None:
        assert problems(tmp_path, f"+a:\n  {body}\n") == [f"wf.dig:2: {message}"]

    def test_command_without_type(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "+a:\n  echo>: x\n  _command: y\n") == [
            "wf.dig:3: '_command' is only valid with '_type'"
        ]


class TestExpressionsInWorkflows:
    def test_an_invalid_expression_is_reported_at_its_key(self, tmp_path: Path) -> None:
        text = """\
            _export:
              ok: ${a}
              bad: ${a +}
            +t:
              sh>: echo ${b ?}
              p:
                deep: x ${c..d}
            """
        assert problems(tmp_path, text) == [
            "wf.dig:3: invalid expression '${a +}': unexpected end of expression",
            "wf.dig:5: invalid expression '${b ?}': unexpected end of expression",
            "wf.dig:7: invalid expression '${c..d}': expected a name after '.' but found '.'",
        ]

    def test_valid_and_escaped_expressions_are_accepted(self, tmp_path: Path) -> None:
        workflow = parse(tmp_path, "+t:\n  echo>: ${a.b} $${not an expression} ${unclosed\n")
        assert child(workflow.root, "+t").command == "${a.b} $${not an expression} ${unclosed"

    def test_retry_cannot_use_expressions(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "+a:\n  echo>: x\n  _retry: ${n}\n") == [
            "wf.dig:3: '_retry' cannot use ${...} expressions"
        ]


class TestParallelAndBackground:
    @pytest.mark.parametrize(
        ("value", "line", "message"),
        [
            ("yes please", 2, "'_parallel' must be true, false or {limit: N}, got 'yes please'"),
            ("{limit: 0}", 2, "'_parallel' limit must be a whole number from 1 to 10000, got 0"),
            (
                "{limit: '${n}'}",
                2,
                "'_parallel' limit must be a whole number from 1 to 10000, got '${n}'",
            ),
            ("{max: 2}", 2, "'_parallel' must be true, false or {limit: N}, got {'max': 2}"),
        ],
    )
    def test_a_bad_parallel_value_names_the_key(
        self, tmp_path: Path, value: str, line: int, message: str
    ) -> None:
        text = f"+g:\n  _parallel: {value}\n  +a: {{echo>: a}}\n"
        assert problems(tmp_path, text) == [f"wf.dig:{line}: {message}"]

    def test_a_parallel_limit_on_its_own_line(self, tmp_path: Path) -> None:
        text = "+g:\n  _parallel:\n    limit: -1\n  +a: {echo>: a}\n"
        assert problems(tmp_path, text) == [
            "wf.dig:3: '_parallel' limit must be a whole number from 1 to 10000, got -1"
        ]

    def test_background_inside_a_parallel_group_is_rejected(self, tmp_path: Path) -> None:
        text = "_parallel: true\n+a:\n  echo>: a\n  _background: true\n"
        assert problems(tmp_path, text) == [
            "wf.dig:4: '_background' is not valid inside a _parallel group"
        ]

    def test_background_must_be_a_boolean(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "+a:\n  echo>: a\n  _background: 1\n") == [
            "wf.dig:3: '_background' must be true or false, got 1"
        ]


class TestAfter:
    def test_after_outside_a_parallel_group_is_rejected(self, tmp_path: Path) -> None:
        text = "+a: {echo>: a}\n+b:\n  echo>: b\n  _after: +a\n"
        assert problems(tmp_path, text) == [
            "wf.dig:4: '_after' is only valid inside a _parallel group"
        ]

    def test_after_must_name_a_sibling(self, tmp_path: Path) -> None:
        text = "_parallel: true\n+load: {echo>: a}\n+b:\n  echo>: b\n  _after: [+laod]\n"
        assert problems(tmp_path, text) == [
            "wf.dig:5: '_after' names '+laod', not a sibling of '+b' (did you mean '+load'?)"
        ]

    def test_a_task_cannot_run_after_itself(self, tmp_path: Path) -> None:
        text = "_parallel: true\n+a:\n  echo>: a\n  _after: +a\n"
        assert problems(tmp_path, text) == ["wf.dig:4: task '+a' cannot run after itself"]

    def test_after_cycles_are_rejected(self, tmp_path: Path) -> None:
        text = """\
            _parallel: true
            +a:
              echo>: a
              _after: +c
            +b:
              echo>: b
              _after: +a
            +c:
              echo>: c
              _after: +b
            """
        assert problems(tmp_path, text) == ["wf.dig:4: '_after' cycle: +a -> +c -> +b -> +a"]

    def test_after_must_be_names(self, tmp_path: Path) -> None:
        text = "_parallel: true\n+a:\n  echo>: a\n  _after: {x: 1}\n"
        assert problems(tmp_path, text) == [
            "wf.dig:4: '_after' must be a task name or a list of task names, got {'x': 1}"
        ]


class TestRetryErrors:
    @pytest.mark.parametrize(
        ("value", "message"),
        [
            ("-1", "'_retry' must be a whole number from 0 to 1000 or {limit: N, ...}, got -1"),
            ("'3x'", "'_retry' must be a whole number from 0 to 1000 or {limit: N, ...}, got '3x'"),
            ("true", "'_retry' must be a whole number from 0 to 1000 or {limit: N, ...}, got True"),
            ("{interval: 5}", "'_retry' limit must be a whole number from 0 to 1000, got None"),
            (
                "{limit: 2, interval: -5}",
                "'_retry' interval must be from 0 to 604800 seconds"
                " or a duration such as 10m, got -5",
            ),
            (
                "{limit: 2, interval_type: linear}",
                "'_retry' interval_type must be constant or exponential, got 'linear'",
            ),
            (
                "{limit: 2, max_interval: x}",
                "'_retry' max_interval must be from 0 to 604800 seconds"
                " or a duration such as 10m, got 'x'",
            ),
            (
                "{limit: 2, intervall: 1}",
                "unknown '_retry' option 'intervall' (did you mean 'interval'?)",
            ),
        ],
    )
    def test_a_bad_retry_names_the_key(self, tmp_path: Path, value: str, message: str) -> None:
        assert problems(tmp_path, f"+a:\n  echo>: x\n  _retry: {value}\n") == [
            f"wf.dig:3: {message}"
        ]


class TestDelays:
    @pytest.mark.parametrize(
        ("value", "seconds"),
        [("90", 90), ("'90'", 90), ("30s", 30), ("10m", 600), ("1h30m", 5400), ("7d", 604800)],
    )
    def test_a_delay_is_seconds_or_a_duration(
        self, tmp_path: Path, value: str, seconds: int
    ) -> None:
        workflow = parse(tmp_path, f"+a:\n  echo>: x\n  _delay: {value}\n")
        assert child(workflow.root, "+a").start == StartRule(delay_seconds=seconds)

    @pytest.mark.parametrize(
        ("value", "stored"),
        [
            ("07:00", "07:00:00"),
            ("'7:30:15'", "07:30:15"),
            ("2026-12-01T07:00:00+09:00", "2026-12-01T07:00:00+09:00"),
            ("2026-12-01T07:00:00Z", "2026-12-01T07:00:00+00:00"),
        ],
    )
    def test_a_start_time_is_a_wall_time_or_an_instant(
        self, tmp_path: Path, value: str, stored: str
    ) -> None:
        workflow = parse(tmp_path, f"+a:\n  echo>: x\n  _start_at: {value}\n")
        assert child(workflow.root, "+a").start == StartRule(start_at=stored)

    def test_the_keys_hold_the_workflow_a_group_or_a_task(self, tmp_path: Path) -> None:
        workflow = parse(
            tmp_path,
            """
            timezone: Asia/Tokyo
            _start_at: 07:00
            _delay: 1h
            +group:
              _delay: 2m
              +inner:
                echo>: x
            +task:
              _start_at: 2026-12-01T07:00:00+09:00
              _error:
                _delay: 5s
                echo>: failed
              sh>: ./load.sh
            """,
        )
        assert workflow.root.start == StartRule(3600, "07:00:00")
        assert child(workflow.root, "+group").start == StartRule(120)
        task = child(workflow.root, "+task")
        assert task.start == StartRule(start_at="2026-12-01T07:00:00+09:00")
        assert task.params == {}
        assert task.error is not None and task.error.start == StartRule(5)

    def test_a_zero_delay_holds_nothing_back(self, tmp_path: Path) -> None:
        workflow = parse(tmp_path, "+a:\n  echo>: x\n  _delay: 0s\n")
        assert child(workflow.root, "+a").start is None

    def test_the_rule_is_stored_with_the_task_config(self, tmp_path: Path) -> None:
        workflow = parse(tmp_path, "_delay: 10m\n+a:\n  echo>: x\n  _start_at: 07:00\n")
        config = workflow.to_config()
        assert config["root"]["start"] == {"delay": 600}
        assert config["root"]["children"][0]["start"] == {"at": "07:00:00"}
        assert WorkflowDefinition.from_config(config) == workflow

    @pytest.mark.parametrize(
        ("key", "value", "message"),
        [
            ("_delay", "8d", "'_delay' must be at most 7d, got '8d'"),
            ("_delay", "-5", "'_delay' must be at least 0s, got -5"),
            (
                "_delay",
                "soon",
                "'_delay' expected a duration such as 30s, 10m or 1h30m, got 'soon'",
            ),
            ("_delay", "1.5", "'_delay' expected a duration such as 30s, 10m or 1h30m, got 1.5"),
            ("_delay", "true", "'_delay' expected a duration such as 30s, 10m or 1h30m, got True"),
            ("_delay", "${wait}", "'_delay' cannot use ${...} expressions"),
            ("_start_at", "25:00", "'_start_at' has an out-of-range time of day '25:00'"),
            (
                "_start_at",
                "2026-12-01T07:00:00",
                "'_start_at' needs a UTC offset such as +09:00 or Z (or a time of day HH:MM), "
                "got '2026-12-01T07:00:00'",
            ),
            (
                "_start_at",
                "noon",
                "'_start_at' must be a time of day HH:MM[:SS] or a date and time with a UTC "
                "offset, such as 07:00 or 2026-12-01T07:00:00+09:00, got 'noon'",
            ),
            (
                "_start_at",
                "${session_date}T07:00:00+09:00",
                "'_start_at' cannot use ${...} expressions "
                "(07:00 means 07:00 on the session's date)",
            ),
        ],
    )
    def test_a_bad_value_is_reported_at_its_line(
        self, tmp_path: Path, key: str, value: str, message: str
    ) -> None:
        text = f"+a:\n  echo>: x\n  {key}: {value}\n"
        assert problems(tmp_path, text) == [f"wf.dig:3: {message}"]
        assert problems(tmp_path, f"{key}: {value}\n+a:\n  echo>: x\n") == [f"wf.dig:1: {message}"]

    def test_both_bad_keys_are_reported(self, tmp_path: Path) -> None:
        text = "+g:\n  _delay: 1w\n  _start_at: 7am\n  +a:\n    echo>: x\n"
        assert [p.split(": ")[0] for p in problems(tmp_path, text)] == ["wf.dig:2", "wf.dig:3"]

    def test_a_misspelled_key_gets_a_suggestion(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "+a:\n  echo>: x\n  _dealy: 5\n") == [
            "wf.dig:3: unknown directive '_dealy' (did you mean '_delay'?)"
        ]


class TestCall:
    def test_a_missing_target_is_reported_at_the_call_line(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "+a:\n  call>: nothing\n") == [
            "wf.dig:2: 'call>' target 'nothing' does not exist (nothing.dig)"
        ]

    def test_a_target_outside_the_project_is_rejected(self, tmp_path: Path) -> None:
        project = tmp_path / "project"
        project.mkdir()
        (tmp_path / "secret.dig").write_text("+x: {echo>: x}\n")
        assert problems(project, "+a:\n  call>: ../secret.dig\n") == [
            "wf.dig:2: 'call>' target '../secret.dig' is outside the project"
        ]

    def test_an_expression_as_target_is_kept_for_the_run(self, tmp_path: Path) -> None:
        workflow = parse(tmp_path, "+a:\n  call>: ${name}.dig\n")
        call = child(workflow.root, "+a")
        assert (call.command, call.called) == ("${name}.dig", None)

    def test_a_called_workflow_works_in_its_own_folder(self, tmp_path: Path) -> None:
        workflow = parse(
            tmp_path,
            "+a:\n  call>: sub/child\n",
            sub__child="+b:\n  call>: subsub/grandchild.dig\n",
            sub__subsub__grandchild="+c:\n  echo>: c\n",
        )
        called = child(workflow.root, "+a").called
        assert called is not None
        assert called.export == {"_workdir": "sub"}
        grandchild = child(called, "+b").called
        assert grandchild is not None
        assert grandchild.export == {"_workdir": "sub/subsub"}

    def test_a_called_file_at_the_top_works_at_the_top(self, tmp_path: Path) -> None:
        workflow = parse(tmp_path, "+a:\n  call>: other\n", other="+b:\n  echo>: b\n")
        called = child(workflow.root, "+a").called
        assert called is not None
        assert called.export == {"_workdir": ""}


class TestWorkdir:
    def test_a_workdir_is_relative_to_the_file_folder(self, tmp_path: Path) -> None:
        workflow = parse(
            tmp_path,
            "+a:\n  call>: sub/child\n",
            sub__child="_workdir: data\n+b:\n  echo>: b\n",
        )
        called = child(workflow.root, "+a").called
        assert called is not None
        assert called.export == {"_workdir": "sub/data"}

    def test_a_workdir_nests_and_moves_where_call_targets_are_found(self, tmp_path: Path) -> None:
        workflow = parse(
            tmp_path,
            "+g:\n  _workdir: lib\n  +a:\n    _workdir: deep\n    call>: leaf\n",
            lib__deep__leaf="+b:\n  echo>: b\n",
        )
        group = child(workflow.root, "+g")
        task = child(group, "+a")
        assert (group.export, task.export) == ({"_workdir": "lib"}, {"_workdir": "lib/deep"})
        assert task.command == "lib/deep/leaf.dig"

    @pytest.mark.parametrize(
        ("value", "message"),
        [
            ("../..", "'_workdir' '../..' is outside the project"),
            ("/tmp", "'_workdir' '/tmp' is outside the project"),
            ("${dir}", "'_workdir' needs a folder name, got '${dir}'"),
            ("3", "'_workdir' needs a folder name, got 3"),
        ],
    )
    def test_a_bad_workdir_is_reported_at_its_line(
        self, tmp_path: Path, value: str, message: str
    ) -> None:
        assert problems(tmp_path, f"+a:\n  echo>: x\n  _workdir: {value}\n") == [
            f"wf.dig:3: {message}"
        ]

    def test_problems_of_a_called_file_carry_its_own_name(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "+a:\n  call>: sub/child\n", sub__child="+x:\n  ech>: x\n") == [
            "sub/child.dig:2: unknown operator 'ech>' (did you mean 'echo>'?)"
        ]

    def test_call_cycles_are_rejected_naming_the_chain(self, tmp_path: Path) -> None:
        found = problems(tmp_path, "+a:\n  call>: b\n", b="+b:\n  call>: wf.dig\n")
        assert found == ["b.dig:2: call cycle: wf.dig -> b.dig -> wf.dig"]

    def test_a_workflow_calling_itself_is_a_cycle(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "+a:\n  call>: wf\n") == [
            "wf.dig:2: call cycle: wf.dig -> wf.dig"
        ]


class TestFilesAndProjects:
    def test_parse_workflow_file_reads_the_file(self, tmp_path: Path) -> None:
        write(tmp_path, {"daily_etl.dig": "+a:\n  echo>: a\n"})
        workflow = parse_workflow_file(tmp_path / "daily_etl.dig", tmp_path)
        assert (workflow.name, workflow.root.name) == ("daily_etl", "+daily_etl")

    def test_load_project_parses_every_top_level_dig_file(self, tmp_path: Path) -> None:
        write(
            tmp_path,
            {
                "a.dig": "+x:\n  call>: lib/common\n",
                "b.dig": "+y:\n  echo>: y\n",
                "lib/common.dig": "+z:\n  echo>: z\n",
                "notes.txt": "not a workflow",
            },
        )
        assert sorted(load_project(tmp_path)) == ["a", "b"]

    def test_load_project_reports_the_problems_of_all_files_at_once(self, tmp_path: Path) -> None:
        write(
            tmp_path,
            {
                "a.dig": "+x:\n  call>: lib/common\n_paralel: true\n",
                "b.dig": "+y:\n  ech>: y\n",
                "lib/common.dig": "+z:\n  sh>: [z]\n",
            },
        )
        with pytest.raises(InvalidWorkflow) as caught:
            load_project(tmp_path)
        assert [str(p) for p in caught.value.problems] == [
            "a.dig:3: unknown directive '_paralel' (did you mean '_parallel'?)",
            "b.dig:2: unknown operator 'ech>' (did you mean 'echo>'?)",
            "lib/common.dig:2: 'sh>' needs a string, got a list",
        ]

    def test_a_file_called_twice_reports_its_problems_once(self, tmp_path: Path) -> None:
        write(
            tmp_path,
            {
                "a.dig": "+x:\n  call>: c\n",
                "b.dig": "+y:\n  call>: c\n",
                "c.dig": "+z:\n  ech>: z\n",
            },
        )
        with pytest.raises(InvalidWorkflow) as caught:
            load_project(tmp_path)
        assert [str(p) for p in caught.value.problems] == [
            "c.dig:2: unknown operator 'ech>' (did you mean 'echo>'?)"
        ]


class TestHostileInput:
    def test_a_task_name_with_a_full_name_separator_is_rejected(self, tmp_path: Path) -> None:
        found = problems(
            tmp_path,
            """
            +a+b:
              echo>: one
            +c^error:
              echo>: two
            """,
        )
        assert found == [
            "wf.dig:2: task name '+a+b' cannot contain '+'",
            "wf.dig:4: task name '+c^error' cannot contain '^'",
        ]

    def test_a_merge_key_alias_is_fine_but_an_alias_bomb_is_refused(self, tmp_path: Path) -> None:
        merged = load_yaml("base: &b {x: 1}\nuse:\n  <<: *b\n", "wf.dig")
        assert merged["use"] == {"x": 1}
        lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
        previous = "a"
        for name in "bcdefghi":
            lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
            previous = name
        with pytest.raises(InvalidWorkflow) as caught:
            load_yaml("\n".join(lines) + "\n", "wf.dig")
        assert "aliases expand this file past 200000 values" in str(caught.value)

    def test_a_file_with_a_nul_byte_is_one_problem_on_line_1(self) -> None:
        with pytest.raises(InvalidWorkflow) as caught:
            load_yaml("+a:\n  echo>: hi\x00\n", "wf.dig")
        (problem,) = caught.value.problems
        assert (problem.line, problem.message.startswith("invalid YAML:")) == (1, True)
        assert "\n" not in problem.message

    def test_deeply_nested_yaml_and_expressions_are_problems_not_crashes(
        self, tmp_path: Path
    ) -> None:
        with pytest.raises(InvalidWorkflow) as nested_yaml:
            load_yaml("a: " + "[" * 5000 + "]" * 5000 + "\n", "wf.dig")
        assert "nested too deeply" in str(nested_yaml.value)
        deep = "(" * 1000 + "1" + ")" * 1000
        (problem,) = problems(tmp_path, f"+a:\n  echo>: ${{{deep}}}\n")
        assert problem.startswith("wf.dig:2: invalid expression '${((((")
        assert problem.endswith(": nested more than 64 levels deep")

    def test_a_retry_interval_beyond_a_week_is_rejected(self, tmp_path: Path) -> None:
        found = problems(
            tmp_path, "+a:\n  _retry: {limit: 1, interval: 999999999999}\n  echo>: x\n"
        )
        assert found == [
            "wf.dig:2: '_retry' interval must be from 0 to 604800 seconds"
            " or a duration such as 10m, got 999999999999"
        ]


class TestQueue:
    def test_a_queue_on_a_group_routes_every_task_inside_that_names_none(
        self, tmp_path: Path
    ) -> None:
        definition = parse(
            tmp_path,
            """
            _queue: main
            +a:
              echo>: a
            +g:
              _queue: gpu
              +b:
                echo>: b
              +c:
                _queue: cpu
                echo>: c
              _error:
                echo>: failed
            """,
        )
        root = definition.root
        g = child(root, "+g")
        assert child(root, "+a").queue == "main"
        assert [child(g, "+b").queue, child(g, "+c").queue] == ["gpu", "cpu"]
        assert g.error is not None and g.error.queue == "gpu"
        assert TaskSpec.from_config(root.to_config()) == root

    def test_a_task_without_a_queue_has_none(self, tmp_path: Path) -> None:
        assert child(parse(tmp_path, "+a:\n  echo>: a\n").root, "+a").queue is None

    def test_a_bad_queue_name_or_an_expression_is_reported_at_its_line(
        self, tmp_path: Path
    ) -> None:
        text = "+a:\n  _queue: no way\n  echo>: a\n+b:\n  _queue: ${q}\n  echo>: b\n"
        assert problems(tmp_path, text) == [
            "wf.dig:2: '_queue' must be a queue name (a letter or digit, then letters, "
            "digits, '_', '.' or '-'; up to 64), got 'no way'",
            "wf.dig:5: '_queue' cannot use ${...} expressions",
        ]


class TestPoolAndPriority:
    def test_a_groups_pool_and_priority_pass_to_every_task_inside_that_sets_none(
        self, tmp_path: Path
    ) -> None:
        definition = parse(
            tmp_path,
            """
            _pool: warehouse
            _priority: 5
            +a:
              echo>: a
            +g:
              _pool: api
              +b:
                echo>: b
              +c:
                _priority: -3
                _pool: gpu
                echo>: c
            """,
        )
        root = definition.root
        g = child(root, "+g")
        a, b, c = child(root, "+a"), child(g, "+b"), child(g, "+c")
        assert [(t.pool, t.priority) for t in (a, b, c)] == [
            ("warehouse", 5),
            ("api", 5),
            ("gpu", -3),
        ]
        assert TaskSpec.from_config(root.to_config()) == root

    def test_what_a_loop_generates_takes_the_loops_own_pool_and_priority(
        self, tmp_path: Path
    ) -> None:
        definition = parse(
            tmp_path,
            """
            +g:
              _pool: outer
              +each:
                for_each>: {x: [1, 2]}
                _pool: inner
                _priority: 7
                _do:
                  echo>: ${x}
            +top:
              for_each>: {x: [1]}
              _pool: own
              _do:
                echo>: ${x}
            """,
        )
        each = child(child(definition.root, "+g"), "+each")
        top = child(definition.root, "+top")
        assert each.do is not None and (each.do.pool, each.do.priority) == ("inner", 7)
        assert top.do is not None and top.do.pool == "own"

    def test_a_task_without_them_has_no_pool_and_no_priority(self, tmp_path: Path) -> None:
        a = child(parse(tmp_path, "+a:\n  echo>: a\n").root, "+a")
        assert (a.pool, a.priority) == (None, None)

    def test_a_bad_pool_or_priority_is_reported_at_its_line(self, tmp_path: Path) -> None:
        text = (
            "+a:\n  _pool: no way\n  echo>: a\n"
            "+b:\n  _pool: ${p}\n  echo>: b\n"
            "+c:\n  _priority: 101\n  echo>: c\n"
            "+d:\n  _priority: high\n  echo>: d\n"
            "+e:\n  _priority: true\n  echo>: e\n"
        )
        assert problems(tmp_path, text) == [
            "wf.dig:2: '_pool' must be a pool name (a letter or digit, then letters, "
            "digits, '_', '.' or '-'; up to 64), got 'no way'",
            "wf.dig:5: '_pool' cannot use ${...} expressions",
            "wf.dig:8: '_priority' must be a whole number from -100 to 100, got 101",
            "wf.dig:11: '_priority' must be a whole number from -100 to 100, got 'high'",
            "wf.dig:14: '_priority' must be a whole number from -100 to 100, got True",
        ]
