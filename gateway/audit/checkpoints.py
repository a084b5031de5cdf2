"""Signed checkpoints over the heads of the event chains.

A checkpoint lists ``[execution_id, seq, hash]`` of the last event of every execution whose
chain moved since about the previous checkpoint (a window reaching :data:`MARGIN_MS` further
back, for clocks that differ between replicas and events committed a moment after they were
made), leaving out heads the previous checkpoint already holds. It is linked to the previous
checkpoint by digest, numbered, and signed with Ed25519 over its body:

    body   = UTF-8 of the compact JSON array [FORMAT, seq, at_ms, prev, heads]
    digest = hex SHA-256 of body;  signature = unpadded base64url of Ed25519(body)

so deleting a chain's tail, or a whole chain, that a checkpoint saw is found, and so is a
checkpoint edited, forged without the key, or missing between two others. Several replicas
may try at once: the one whose checkpoint still follows the last one commits it, the others
find theirs stale and drop it (``store.audit.add_checkpoint``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import anyio

from gateway.allocator import trim
from gateway.audit.keys import Signer
from gateway.errors import ToolgateError
from gateway.instance import INSTANCE_ID
from gateway.jsontext import canonical
from gateway.store.audit import CheckpointRecord
from gateway.store.store import Store

log = logging.getLogger("toolgate.audit")

FORMAT = "toolgate.checkpoint.v1"
GENESIS = "0" * 64
"""The ``prev`` of checkpoint 1."""
MARGIN_MS = 60_000
"""How much further back than the previous checkpoint the next one looks for moved chains."""

Head = tuple[str, int, str]


def event_floor(at_ms: int) -> str:
    """The smallest event id made at ``at_ms`` or later (ids begin with their time)."""
    return f"ev_{max(at_ms, 0):012x}"


def body(seq: int, at_ms: int, prev: str, heads: Sequence[Sequence[object]]) -> bytes:
    return canonical([FORMAT, seq, at_ms, prev, [list(h) for h in heads]]).encode("utf-8")


def body_of(seq: int, at_ms: int, prev: str, heads_json: str) -> bytes:
    """:func:`body` of the heads whose canonical JSON is ``heads_json``, the same bytes,
    without building the heads' JSON a second time (a megabyte and more in a busy minute)."""
    return f"[{canonical(FORMAT)},{seq},{at_ms},{canonical(prev)},{heads_json}]".encode()


def heads_of(record: CheckpointRecord) -> list[Head]:
    """The heads a checkpoint holds ([] if its text is not a list of heads)."""
    try:
        found = json.loads(record.heads_json)
        return [(str(x), int(s), str(h)) for x, s, h in found]
    except (ValueError, TypeError):
        return []


@dataclass(frozen=True)
class Written:
    record: CheckpointRecord | None
    """The checkpoint written; None: nothing moved since the last, or another replica's
    came first."""
    reason: str = ""


async def make_checkpoint(
    store: Store, signer: Signer, *, everything: bool = False, first_window_ms: int | None = None
) -> Written:
    """Sign and append one checkpoint of the chains that moved since the last one.

    ``everything``: of every chain's head instead (a full scan of the events). Without a
    checkpoint before it, of the chains that moved in the last ``first_window_ms`` (None:
    every chain)."""
    at_ms = int(time.time() * 1000)
    seq, prev, heads_json = await _next_heads(store, at_ms, everything, first_window_ms)
    if heads_json is None:
        return Written(None, "nothing moved since the last checkpoint")
    data = body_of(seq, at_ms, prev, heads_json)
    record = CheckpointRecord(
        seq=seq,
        at_ms=at_ms,
        prev=prev,
        heads_json=heads_json,
        digest=hashlib.sha256(data).hexdigest(),
        key_id=signer.key_id,
        signature=signer.sign(data),
        writer=INSTANCE_ID,
    )
    if not await store.audit_add_checkpoint(record):
        return Written(None, "another gateway wrote a checkpoint first")
    return Written(record)


async def _next_heads(
    store: Store, at_ms: int, everything: bool, first_window_ms: int | None
) -> tuple[int, str, str | None]:
    """(seq, prev, canonical JSON of the heads) of the next checkpoint; None: no head moved.

    What it reads is dropped on return, before the signing: the last checkpoint's heads and
    the new ones are a megabyte and more each in a busy minute."""
    last = await store.audit_last_checkpoint()
    if everything or (last is None and first_window_ms is None):
        floor = event_floor(0)
    elif last is None:
        floor = event_floor(at_ms - (first_window_ms or 0) - MARGIN_MS)
    else:
        floor = event_floor(last.at_ms - MARGIN_MS)
    known = set(heads_of(last)) if last is not None else set()
    heads = sorted((x, s, h) for x, s, h in await store.audit_heads_since(floor) if h is not None)
    heads = [h for h in heads if h not in known]
    seq, prev = (1, GENESIS) if last is None else (last.seq + 1, last.digest)
    return seq, prev, canonical([list(h) for h in heads]) if heads else None


async def checkpoint_periodically(store: Store, signer: Signer, interval: float) -> None:
    """Every ``interval`` seconds, a checkpoint, unless another replica wrote one lately."""
    while True:
        await anyio.sleep(interval)
        try:
            last = await store.audit_last_link()  # not its heads: only whether it is fresh
            if last is not None and time.time() * 1000 - last.at_ms < interval * 500:
                continue  # another replica's is fresh: half an interval old at most
            # A first checkpoint covers what moved lately, not a store's whole past (that
            # is `toolgate audit checkpoint --all`, out of the serving process).
            written = await make_checkpoint(store, signer, first_window_ms=int(interval * 1000))
        except ToolgateError as exc:
            log.warning("audit checkpoint failed: %s", exc)
            continue
        if written.record is not None:
            log.debug("audit checkpoint %d written", written.record.seq)
        # What it read and built is free now, in whichever malloc arenas its threads had:
        # given back, or each checkpoint raises resident memory a step (gateway/allocator.py).
        await anyio.to_thread.run_sync(trim)
