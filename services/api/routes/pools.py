"""Pools: named numbers of slots that every project's tasks with ``_pool: NAME`` share.

- ``GET /api/pools`` and ``GET /api/pools/{pool}``: each pool's slots, those in use, the
  ready tasks waiting for one, and the names tasks give that no pool has (``slots`` null);
- ``PUT /api/pools/{pool}`` sets a pool's slots (and description), creating it if need be;
- ``DELETE /api/pools/{pool}`` removes it: its tasks then wait until it is set again.

Changing a pool is an admin's (services/api/auth.py ADMIN_ENDPOINTS), and only a token
without project globs may do it (services/api/scope.py): every project shares a pool.
"""

from __future__ import annotations

from typing import Any

from apiflask import APIBlueprint
from pydantic import BaseModel, Field

from tickwork.services.api.database import read_connection, write_transaction
from tickwork.services.api.errors import InvalidParameter
from tickwork.services.api.models import RequestBody
from tickwork.shared.clock import utc_now
from tickwork.shared.domain.pools import MAX_SLOTS, POOL_NAME, PoolUsage
from tickwork.shared.errors import NotFound
from tickwork.shared.store import pools as store

blueprint = APIBlueprint("pools", __name__, url_prefix="/api/pools", tag="Pools")

MAX_DESCRIPTION_CHARS = 500
BAD_NAME = "a pool's name is a letter or digit, then up to 63 letters, digits, '_', '.' or '-'"


class PoolIn(RequestBody):
    """A pool's slots, and what it is for."""

    slots: int = Field(
        ge=0,
        le=MAX_SLOTS,
        description=f"How many of its tasks may be in flight at once (0 to {MAX_SLOTS}; 0 "
        "holds them all). Fewer than are in use takes none back: no task is admitted "
        "until enough end.",
    )
    description: str | None = Field(
        default=None,
        max_length=MAX_DESCRIPTION_CHARS,
        description="What the pool guards; none: keep the one it has.",
    )


class PoolOut(BaseModel):
    """A pool as the store counts it now."""

    name: str
    slots: int | None = Field(
        description="null: tasks name this pool, but none is set (they wait until it is)."
    )
    used: int = Field(description="Its tasks queued or running now.")
    waiting: int = Field(description="Its ready tasks waiting for a slot.")
    free: int = Field(description="Slots a task could take now.")
    description: str | None


class PoolList(BaseModel):
    """Every pool, and every name tasks give that no pool has, by name."""

    items: list[PoolOut]


def pool_item(usage: PoolUsage) -> dict[str, Any]:
    """A pool as the REST API answers it (the web UI's page shows the same)."""
    return {
        "name": usage.name,
        "slots": usage.slots,
        "used": usage.used,
        "waiting": usage.waiting,
        "free": usage.free,
        "description": usage.description,
    }


def checked_name(pool: str) -> str:
    """``pool`` if it may name a pool; 422 naming the path parameter otherwise."""
    if not POOL_NAME.fullmatch(pool):
        raise InvalidParameter("pool", BAD_NAME)
    return pool


def set_pool_slots(pool: str, body: PoolIn) -> tuple[PoolUsage, bool]:
    """Set ``pool`` from ``body`` in one transaction: the pool as it is now, and whether
    it was created."""
    checked_name(pool)
    with write_transaction() as conn:
        created = store.set_pool(conn, pool, body.slots, body.description, utc_now())
        return store.get_pool(conn, pool), created


def remove_pool(pool: str) -> None:
    """Delete ``pool``; NotFound when there is none."""
    checked_name(pool)
    with write_transaction() as conn:
        if not store.delete_pool(conn, pool):
            raise NotFound(f"pool {pool!r} does not exist")


@blueprint.get("")
@blueprint.output(PoolList)
def list_pools() -> dict[str, Any]:
    """Every pool, with its slots in use and the tasks waiting for one; a name tasks give
    that no pool has is listed with ``slots`` null."""
    with read_connection() as conn:
        return {"items": [pool_item(usage) for usage in store.list_pools(conn)]}


@blueprint.get("/<pool>")
@blueprint.output(PoolOut)
@blueprint.doc(responses={404: "No such pool, and no task names it"})
def get_pool(pool: str) -> dict[str, Any]:
    """One pool (or a name tasks wait for that no pool has)."""
    with read_connection() as conn:
        return pool_item(store.get_pool(conn, checked_name(pool)))


@blueprint.put("/<pool>")
@blueprint.input(PoolIn, arg_name="body")
@blueprint.output(PoolOut, status_code=201, description="A new pool")
@blueprint.doc(
    responses={
        200: "The pool existed: its slots (and description) changed",
        403: "Not an admin token, or one limited to projects: every project shares pools",
    }
)
def set_pool(pool: str, body: PoolIn) -> tuple[dict[str, Any], int]:
    """Set a pool's slots (and description), creating it if there is none; waiting tasks
    take the slots it gains within the executor's next pass."""
    usage, created = set_pool_slots(pool, body)
    return pool_item(usage), 201 if created else 200


@blueprint.delete("/<pool>")
@blueprint.output({}, status_code=204)
@blueprint.doc(
    responses={
        403: "Not an admin token, or one limited to projects: every project shares pools",
        404: "No such pool",
    }
)
def delete_pool(pool: str) -> tuple[str, int]:
    """Delete a pool: its tasks in flight run on, and its ready ones wait until a pool of
    that name is set again."""
    remove_pool(pool)
    return "", 204
