"""Decision latency: the OPA backend against the loopback stand-in vs the embedded backend.

Same run, same shipped policy, medians of N sequential decisions each, cached (one input over
and over) and uncached (cache_size=0). Prints a table and writes bench/results/opa_backend.json.

    PYTHONPATH=$PWD .venv/bin/python bench/opa_backend.py [N]
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from gateway.policy import bundle
from gateway.policy.embedded import EmbeddedPolicy
from gateway.policy.loader import load_policy_sources
from gateway.policy.opa import OpaPolicy
from gateway.policy.standin import StandIn
from gateway.testing import SAMPLE_POLICY_INPUT as BASE_INPUT

REPO = Path(__file__).resolve().parents[1]


async def opa_median(sources: Any, url: str, n: int, cache_size: int) -> float:
    backend = OpaPolicy(sources, url, timeout=5.0, cache_size=cache_size)
    await backend.open()
    times = []
    for _ in range(n):
        started = time.perf_counter()
        await backend.decide(BASE_INPUT)
        times.append(time.perf_counter() - started)
    await backend.aclose()
    return statistics.median(times[1:])


def embedded_median(sources: Any, n: int, cache_size: int) -> float:
    backend = EmbeddedPolicy(sources, cache_size=cache_size)
    times = []
    for _ in range(n):
        started = time.perf_counter()
        backend.decide_sync(BASE_INPUT)
        times.append(time.perf_counter() - started)
    return statistics.median(times[1:])


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    sources = load_policy_sources(REPO / "rego", REPO / "policies")
    server = StandIn.from_bundle(bundle.build(sources).data).start()
    try:
        rows = {
            "embedded uncached": embedded_median(sources, n, 0),
            "embedded cached": embedded_median(sources, n, 2048),
            "opa (stand-in) uncached": asyncio.run(opa_median(sources, server.url, n, 0)),
            "opa (stand-in) cached": asyncio.run(opa_median(sources, server.url, n, 2048)),
        }
    finally:
        server.stop()
    for name, seconds in rows.items():
        print(f"{name:26} median {seconds * 1e6:9.1f} µs")
    out = REPO / "bench" / "results" / "opa_backend.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps({"n": n, "median_us": {k: v * 1e6 for k, v in rows.items()}}, indent=2) + "\n"
    )


if __name__ == "__main__":
    main()
