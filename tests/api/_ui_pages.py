"""Reading the UI's HTML pages in the API's specs: one section of a page, and a failed
attempt put straight into the store with its task tree."""

from __future__ import annotations

import re
from datetime import datetime

from sqlalchemy import Engine, select, update

from tests.api._seed import NOW
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.store.tables import attempts, tasks


def section(html: str, section_id: str) -> str:
    """The HTML of the page's ``<section id="...">`` (empty if it has none)."""
    found = re.search(rf'<section[^>]*id="{section_id}"[^>]*>(.*?)</section>', html, re.S)
    return found.group(1) if found else ""


def add_tasks(
    engine: Engine, attempt_id: int, tree: list[tuple[str, int | None, str, str | None]]
) -> list[int]:
    """Task rows of an attempt: (full name, index of the parent in ``tree``, state, error
    message); their ids."""
    ids: list[int] = []
    with engine.begin() as conn:
        for position, (name, parent, state, message) in enumerate(tree):
            ids.append(
                conn.execute(
                    tasks.insert().returning(tasks.c.id),
                    {
                        "attempt_id": attempt_id,
                        "parent_id": None if parent is None else ids[parent],
                        "full_name": name,
                        "position": position,
                        "is_group": parent is None,
                        "is_generated": False,
                        "state": state,
                        "config": {},
                        "error": None if message is None else {"message": message},
                        "created_at": NOW,
                        "updated_at": NOW,
                    },
                ).scalar_one()
            )
    return ids


def fail(engine: Engine, attempt_id: int, task: str, message: str, finished: datetime) -> None:
    """End an attempt of workflow ``steps`` in error at ``finished``: ``+steps+first``
    succeeded, ``task`` failed with ``message``, and so its group did."""
    add_tasks(
        engine,
        attempt_id,
        [
            ("+steps", None, "error", "a child failed"),
            ("+steps+first", 0, "success", None),
            (task, 0, "error", message),
        ],
    )
    with engine.begin() as conn:
        conn.execute(
            update(attempts)
            .where(attempts.c.id == attempt_id)
            .values(state=AttemptState.ERROR.value, finished_at=finished)
        )


def attempts_of(engine: Engine, session_ids: list[int]) -> list[int]:
    """The id of the (only) attempt of each session, in the same order."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(attempts.c.session_id, attempts.c.id).where(
                attempts.c.session_id.in_(session_ids)
            )
        ).all()
    by_session = {row.session_id: row.id for row in rows}
    return [int(by_session[session_id]) for session_id in session_ids]
