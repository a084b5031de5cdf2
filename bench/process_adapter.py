"""Latency of a trivial ``proc.python`` call: through the API, the adapter alone, and a bare spawn.

    .venv/bin/python bench/process_adapter.py [--calls 200]

Runs in a throw-away copy of the shipped configuration (SQLite store) and prints the median
and p90 of each, in milliseconds, as JSON. "api" is POST /v1/executions through Starlette's
TestClient (the whole ten-stage pipeline, events and store included); "adapter" is
``ProcessAdapter.execute`` alone; "spawn" is ``subprocess.run`` of the same argv, environment
and working directory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import yaml
from anyio.from_thread import start_blocking_portal
from starlette.testclient import TestClient

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gateway.adapters.base import AdapterCall  # noqa: E402
from gateway.adapters.process.adapter import create  # noqa: E402
from gateway.server.app import create_app  # noqa: E402
from gateway.settings import Settings, load_settings  # noqa: E402
from gateway.testing import load_catalogue  # noqa: E402
from gateway.workspace import Workspace  # noqa: E402

KEY = "tg_dev_alice"
SCRIPT = "print('ok')\n"
WARMUP = 10


def stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 2),
        "p90_ms": round(ordered[int(len(ordered) * 0.9) - 1] * 1000, 2),
        "min_ms": round(ordered[0] * 1000, 2),
    }


def project(base: Path) -> Settings:
    for name in ("tools.d", "rego", "policies", "examples"):
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, base / name)
    shutil.copy(REPO / "toolgate.yaml", base / "toolgate.yaml")
    rules = base / "policies" / "rules.yaml"  # the shipped quota would stop the bench at 60/min
    data = yaml.safe_load(rules.read_text())
    data["quotas"]["calls_per_minute"] = {k: 1_000_000 for k in data["quotas"]["calls_per_minute"]}
    # proc.python runs agent code: the shipped policy asks for approval (approval_tags)
    data["tool_overrides"]["proc.python"] = {"approval": False}
    rules.write_text(yaml.safe_dump(data))
    return load_settings(
        base / "toolgate.yaml", env={}, database_url=f"sqlite:///{base / 'var' / 'tg.db'}"
    )


def api_call(client: TestClient, n: int) -> None:
    payload = {
        "run_id": "bench",
        "turn_id": "t",
        "call_id": f"c{n}",
        "tool": {"name": "proc.python"},
        "arguments": {"script": "trivial.py"},
        "actor": {"user_id": "alice", "agent_id": "bench"},
        "workspace": {"id": "demo"},
    }
    headers = {"Authorization": f"Bearer {KEY}"}
    response = client.post("/v1/executions", json=payload, headers=headers)
    result = response.json()["result"]
    assert result["outcome"] == "succeeded", result


def adapter_call(settings: Settings, root: Path) -> Callable[[], Awaitable[None]]:
    catalogue = load_catalogue(settings.path(settings.tools_dir))
    adapter = create(settings, {}, catalogue)
    tool = catalogue.resolve("proc.python")
    workspace = Workspace("demo", root)
    arguments = {"script": "trivial.py", "args": [], "stdin": ""}

    async def one() -> None:
        call = AdapterCall(
            execution_id="ex_bench",
            tool=tool,
            arguments=arguments,
            workspace=workspace,
            paths={},
            deadline=time.time() + 30,
            cancelled=anyio.Event(),
            fencing_tokens={},
            output_budget=tool.output_budget,
            context={"arguments": arguments, "workspace": workspace.to_json()},
        )
        outcome = await adapter.execute(call)
        assert outcome.error is None, outcome.error

    return one


def spawn_call(root: Path) -> Callable[[], None]:
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    argv = [sys.executable, "-u", "--", "trivial.py"]
    return lambda: subprocess.run(argv, cwd=root, env=env, capture_output=True, check=True) and None


def measure(settings: Settings, root: Path, calls: int) -> dict[str, list[float]]:
    """Round-robin, so that a busy machine slows the three ways alike."""
    samples: dict[str, list[float]] = {"spawn": [], "adapter": [], "api": []}
    spawn, adapter = spawn_call(root), adapter_call(settings, root)
    with TestClient(create_app(settings)) as client, start_blocking_portal() as portal:
        ways: dict[str, Callable[[int], Any]] = {
            "spawn": lambda n: spawn(),
            "adapter": lambda n: portal.call(adapter),
            "api": lambda n: api_call(client, n),
        }
        for n in range(WARMUP + calls):
            for name, way in ways.items():
                started = time.perf_counter()
                way(n)
                if n >= WARMUP:
                    samples[name].append(time.perf_counter() - started)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tg-bench-") as tmp:
        base = Path(tmp)
        settings = project(base)
        root = (base / "var" / "workspaces" / "demo").resolve()
        root.mkdir(parents=True, exist_ok=True)
        (root / "trivial.py").write_text(SCRIPT)
        samples = measure(settings, root, args.calls)
    report: dict[str, Any] = {"calls": args.calls, "cpus": os.cpu_count()}
    report.update({name: stats(values) for name, values in samples.items()})
    report["load_average"] = [round(x, 2) for x in os.getloadavg()]
    for way in ("adapter", "api"):
        overhead = report[way]["median_ms"] - report["spawn"]["median_ms"]
        report[f"{way}_overhead_median_ms"] = round(overhead, 2)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
