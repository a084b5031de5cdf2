"""Revocation checks that share reads (``gateway.store.keys.Revocations``): no answer is older
than its question. On a fake read backed by a function (to hold a read in flight at will),
and on the real store: concurrent checks share reads on PostgreSQL, and a check asked after a
revocation commits is refused, however many checks are in flight around it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from gateway.errors import StoreError
from gateway.store import keys
from gateway.store.store import Store

pytestmark = pytest.mark.anyio


class Table:
    """A revoked_keys table behind a read that waits, when told to, until it is let go; the
    snapshot of each read is taken when it begins, as a statement's is."""

    def __init__(self) -> None:
        self.revoked: set[str] = set()
        self.reads: list[tuple[str, ...]] = []
        self.hold: asyncio.Event | None = None
        self.fail: Exception | None = None

    async def read(self, key_ids: Sequence[str]) -> set[str]:
        snapshot = set(self.revoked)
        self.reads.append(tuple(key_ids))
        if self.hold is not None:
            await self.hold.wait()
        if self.fail is not None:
            raise self.fail
        return snapshot & set(key_ids)


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_check_asked_during_a_read_waits_for_a_read_that_began_after_it() -> None:
    table = Table()
    checks = keys.Revocations(table.read)
    table.hold = asyncio.Event()
    early = asyncio.create_task(checks.revoked("k1"))  # its read's snapshot: nothing revoked
    await _settle()
    table.revoked.add("k1")  # the revocation commits while that read runs
    late = [asyncio.create_task(checks.revoked(k)) for k in ("k1", "k1", "k2")]
    await _settle()
    assert table.reads == [("k1",)]  # the late checks wait: the running read is too old
    table.hold.set()
    assert await early is False
    assert [await t for t in late] == [True, True, False]
    assert table.reads == [("k1",), ("k1", "k2")]  # the three late checks shared one read


async def test_a_cancelled_check_leaves_the_shared_read_to_the_others() -> None:
    table = Table()
    checks = keys.Revocations(table.read)
    table.hold = asyncio.Event()
    first = asyncio.create_task(checks.revoked("k"))
    await _settle()
    table.revoked.add("k")
    gone, kept = (asyncio.create_task(checks.revoked("k")) for _ in range(2))
    await _settle()
    gone.cancel()
    table.hold.set()
    assert await first is False
    assert await kept is True
    with pytest.raises(asyncio.CancelledError):
        await gone
    table.hold = None
    assert await checks.revoked("k") is True  # nothing left in flight: reads at once
    assert len(table.reads) == 3


async def test_a_failed_shared_read_fails_every_check_that_waited_for_it() -> None:
    table = Table()
    checks = keys.Revocations(table.read)
    table.hold = asyncio.Event()
    first = asyncio.create_task(checks.revoked("k"))
    await _settle()
    waiting = [asyncio.create_task(checks.revoked("k")) for _ in range(3)]
    await _settle()
    table.fail = StoreError("the store is unavailable")
    table.hold.set()
    for task in (first, *waiting):
        with pytest.raises(StoreError):
            await task
    table.fail, table.hold = None, None
    assert await checks.revoked("k") is False  # the next check reads again


async def test_checks_share_reads_and_none_misses_a_committed_revocation(
    database_url: str,
) -> None:
    store = Store(database_url)
    await store.open()
    reads: list[str] = []
    try:
        store.observe(lambda name, wall, cpu: reads.append(name))
        checks = 64
        before = await asyncio.gather(*(store.is_revoked("alice-2") for _ in range(checks)))
        assert not any(before)
        if store.dialect.name == "postgresql":  # SQLite reads inline: one check at a time
            assert 0 < reads.count("revoked_among") < checks, reads
        # Checks keep flowing while the revocation commits; every one asked after
        # revoke_key returned is refused.
        stop = asyncio.Event()

        async def flood() -> None:
            while not stop.is_set():
                await store.is_revoked("alice-2")
                await asyncio.sleep(0)  # SQLite's read is inline: let the others run

        floods = [asyncio.create_task(flood()) for _ in range(8)]
        await asyncio.sleep(0.05)
        assert await store.revoke_key("alice-2", "test", "left on a laptop")
        after = await asyncio.gather(*(store.is_revoked("alice-2") for _ in range(checks)))
        stop.set()
        await asyncio.gather(*floods)
        assert all(after)
        assert not await store.is_revoked("alice-1")
    finally:
        store.observe(None)
        await store.aclose()
