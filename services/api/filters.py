"""The filters the sessions and attempts lists take, as query parameters: exact or partial
project and workflow names, a state and a session time range, read into the store's
:class:`~tickwork.shared.store.history.RunFilters`."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from tickwork.services.api import times
from tickwork.services.api.errors import InvalidParameter
from tickwork.services.api.paging import PageQuery
from tickwork.services.api.scope import visible_ids
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.store.history import RunFilters


class RunsQuery(PageQuery):
    """Filters of the sessions and attempts lists."""

    project: str | None = Field(None, max_length=255, description="Project name.")
    workflow: str | None = Field(None, max_length=255, description="Workflow name.")
    project_contains: str | None = Field(
        None, max_length=255, description="Part of the project's name, in any case."
    )
    workflow_contains: str | None = Field(
        None, max_length=255, description="Part of the workflow's name, in any case."
    )
    state: AttemptState | None = Field(None, description="State of the (last) attempt.")
    time_from: str | None = Field(
        None, alias="from", max_length=64, description="Session times from (inclusive)."
    )
    time_to: str | None = Field(
        None, alias="to", max_length=64, description="Session times before (exclusive)."
    )

    def run_filters(self) -> RunFilters:
        """The store's filters (only the projects the request's token covers);
        InvalidParameter naming ``from`` or ``to`` for a bound that
        is not an ISO 8601 time, one the store cannot compare (before year 1 or after 9999
        once moved to UTC), or a range ending before it starts."""
        time_from = _utc(self.time_from, "from")
        time_to = _utc(self.time_to, "to")
        if time_from is not None and time_to is not None and time_to <= time_from:
            raise InvalidParameter("to", "must be later than `from`")
        return RunFilters(
            project=self.project,
            workflow=self.workflow,
            project_contains=self.project_contains,
            workflow_contains=self.workflow_contains,
            state=self.state,
            time_from=time_from,
            time_to=time_to,
            project_ids=visible_ids(),
        )


def _utc(value: str | None, parameter: str) -> datetime | None:
    return None if value is None else times.parse_time(value, parameter=parameter)
