"""Latency of ``db.query_orders`` through the API, the adapter alone, and SQLAlchemy directly.

    .venv/bin/python bench/db_adapter.py [--calls 200]

Runs in a throw-away copy of the shipped configuration (SQLite store, the example orders
database seeded at start) and prints the median and p90 of each, in milliseconds, and the
ratio of the API's median to the direct one, as JSON. "api" is POST /v1/executions through
Starlette's TestClient (the whole ten-stage pipeline, events and store included); "adapter"
is ``DatabaseAdapter.execute`` alone (read-only transaction on a worker thread, timeouts,
row shaping); "direct" is the same SQL with the same binds on a plain pooled SQLAlchemy
engine, in the same process, one transaction per call.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import sqlalchemy as sa
import yaml
from starlette.testclient import TestClient

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gateway.adapters.base import AdapterCall  # noqa: E402
from gateway.adapters.database.adapter import create  # noqa: E402
from gateway.server.app import create_app  # noqa: E402
from gateway.settings import Settings, load_settings  # noqa: E402
from gateway.testing import load_catalogue  # noqa: E402
from gateway.workspace import Workspace  # noqa: E402

KEY = "tg_dev_alice"
TOOL = "db.query_orders"
ARGUMENTS = {"status": "paid", "customer": None, "after_id": 0, "limit": 20}
WARMUP = 10


def stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 3),
        "p90_ms": round(ordered[int(len(ordered) * 0.9) - 1] * 1000, 3),
        "min_ms": round(ordered[0] * 1000, 3),
    }


def timed(fn: Callable[[], Any], calls: int) -> list[float]:
    for _ in range(WARMUP):
        fn()
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return samples


def project_copy(root: Path) -> Settings:
    for name in ("tools.d", "rego", "policies", "examples"):
        shutil.copytree(REPO / name, root / name)
    shutil.copy(REPO / "toolgate.yaml", root / "toolgate.yaml")
    rules = root / "policies" / "rules.yaml"  # the shipped quota would stop the bench at 120/min
    data = yaml.safe_load(rules.read_text())
    data["quotas"]["calls_per_minute"] = {k: 1_000_000 for k in data["quotas"]["calls_per_minute"]}
    rules.write_text(yaml.safe_dump(data))
    return load_settings(root / "toolgate.yaml", env={})


def bench_api(settings: Settings, calls: int) -> list[float]:
    counter = iter(range(10**9))

    def one(client: TestClient) -> None:
        payload = {
            "run_id": "bench",
            "turn_id": "t",
            "call_id": f"c{next(counter)}",
            "tool": {"name": TOOL},
            "arguments": ARGUMENTS,
            "actor": {"user_id": "alice", "agent_id": "bench"},
            "workspace": {"id": "demo"},
        }
        response = client.post(
            "/v1/executions", json=payload, headers={"Authorization": f"Bearer {KEY}"}
        )
        result = response.json()["result"]
        assert result["outcome"] == "succeeded", result

    with TestClient(create_app(settings)) as client:
        return timed(lambda: one(client), calls)


def bench_adapter(settings: Settings, calls: int) -> list[float]:
    catalogue = load_catalogue(settings.path(settings.tools_dir))
    adapter = create(settings, settings.adapters["database"], catalogue)
    tool = catalogue.resolve(TOOL)
    workspace = Workspace("demo", settings.base_dir)

    async def one() -> None:
        call = AdapterCall(
            execution_id="ex_bench",
            tool=tool,
            arguments=ARGUMENTS,
            workspace=workspace,
            paths={},
            deadline=time.time() + 10,
            cancelled=anyio.Event(),
            fencing_tokens={},
            output_budget=tool.output_budget,
            context={"arguments": ARGUMENTS},
        )
        await adapter.execute(call)

    async def run() -> list[float]:
        for _ in range(WARMUP):
            await one()
        samples = []
        for _ in range(calls):
            started = time.perf_counter()
            await one()
            samples.append(time.perf_counter() - started)
        await adapter.aclose()
        return samples

    return anyio.run(run)


def bench_direct(settings: Settings, calls: int) -> list[float]:
    tool = load_catalogue(settings.path(settings.tools_dir)).resolve(TOOL)
    engine = sa.create_engine(f"sqlite:///{settings.base_dir / 'var/examples/orders.db'}")
    query = sa.text(tool.options.sql)

    def one() -> None:
        with engine.connect() as conn:
            rows = [dict(r._mapping) for r in conn.execute(query, ARGUMENTS)]
            conn.commit()
        assert rows

    try:
        return timed(one, calls)
    finally:
        engine.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="toolgate-bench-") as tmp:
        settings = project_copy(Path(tmp))
        api = stats(bench_api(settings, args.calls))
        adapter = stats(bench_adapter(settings, args.calls))
        direct = stats(bench_direct(settings, args.calls))
    report = {
        "tool": TOOL,
        "calls": args.calls,
        "api": api,
        "adapter": adapter,
        "direct": direct,
        "api_over_direct": round(api["median_ms"] / direct["median_ms"], 1),
        "gateway_added_ms": round(api["median_ms"] - direct["median_ms"], 3),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
