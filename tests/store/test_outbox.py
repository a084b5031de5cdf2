"""The outbox of approval notifications (``gateway/store/outbox.py``), on each backend.

- Requesting, deciding, expiring and withdrawing an approval each write their notifications
  in the same transaction: a change rolled back leaves none, and a store without endpoints
  writes none.
- A due notification is claimed by one claimer; one retried later is not due before its time;
  one delivered or dead is never claimed again.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from gateway.notifications.payload import Notifier
from gateway.settings import Settings
from gateway.store import approvals
from gateway.store.outbox import Delivery
from gateway.store.records import Decided
from gateway.store.sql import Abort, Db
from gateway.store.store import Store
from gateway.types import Status
from tests.store.test_store import pending_approval, record

pytestmark = pytest.mark.anyio
HOOK = "https://hooks.example.com/toolgate"
CHAT = "https://chat.example.com/webhook"


def notifier() -> Notifier:
    settings = Settings(
        base_dir=Path("."),
        public_url="https://toolgate.example.com/",
        notifications={
            "endpoints": [
                {"url": HOOK, "secret_env": "WH"},
                {"url": CHAT, "secret_env": "WH", "events": ["approval.requested"]},
            ]
        },
    )
    return Notifier(settings)


async def outbox(store: Store) -> list[tuple[str, str, str, str]]:
    def read(db: Db) -> list[tuple[str, str, str, str]]:
        sql = "SELECT event, endpoint, approval_id, status FROM notifications"
        return [tuple(row) for row in db.all(sql)]

    return await store._read(read)


async def test_each_approval_change_writes_its_notifications_with_it(store: Store) -> None:
    await store.reserve(record("ex_quiet", call_id="quiet"), [], None)
    await store.checkpoint_for_approval(pending_approval("ap_quiet", "ex_quiet"), [])
    assert await outbox(store) == []  # no endpoint: nothing written

    store.notify_with(notifier())
    await store.reserve(record("ex_a", call_id="a"), [], None)
    await store.checkpoint_for_approval(pending_approval("ap_a", "ex_a"), [])
    assert sorted(await outbox(store)) == [
        ("approval.requested", CHAT, "ap_a", "pending"),
        ("approval.requested", HOOK, "ap_a", "pending"),
    ]
    decided = await store.decide_approval("ap_a", "approved", "bob", None)
    assert isinstance(decided, Decided)
    await store.reserve(record("ex_b", call_id="b"), [], None)
    overdue = replace(pending_approval("ap_b", "ex_b"), expires_ms=int(time.time() * 1000) - 1)
    await store.checkpoint_for_approval(overdue, [])
    assert [a.id for a in await store.expired_approvals()] == ["ap_b"]
    await store.reserve(record("ex_d", call_id="d"), [], None)
    await store.checkpoint_for_approval(replace(overdue, id="ap_d", execution_id="ex_d"), [])
    late = await store.decide_approval("ap_d", "approved", "bob", None)
    assert not isinstance(late, Decided) and late.status == "expired"  # expired, and told
    found = sorted(await outbox(store))
    assert found == sorted(
        [
            ("approval.requested", HOOK, "ap_a", "pending"),
            ("approval.requested", CHAT, "ap_a", "pending"),
            ("approval.approved", HOOK, "ap_a", "pending"),
            ("approval.requested", HOOK, "ap_b", "pending"),
            ("approval.requested", CHAT, "ap_b", "pending"),
            ("approval.expired", HOOK, "ap_b", "pending"),
            ("approval.requested", HOOK, "ap_d", "pending"),
            ("approval.requested", CHAT, "ap_d", "pending"),
            ("approval.expired", HOOK, "ap_d", "pending"),
        ]
    )

    def rolled_back(db: Db) -> None:
        approvals.request(db, pending_approval("ap_gone", "ex_gone"), store.notices)
        raise Abort(None)

    await store._write(rolled_back)
    assert await store.get_approval("ap_gone") is None
    assert sorted(await outbox(store)) == found  # the change rolled back, and its notifications


async def test_a_withdrawn_approval_is_notified_with_it(store: Store) -> None:
    # the approver's channel was told the approval is pending: it is told it is gone, when
    # its call is cancelled (withdraw) and when a decision finds the call no longer parked
    store.notify_with(notifier())
    for name in ("w", "late"):
        await store.reserve(record(f"ex_{name}", call_id=name), [], None)
        await store.checkpoint_for_approval(pending_approval(f"ap_{name}", f"ex_{name}"), [])
    assert await store.withdraw_approval("ap_w")
    assert not await store.withdraw_approval("ap_w")  # withdrawn once, told once
    parked = [Status.AWAITING_APPROVAL]
    assert await store.set_status("ex_late", parked, Status.CANCELLING)
    late = await store.decide_approval("ap_late", "approved", "bob", None)
    assert not isinstance(late, Decided) and late.status == "withdrawn"
    told = sorted(row[:3] for row in await outbox(store) if row[0] == "approval.withdrawn")
    assert told == [("approval.withdrawn", HOOK, "ap_late"), ("approval.withdrawn", HOOK, "ap_w")]


async def test_a_notification_is_claimed_once_and_settled_for_good(store: Store) -> None:
    store.notify_with(notifier())
    await store.reserve(record("ex_c", call_id="c"), [], None)
    await store.checkpoint_for_approval(pending_approval("ap_c", "ex_c"), [])
    claims: dict[str, list[Delivery]] = {}

    async def claim(owner: str) -> None:
        claims[owner] = await store.claim_notifications(owner, 10, 60_000)

    async with anyio.create_task_group() as tg:
        for owner in ("r1", "r2", "r3"):
            tg.start_soon(claim, owner)
    taken = [d.id for found in claims.values() for d in found]
    assert len(taken) == 2 and len(set(taken)) == 2  # each once, whoever took it
    assert await store.claim_notifications("r4", 10, 60_000) == []  # claimed: not due

    owner = next(o for o, found in claims.items() for d in found if d.endpoint == HOOK)
    hook = next(d for d in claims[owner] if d.endpoint == HOOK)
    assert hook.attempts == 1 and hook.event == "approval.requested"
    now = int(time.time() * 1000)
    assert not await store.settle_notification(hook.id, "someone-else", "delivered", now)
    assert await store.settle_notification(hook.id, owner, "pending", now + 60_000, "500")
    assert await store.claim_notifications("r4", 10, 60_000) == []  # retried later, not now
    assert await store.settle_notification(hook.id, owner, "pending", now - 1, "500") is False

    def due_now(db: Db) -> None:
        db.run("UPDATE notifications SET due_ms = ? WHERE id = ?", (now - 1, hook.id))

    await store._write(due_now)
    again = await store.claim_notifications("r4", 10, 60_000)
    assert [(d.id, d.attempts) for d in again] == [(hook.id, 2)]
    assert await store.settle_notification(hook.id, "r4", "delivered", now)
    await store._write(due_now)
    assert await store.claim_notifications("r5", 10, 60_000) == []  # delivered: never again
    assert await store.notification_counts() == {"delivered": 1, "pending": 1}
