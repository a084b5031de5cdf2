"""The store's answers that end a wait or refuse a decision, on real SQLite and PostgreSQL:
a lock waiter learns of its cancel from a busy answer; an approval is decided only while
its call still waits for it."""

from __future__ import annotations

import anyio
import pytest

from gateway.events.model import make_event
from gateway.store.records import (
    ApprovalDecision,
    ApprovalRecord,
    Decided,
    LockBusy,
    LockRequest,
    Refused,
    Reserved,
)
from gateway.store.store import Store
from gateway.types import LockMode, Status
from tests.store.test_store import pending_approval, record

pytestmark = pytest.mark.anyio


async def _parked(store: Store, ex_id: str) -> ApprovalRecord:
    """An execution parked for a pending approval (as the policy stage leaves it)."""
    reserved = await store.reserve(record(ex_id, call_id=ex_id), [], None)
    assert isinstance(reserved, Reserved)
    approval = pending_approval(f"ap_{ex_id}", ex_id)
    event = make_event(ex_id, 0, "approval.requested", {"approval_id": approval.id})
    await store.checkpoint_for_approval(approval, [event])
    return approval


async def test_a_busy_answer_says_whether_the_waiter_was_cancelled(store: Store) -> None:
    req = [LockRequest("k", LockMode.EXCLUSIVE)]
    await store.reserve(record("ex_waiter", call_id="w"), [], None)
    assert not isinstance(await store.try_acquire("ex_holder", "h", req, 30), LockBusy)
    busy = await store.try_acquire("ex_waiter", "w", req, 30)
    assert isinstance(busy, LockBusy) and busy.waiter_cancelled is False
    assert await store.set_status("ex_waiter", [Status.RUNNING], Status.CANCELLING)
    busy = await store.try_acquire("ex_waiter", "w", req, 30)
    assert isinstance(busy, LockBusy) and busy.waiter_cancelled is True
    assert busy.holder == "ex_holder"


async def test_an_approval_whose_call_stopped_waiting_is_withdrawn(store: Store) -> None:
    approval = await _parked(store, "ex_gone")
    # A cancel that moved the call on but never got to withdraw the approval (say, it crashed).
    assert await store.set_status("ex_gone", [Status.AWAITING_APPROVAL], Status.CANCELLING)
    assert await store.decide_approval(approval.id, "approved", "bob", None) == Refused("withdrawn")
    found = await store.get_approval(approval.id)
    assert found is not None and found.status == "withdrawn"


async def test_a_second_decision_gets_the_first_ones_status(store: Store) -> None:
    approval = await _parked(store, "ex_twice")
    first = await store.decide_approval(approval.id, "approved", "bob", None)
    assert isinstance(first, Decided) and first.approval.status == "approved"
    assert await store.decide_approval(approval.id, "denied", "dave", "no") == Refused("approved")
    found = await store.get_approval(approval.id)
    assert found is not None and found.decided_by == "bob"


async def test_of_two_decisions_at_once_one_wins_and_the_other_is_refused(
    store: Store, database_url: str
) -> None:
    other = Store(database_url)  # a second gateway process on the same database
    await other.open()
    try:
        for round_ in range(5):
            approval = await _parked(store, f"ex_race{round_}")
            answers: list[ApprovalDecision] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(_decide, store, approval.id, "approved", answers)
                tg.start_soon(_decide, other, approval.id, "denied", answers)
            won = [a.approval for a in answers if isinstance(a, Decided)]
            assert len(won) == 1, answers
            assert (
                answers.count(Refused(won[0].status)) == 1
            )  # the loser is told the winner's verdict
    finally:
        await other.aclose()


async def _decide(
    store: Store, approval_id: str, verdict: str, answers: list[ApprovalDecision]
) -> None:
    answers.append(await store.decide_approval(approval_id, verdict, "bob", None))
