"""The implementations of the operators agents run, by registry name.

Which operators exist, and which of them run on an agent, is declared once in
:mod:`shared.domain.operators`; this table maps each agent-run name to its function
(``tests/agent/test_operator_table.py`` checks that the two agree both ways).
"""

from __future__ import annotations

from services.agent.operators.base import Operator
from services.agent.operators.echo import run_echo
from services.agent.operators.fail import run_fail
from services.agent.operators.http import run_http
from services.agent.operators.http_call import run_http_call
from services.agent.operators.mail import run_mail
from services.agent.operators.pg import run_pg
from services.agent.operators.py import run_py
from services.agent.operators.sh import run_sh

OPERATORS: dict[str, Operator] = {
    "echo": run_echo,
    "fail": run_fail,
    "http": run_http,
    "http_call": run_http_call,
    "mail": run_mail,
    "pg": run_pg,
    "py": run_py,
    "sh": run_sh,
}
