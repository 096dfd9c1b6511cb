"""The implementations of the operators agents run, by registry name.

Which operators exist, and which of them run on an agent, is declared once in
:mod:`tickwork.shared.domain.operators`; this table maps each agent-run name to its function
(``tests/agent/test_operator_table.py`` checks that the two agree both ways).
"""

from __future__ import annotations

from tickwork.services.agent.operators.base import Operator
from tickwork.services.agent.operators.echo import run_echo
from tickwork.services.agent.operators.fail import run_fail
from tickwork.services.agent.operators.http import run_http
from tickwork.services.agent.operators.http_call import run_http_call
from tickwork.services.agent.operators.mail import run_mail
from tickwork.services.agent.operators.pg import run_pg
from tickwork.services.agent.operators.py import run_py
from tickwork.services.agent.operators.sh import run_sh

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
