"""Functions for ``py>`` tasks: params arrive as keyword arguments, a returned dict is stored.

Each function notes that it ran in ``.tickwork/out/<log>.log`` (the project directory is
the working directory of every task), the same way ``scripts/note.sh`` does for ``sh>``.
"""

from __future__ import annotations

from pathlib import Path

OUT_DIR = Path(".tickwork/out")


def note(log: str, text: str) -> None:
    """Append ``text`` to the example's record of what ran."""
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    with (OUT_DIR / f"{log}.log").open("a", encoding="utf-8") as out:
        out.write(text + "\n")


def count_rows(tables: list[str]) -> dict[str, object]:
    """Pretend to count the rows just fetched; later tasks read ``${row_count}``."""
    row_count = 120 * len(tables)
    print(f"counted {row_count} rows in {', '.join(tables)}")
    note("hello", "count_rows")
    return {"row_count": row_count}


def extract_orders(source: str, session_date: str) -> dict[str, object]:
    """Pretend to extract one day of orders; stores ``${orders.count}`` and ``${orders.day}``."""
    orders = {"source": source, "day": session_date, "count": 3}
    print(f"extracted {orders['count']} orders from {source} for {session_date}")
    note("call_and_py", f"extract_orders {source}")
    return {"orders": orders}


def archive_orders(orders: dict[str, object]) -> dict[str, object]:
    """Pretend to archive what was loaded; stores the archive's name as ``${archive}``."""
    archive = f"orders-{orders['day']}.csv.gz"
    print(f"archived {orders['count']} orders as {archive}")
    note("call_and_py", f"archive_orders {archive}")
    return {"archive": archive}
