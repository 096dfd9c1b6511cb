"""The operator registry: each operator declared once, the derived sets agree with it."""

from __future__ import annotations

from tickwork.shared.domain.control import CONTROL_OPERATORS
from tickwork.shared.domain.operators import (
    REGISTRY,
    CommandKind,
    agent_operators,
    control_operators,
    executor_operators,
    find_operator,
    implicit_secret_prefixes,
    operators_with_secret_commands,
    runs_on,
    secret_params,
)
from tickwork.shared.domain.workflow import OPERATORS
from tickwork.shared.secrets import SECRET_PARAMS


class TestRegistry:
    def test_every_operator_runs_on_exactly_one_side(self) -> None:
        assert executor_operators() | agent_operators() == set(REGISTRY)
        assert not executor_operators() & agent_operators()

    def test_the_executor_runs_call_nop_wait_require_params_and_the_control_operators(
        self,
    ) -> None:
        assert executor_operators() == {
            "call",
            "nop",
            "wait",
            "require",
            "param_set",
            "param_get",
            "loop",
            "for_each",
            "for_range",
            "if",
        }

    def test_agents_run_the_rest(self) -> None:
        assert agent_operators() == {"echo", "sh", "py", "fail", "http", "mail", "pg", "http_call"}

    def test_control_operators_run_on_the_executor(self) -> None:
        assert set(control_operators()) <= executor_operators()
        assert control_operators() == ("loop", "for_each", "for_range", "if")

    def test_only_if_takes_else_do_and_refuses_parallel(self) -> None:
        shapes = {name: REGISTRY[name].control for name in control_operators()}
        assert {n for n, s in shapes.items() if s and s.takes_else_do} == {"if"}
        assert {n for n, s in shapes.items() if s and not s.takes_parallel} == {"if"}

    def test_an_unknown_name_is_not_found(self) -> None:
        assert find_operator("teleport") is None
        assert find_operator(3) is None
        assert runs_on("teleport") is None

    def test_each_spec_is_found_by_its_name_and_written_with_a_chevron(self) -> None:
        for name, spec in REGISTRY.items():
            assert find_operator(name) is spec
            assert spec.key == f"{name}>"

    def test_sh_and_the_http_operators_take_secrets_in_their_command(self) -> None:
        assert operators_with_secret_commands() == ("sh", "http", "http_call")
        assert [n for n, s in REGISTRY.items() if s.secrets_in_command] == [
            "sh",
            "http",
            "http_call",
        ]

    def test_commands_have_the_kinds_the_parser_checks(self) -> None:
        assert REGISTRY["py"].command is CommandKind.PY_TARGET
        assert REGISTRY["wait"].command is CommandKind.DURATION
        assert REGISTRY["call"].command is CommandKind.WORKFLOW_FILE
        assert REGISTRY["nop"].command is CommandKind.IGNORED
        assert REGISTRY["mail"].command is CommandKind.TEXT_OR_DATA


class TestDerivedSets:
    def test_the_workflow_language_knows_every_registry_operator(self) -> None:
        assert tuple(REGISTRY) == OPERATORS

    def test_the_control_module_expands_the_registry_control_operators(self) -> None:
        assert control_operators() == CONTROL_OPERATORS

    def test_secret_params_come_from_the_registry(self) -> None:
        assert secret_params() == SECRET_PARAMS
        assert SECRET_PARAMS["http"] == ("headers", "query", "content")
        assert "password" in SECRET_PARAMS["mail"]

    def test_mail_http_and_pg_read_their_secrets_by_prefix(self) -> None:
        assert implicit_secret_prefixes() == {
            "mail": "mail.",
            "http": "http.",
            "pg": "pg.",
            "http_call": "http.",
        }
