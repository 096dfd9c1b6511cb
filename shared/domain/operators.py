"""The operator registry: every operator a workflow may name, declared once.

Each :class:`OperatorSpec` says where the operator runs (the executor itself, or an agent),
what its command must be (the parser checks it, see :mod:`tickwork.shared.dsl.operator_options`),
which of its params may hold ``${secret:name}`` references, and, for the control
operators, which branches (``_do``, ``_else_do``) and ``_parallel`` it takes. The parser,
the executor and the agent read this table; adding an operator is one entry here plus its
implementation (a branch of the executor, or a function in the agent's operator table).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType


class RunsOn(StrEnum):
    """Where an operator task is run."""

    EXECUTOR = "executor"  # the executor runs it itself, without an agent
    AGENT = "agent"  # an agent takes it from a queue and runs it in a child process


class CommandKind(StrEnum):
    """What the value after ``name>`` (or ``_command``) must be."""

    IGNORED = "ignored"  # anything; dropped (``nop>:``, as in Digdag)
    TEXT = "text"  # a string (a number becomes one); its ``${...}`` must parse
    TEXT_OR_DATA = "text_or_data"  # TEXT (a file's name), or ``{data: TEXT}``: the text itself
    PY_TARGET = "py_target"  # ``module.function``
    DURATION = "duration"  # ``10s``, ``1h30m`` or seconds; ``${...}`` checked when rendered
    WORKFLOW_FILE = "workflow_file"  # a workflow file of the project, read when parsing
    CONTROL_VALUE = "control_value"  # a count, mapping or boolean, or ``${...}`` giving one


class OptionKind(StrEnum):
    """What an operator's option must be, as an error says it."""

    TEXT = "a string"  # a number is taken as its text
    FLAG = "true or false"
    NUMBER = "a number"
    DURATION = "a duration (30s, 1m, or seconds)"
    MAPPING = "a mapping"
    LIST = "a list"
    TEXT_OR_LIST = "a string or a list"
    TEXT_OR_MAPPING = "a string or a mapping"
    LIST_OR_MAPPING = "a list or a mapping"
    ANY = "any value"


@dataclass(frozen=True)
class ControlShape:
    """The subtasks a control operator takes: ``_do`` always, ``_else_do`` on ``if>`` only;
    ``_parallel`` applies to its iterations unless ``takes_parallel`` is false."""

    takes_else_do: bool = False
    takes_parallel: bool = True


@dataclass(frozen=True)
class OperatorSpec:
    """One operator: ``name`` (written ``name>``), where it runs, its command's kind, and the
    params where ``${secret:name}`` may stand.

    ``secrets_in_command`` allows references in the command itself (``sh>``);
    ``implicit_secret_prefix`` names the project secrets the operator reads without a
    reference (``mail.host``…, as Digdag's operators do); ``control`` is set on the
    operators that generate subtasks from ``_do``/``_else_do``.
    """

    name: str
    runs_on: RunsOn
    command: CommandKind
    doc: str
    secret_params: tuple[str, ...] = ()
    secrets_in_command: bool = False
    implicit_secret_prefix: str | None = None
    control: ControlShape | None = None
    options: Mapping[str, OptionKind] = field(
        default_factory=lambda: MappingProxyType({}), hash=False, compare=False
    )
    """The keys of a task the operator reads, and what each must be."""
    takes_params: bool = False
    """Whether what it runs reads params of its own (a function's arguments, a template's
    ``${...}``, a script's environment): a key it does not read is then one of those, not
    a mistake to warn about."""

    @property
    def key(self) -> str:
        """How a workflow names it: ``name>``."""
        return f"{self.name}>"


_LOOP = ControlShape()
HTTP_OPTIONS: Mapping[str, OptionKind] = MappingProxyType(
    {
        "method": OptionKind.TEXT,
        "headers": OptionKind.LIST_OR_MAPPING,
        "query": OptionKind.TEXT_OR_MAPPING,
        "content": OptionKind.ANY,
        "content_format": OptionKind.TEXT,
        "content_type": OptionKind.TEXT,
        "retry": OptionKind.FLAG,
        "retries": OptionKind.NUMBER,
        "timeout": OptionKind.NUMBER,
        "follow_redirects": OptionKind.FLAG,
        "insecure": OptionKind.FLAG,
        "proxy": OptionKind.MAPPING,
        "http": OptionKind.MAPPING,  # Digdag's nested form of the same options
    }
)

_SPECS = (
    OperatorSpec("echo", RunsOn.AGENT, CommandKind.TEXT, "writes its message to the task's log"),
    OperatorSpec(
        "sh",
        RunsOn.AGENT,
        CommandKind.TEXT,
        "runs a shell command",
        secrets_in_command=True,
        options=MappingProxyType({"shell": OptionKind.LIST}),
        takes_params=True,  # every param is in the command's environment
    ),
    OperatorSpec(
        "py",
        RunsOn.AGENT,
        CommandKind.PY_TARGET,
        "calls a Python function",
        options=MappingProxyType({"python": OptionKind.TEXT_OR_LIST}),
        takes_params=True,  # the function's arguments
    ),
    OperatorSpec(
        "call",
        RunsOn.EXECUTOR,
        CommandKind.WORKFLOW_FILE,
        "embeds another workflow file",
        takes_params=True,
    ),
    OperatorSpec("fail", RunsOn.AGENT, CommandKind.TEXT, "fails with its message"),
    OperatorSpec("nop", RunsOn.EXECUTOR, CommandKind.IGNORED, "does nothing and succeeds"),
    OperatorSpec(
        "wait",
        RunsOn.EXECUTOR,
        CommandKind.DURATION,
        "waits, holding no agent",
        options=MappingProxyType(
            {"blocking": OptionKind.FLAG, "poll_interval": OptionKind.DURATION}
        ),
    ),
    OperatorSpec(
        "http",
        RunsOn.AGENT,
        CommandKind.TEXT,
        "sends an HTTP request",
        secret_params=("headers", "query", "content"),
        secrets_in_command=True,
        implicit_secret_prefix="http.",
        options=MappingProxyType({**HTTP_OPTIONS, "store_content": OptionKind.FLAG}),
    ),
    OperatorSpec(
        "http_call",
        RunsOn.AGENT,
        CommandKind.TEXT,
        "runs a workflow fetched over HTTP as its subtasks",
        secret_params=("headers", "query", "content"),
        secrets_in_command=True,
        implicit_secret_prefix="http.",
        options=MappingProxyType({**HTTP_OPTIONS, "content_type_override": OptionKind.TEXT}),
    ),
    OperatorSpec(
        "require",
        RunsOn.EXECUTOR,
        CommandKind.TEXT,
        "runs another workflow's session",
        options=MappingProxyType(
            {
                "project_name": OptionKind.TEXT,
                "project_id": OptionKind.NUMBER,
                "session_time": OptionKind.TEXT,
                "params": OptionKind.MAPPING,
                "rerun_on": OptionKind.TEXT,
                "retry_attempt_name": OptionKind.TEXT,
                "ignore_failure": OptionKind.FLAG,
            }
        ),
    ),
    OperatorSpec(
        "param_set",
        RunsOn.EXECUTOR,
        CommandKind.IGNORED,
        "stores its keys' values for later sessions of the project",
        takes_params=True,  # its keys are what it stores
    ),
    OperatorSpec(
        "param_get",
        RunsOn.EXECUTOR,
        CommandKind.IGNORED,
        "reads stored values into store params",
        takes_params=True,  # its keys are what it reads
    ),
    OperatorSpec(
        "mail",
        RunsOn.AGENT,
        CommandKind.TEXT_OR_DATA,
        "sends an email",
        secret_params=("host", "port", "username", "password", "tls", "ssl"),
        implicit_secret_prefix="mail.",
        options=MappingProxyType(
            {
                "subject": OptionKind.TEXT,
                "to": OptionKind.TEXT_OR_LIST,
                "cc": OptionKind.TEXT_OR_LIST,
                "bcc": OptionKind.TEXT_OR_LIST,
                "from": OptionKind.TEXT,
                "html": OptionKind.FLAG,
                "attach_files": OptionKind.TEXT_OR_LIST,
                "body": OptionKind.TEXT,
                "debug": OptionKind.FLAG,
                "host": OptionKind.TEXT,
                "port": OptionKind.NUMBER,
                "username": OptionKind.TEXT,
                "password": OptionKind.TEXT,
                "tls": OptionKind.FLAG,
                "ssl": OptionKind.FLAG,
                "mail": OptionKind.MAPPING,
            }
        ),
        takes_params=True,  # the body is a template
    ),
    OperatorSpec(
        "pg",
        RunsOn.AGENT,
        CommandKind.TEXT,
        "runs the SQL of a template file against PostgreSQL",
        secret_params=("host", "port", "user", "password", "database", "ssl", "schema"),
        implicit_secret_prefix="pg.",
        options=MappingProxyType(
            {
                key: OptionKind.ANY  # checked by the parser's own pg> checks
                for key in (
                    "create_table",
                    "insert_into",
                    "download_file",
                    "store_last_results",
                    "database",
                    "host",
                    "port",
                    "user",
                    "password",
                    "password_override",
                    "ssl",
                    "schema",
                    "connect_timeout",
                    "socket_timeout",
                    "strict_transaction",
                    "status_table",
                    "status_table_schema",
                    "status_table_cleanup",
                    "pg",
                )
            }
        ),
        takes_params=True,  # the query file is a template
    ),
    OperatorSpec(
        "loop", RunsOn.EXECUTOR, CommandKind.CONTROL_VALUE, "runs _do N times", control=_LOOP
    ),
    OperatorSpec(
        "for_each",
        RunsOn.EXECUTOR,
        CommandKind.CONTROL_VALUE,
        "runs _do for each combination of values",
        control=_LOOP,
    ),
    OperatorSpec(
        "for_range",
        RunsOn.EXECUTOR,
        CommandKind.CONTROL_VALUE,
        "runs _do for each slice of a range",
        control=_LOOP,
    ),
    OperatorSpec(
        "if",
        RunsOn.EXECUTOR,
        CommandKind.CONTROL_VALUE,
        "runs _do when true, _else_do when false",
        control=ControlShape(takes_else_do=True, takes_parallel=False),
    ),
)

_AWS = "use sh>/py> with the AWS CLI or boto3, and _retry or loop> + wait> to poll"
_GCP = "use sh>: bq ... or py> with Google's client libraries"
_TD = "Treasure Data's service, outside tickwork's core; call its CLI or API with sh>, py> or http>"
_REDSHIFT = "use sh>: psql ... (Redshift speaks PostgreSQL's protocol) or pg>"
UNSUPPORTED: Mapping[str, str] = MappingProxyType(
    {
        "rb": "tickwork's agents run Python, not Ruby: run the script with sh>: ruby "
        "tasks/x.rb (params reach it as environment variables), or port it to py>",
        "embulk": "not a core operator: run Embulk with sh>: embulk run config.yml",
        "notify": "internal to Digdag: SLA misses are recorded by tickwork itself; notify "
        "from _error with http> or mail>",
        "emr": _AWS,
        "s3_wait": _AWS,
        "redshift": _REDSHIFT,
        "redshift_load": _REDSHIFT,
        "redshift_unload": _REDSHIFT,
        "bq": _GCP,
        "bq_ddl": _GCP,
        "bq_extract": _GCP,
        "bq_load": _GCP,
        "gcs_wait": _GCP,
        **{
            name: _TD
            for name in (
                "td",
                "td_run",
                "td_ddl",
                "td_load",
                "td_for_each",
                "td_wait",
                "td_wait_table",
                "td_partial_delete",
                "td_table_export",
                "td_result_export",
            )
        },
    }
)
"""Digdag's operators tickwork does not run, by name, with what to use instead: a
workflow naming one is refused at its line with the reason (docs/digdag-compatibility.md)."""

REGISTRY: Mapping[str, OperatorSpec] = MappingProxyType({spec.name: spec for spec in _SPECS})
"""Every operator by name, in the order the documentation lists them."""


def find_operator(name: object) -> OperatorSpec | None:
    """The operator called ``name``, or None when there is none."""
    return REGISTRY.get(name) if isinstance(name, str) else None


def operator_names() -> tuple[str, ...]:
    """Every operator's name."""
    return tuple(REGISTRY)


def runs_on(name: str) -> RunsOn | None:
    """Where the operator ``name`` runs; None for a name the registry does not know."""
    spec = REGISTRY.get(name)
    return None if spec is None else spec.runs_on


def executor_operators() -> frozenset[str]:
    """The operators the executor runs itself, without an agent."""
    return frozenset(n for n, spec in REGISTRY.items() if spec.runs_on is RunsOn.EXECUTOR)


def agent_operators() -> frozenset[str]:
    """The operators agents run (each has an implementation in the agent's table)."""
    return frozenset(n for n, spec in REGISTRY.items() if spec.runs_on is RunsOn.AGENT)


def control_operators() -> tuple[str, ...]:
    """The operators that generate subtasks from ``_do`` (and ``_else_do``)."""
    return tuple(n for n, spec in REGISTRY.items() if spec.control is not None)


def secret_params() -> dict[str, tuple[str, ...]]:
    """For each operator that has some, the params where ``${secret:name}`` may stand."""
    return {n: spec.secret_params for n, spec in REGISTRY.items() if spec.secret_params}


def operators_with_secret_commands() -> tuple[str, ...]:
    """The operators whose command may hold ``${secret:name}`` (``sh>``, ``http>``, ...)."""
    return tuple(n for n, spec in REGISTRY.items() if spec.secrets_in_command)


def implicit_secret_prefixes() -> dict[str, str]:
    """For each operator that reads secrets without a reference, the prefix of their names."""
    return {
        n: spec.implicit_secret_prefix
        for n, spec in REGISTRY.items()
        if spec.implicit_secret_prefix is not None
    }
