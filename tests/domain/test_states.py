"""Specifications of the task state table: which state may follow which, and how it ends."""

from __future__ import annotations

from collections import deque

import pytest

from tickwork.shared.domain.states import (
    ACTIVE_TASK_STATES,
    ALLOWED_TASK_TRANSITIONS,
    TERMINAL_TASK_STATES,
    TIMED_TASK_STATES,
    AttemptState,
    TaskState,
    attempt_state_for,
    states_before,
)


def _reachable_from(start: TaskState) -> set[TaskState]:
    seen = {start}
    frontier = deque([start])
    while frontier:
        for target in ALLOWED_TASK_TRANSITIONS[frontier.popleft()]:
            if target not in seen:
                seen.add(target)
                frontier.append(target)
    return seen


class TestTerminalStates:
    def test_success_error_and_canceled_are_the_terminal_states(self) -> None:
        assert {TaskState.SUCCESS, TaskState.ERROR, TaskState.CANCELED} == TERMINAL_TASK_STATES
        assert {s for s in TaskState if s.is_terminal} == TERMINAL_TASK_STATES

    def test_a_terminal_state_only_goes_back_to_blocked_for_a_group_retry(self) -> None:
        for state in TERMINAL_TASK_STATES:
            assert ALLOWED_TASK_TRANSITIONS[state] == {TaskState.BLOCKED}

    def test_active_states_are_those_a_parent_waits_for(self) -> None:
        assert not ACTIVE_TASK_STATES & TERMINAL_TASK_STATES
        assert TaskState.BLOCKED not in ACTIVE_TASK_STATES
        assert ACTIVE_TASK_STATES | TERMINAL_TASK_STATES | {TaskState.BLOCKED} == set(TaskState)


class TestTransitionTable:
    def test_every_state_has_a_row(self) -> None:
        assert set(ALLOWED_TASK_TRANSITIONS) == set(TaskState)

    @pytest.mark.parametrize("state", list(TaskState))
    def test_every_state_can_reach_a_terminal_state(self, state: TaskState) -> None:
        assert _reachable_from(state) & TERMINAL_TASK_STATES

    @pytest.mark.parametrize("state", sorted(ACTIVE_TASK_STATES | {TaskState.BLOCKED}))
    def test_every_unfinished_task_can_be_canceled(self, state: TaskState) -> None:
        assert TaskState.CANCELED in ALLOWED_TASK_TRANSITIONS[state]

    def test_a_queued_task_may_be_requeued_under_a_new_token(self) -> None:
        assert TaskState.QUEUED in ALLOWED_TASK_TRANSITIONS[TaskState.QUEUED]
        assert TaskState.QUEUED in ALLOWED_TASK_TRANSITIONS[TaskState.RUNNING]

    def test_a_blocked_task_cannot_be_dispatched_before_it_is_ready(self) -> None:
        assert TaskState.QUEUED not in ALLOWED_TASK_TRANSITIONS[TaskState.BLOCKED]
        assert TaskState.RUNNING not in ALLOWED_TASK_TRANSITIONS[TaskState.BLOCKED]

    def test_a_retry_waits_before_it_is_ready_again(self) -> None:
        assert ALLOWED_TASK_TRANSITIONS[TaskState.RETRY_WAITING] == {
            TaskState.READY,
            TaskState.CANCELED,
        }

    def test_a_delayed_task_waits_before_it_is_ready(self) -> None:
        assert ALLOWED_TASK_TRANSITIONS[TaskState.DELAYED] == {
            TaskState.READY,
            TaskState.CANCELED,
        }

    def test_the_timed_states_are_the_waits_that_end_at_not_before(self) -> None:
        assert set(TIMED_TASK_STATES) == {TaskState.RETRY_WAITING, TaskState.DELAYED}
        assert set(TIMED_TASK_STATES) <= ACTIVE_TASK_STATES

    def test_a_finished_task_cannot_change_its_outcome(self) -> None:
        for state in TERMINAL_TASK_STATES:
            for other in TERMINAL_TASK_STATES:
                assert other not in ALLOWED_TASK_TRANSITIONS[state]


class TestStatesBefore:
    @pytest.mark.parametrize("target", list(TaskState))
    def test_lists_exactly_the_states_allowed_to_move_to_the_target(
        self, target: TaskState
    ) -> None:
        before = states_before(target)
        assert set(before) == {s for s in TaskState if target in ALLOWED_TASK_TRANSITIONS[s]}
        assert len(before) == len(set(before))

    def test_ready_comes_from_blocked_a_retry_wait_or_a_delay(self) -> None:
        assert set(states_before(TaskState.READY)) == {
            TaskState.BLOCKED,
            TaskState.RETRY_WAITING,
            TaskState.DELAYED,
        }

    def test_a_task_is_delayed_as_it_becomes_ready_or_by_wait_never_for_a_retry(self) -> None:
        # BLOCKED: its _delay/_start_at; READY: a wait> task waiting out its time. A retry
        # waits for its _retry interval, never for _delay/_start_at again.
        assert states_before(TaskState.DELAYED) == (TaskState.BLOCKED, TaskState.READY)

    def test_running_comes_only_from_queued(self) -> None:
        assert states_before(TaskState.RUNNING) == (TaskState.QUEUED,)

    def test_blocked_comes_only_from_terminal_states(self) -> None:
        assert set(states_before(TaskState.BLOCKED)) == TERMINAL_TASK_STATES

    def test_a_retry_wait_is_entered_only_by_a_task_that_was_due_to_start(self) -> None:
        # READY: its ${...} could not be evaluated at dispatch, and it has retries left
        assert set(states_before(TaskState.RETRY_WAITING)) == {
            TaskState.READY,
            TaskState.QUEUED,
            TaskState.RUNNING,
            TaskState.PLANNED,
        }


class TestAttemptStates:
    @pytest.mark.parametrize(
        ("root", "attempt"),
        [
            (TaskState.SUCCESS, AttemptState.SUCCESS),
            (TaskState.ERROR, AttemptState.ERROR),
            (TaskState.CANCELED, AttemptState.CANCELED),
        ],
    )
    def test_the_root_tasks_end_decides_the_attempts_end(
        self, root: TaskState, attempt: AttemptState
    ) -> None:
        assert attempt_state_for(root) is attempt
        assert attempt.is_done

    @pytest.mark.parametrize("root", sorted(set(TaskState) - TERMINAL_TASK_STATES))
    def test_an_unfinished_root_has_no_attempt_end(self, root: TaskState) -> None:
        with pytest.raises(KeyError):
            attempt_state_for(root)

    def test_created_and_running_attempts_are_not_done(self) -> None:
        assert not AttemptState.CREATED.is_done
        assert not AttemptState.RUNNING.is_done

    def test_states_are_stored_as_their_string_values(self) -> None:
        assert TaskState("retry_waiting") is TaskState.RETRY_WAITING
        assert AttemptState("running") is AttemptState.RUNNING
        assert f"{TaskState.QUEUED}" == "queued"
