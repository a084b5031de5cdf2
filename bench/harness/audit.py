"""What the audit trail's hash chain costs scenario 1's call: ``fs.read_file`` through
``run_call`` in-process, with the chain and with rows written unlinked and unhashed, in
alternating blocks of one run (docs/security.md#audit-trail)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gateway import jsontext
from gateway.events.chain import GENESIS
from gateway.events.model import Event
from gateway.pipeline.runner import run_call
from gateway.store import rows as store_rows

from .timing import Samples, stats_us, timed_async, timed_loop

BLOCKS = 10
"""Alternations of the two: a change in the machine's load hits both."""


def unhashed_rows(events: Sequence[Event], seq: int, prev: str) -> list[tuple[Any, ...]]:
    """The rows the store wrote before the chain: numbered, no link, no hash."""
    stored = jsontext.stored
    return [
        (e.id, e.execution_id, seq + i, e.type, e.version, e.at_ms, stored(e.data), None, None)
        for i, e in enumerate(events)
    ]


def rows_cost(events: Sequence[Event], n: int) -> dict[str, Any]:
    """Building the rows of one call's events, chained and unchained: the chain's own CPU,
    without the rest of the call around it."""
    real = store_rows.chained_rows
    return {
        "events": len(events),
        "rows_chained": stats_us(timed_loop(lambda: real(events, 0, GENESIS), n)),
        "rows_unchained": stats_us(timed_loop(lambda: unhashed_rows(events, 0, GENESIS), n)),
    }


async def chain_cost(services: Any, make_request: Callable[[], Any], n: int) -> dict[str, Any]:
    real = store_rows.chained_rows
    block = max(n // BLOCKS, 10)
    runs: dict[str, list[Samples]] = {"chained": [], "unchained": []}
    try:
        for _ in range(BLOCKS):
            for name, rows_of in (("chained", real), ("unchained", unhashed_rows)):
                store_rows.chained_rows = rows_of  # type: ignore[assignment]
                queue = iter([make_request() for _ in range(block + 5)])
                runs[name].append(
                    await timed_async(lambda q=queue: run_call(services, next(q)), block, warmup=5)
                )
    finally:
        store_rows.chained_rows = real
    out: dict[str, Any] = {}
    for name, parts in runs.items():
        merged = Samples(s for part in parts for s in part)
        merged.cpu_s = sum(part.cpu_s for part in parts)
        out[f"read_call_{name}"] = stats_us(merged)
    chained = out["read_call_chained"]
    unchained = out["read_call_unchained"]
    out["chain_cpu_us_per_call"] = round(
        chained["cpu_us_per_call"] - unchained["cpu_us_per_call"], 1
    )
    out["chain_median_us_per_call"] = round(chained["median_us"] - unchained["median_us"], 1)
    out["chain_cpu_share_pct"] = round(
        100 * out["chain_cpu_us_per_call"] / unchained["cpu_us_per_call"], 1
    )
    record = await run_call(services, make_request())
    events = await services.store.events(record.id)
    out.update(rows_cost(events, max(n, 2000)))
    out["rows_chain_us_per_call"] = round(
        out["rows_chained"]["median_us"] - out["rows_unchained"]["median_us"], 1
    )
    return out
