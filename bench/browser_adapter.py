"""Latency of ``web.extract_text`` through the API, the adapter alone, and Playwright directly.

    .venv/bin/python bench/browser_adapter.py [--calls 200]

Serves the test pages on 127.0.0.1, runs a throw-away copy of the shipped configuration
(SQLite store, loopback allowed through ``adapters.browser.allow_networks``) and prints, as
JSON, the median and p90 of each in milliseconds and the ratio of the API's median to the
direct one. Every variant works on a warm session (Chromium launched, context open) and
does the same thing per call: open the page, wait for ``td``, read the text of every ``td``.

- "api": POST /v1/executions through Starlette's TestClient (the whole pipeline: policy,
  the declared session lock in the store, events, the evidence screenshot and its artifact
  file, commit);
- "adapter": ``BrowserAdapter.execute`` alone (session lock, every connection through the
  session's egress proxy, the steps, the evidence screenshot stored with fsync);
- "direct": the same Playwright calls on one page of the same Chromium, no proxy;
- "direct_screenshot": "direct" plus a viewport screenshot, the evidence the gateway adds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import yaml
from starlette.testclient import TestClient

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gateway.adapters.base import AdapterCall  # noqa: E402
from gateway.adapters.browser.adapter import BrowserAdapter  # noqa: E402
from gateway.adapters.browser.sessions import (  # noqa: E402
    DEFAULT_ARGS,
    DEFAULT_EXECUTABLE,
    BrowserConfig,
)
from gateway.adapters.shared.artifacts import ArtifactStore  # noqa: E402
from gateway.server.app import create_app  # noqa: E402
from gateway.settings import Settings, load_settings  # noqa: E402
from gateway.testing import load_catalogue  # noqa: E402
from gateway.workspace import Workspace  # noqa: E402

KEY = "tg_dev_alice"
TOOL = "web.extract_text"
WARMUP = 5
LOOPBACK = {"allow_networks": ["127.0.0.1"]}
TABLE = b"""<!doctype html><title>Prices</title>
<table id=prices><tr><th>plan</th><th>price</th></tr>
<tr><td>basic</td><td>5</td></tr><tr><td>pro</td><td>20</td></tr></table>"""


class _Table(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(TABLE)))
        self.end_headers()
        self.wfile.write(TABLE)


@contextmanager
def table_page() -> Iterator[str]:
    """A page with a price table on 127.0.0.1 (any path); yields its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Table)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/table"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 3),
        "p90_ms": round(ordered[max(int(len(ordered) * 0.9) - 1, 0)] * 1000, 3),
        "min_ms": round(ordered[0] * 1000, 3),
    }


def project_copy(root: Path) -> Settings:
    for name in ("tools.d", "rego", "policies", "examples"):
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, root / name)
    shutil.copy(REPO / "toolgate.yaml", root / "toolgate.yaml")
    rules = root / "policies" / "rules.yaml"  # the shipped quota would stop the bench at 120/min
    data = yaml.safe_load(rules.read_text())
    data["quotas"]["calls_per_minute"] = {k: 1_000_000 for k in data["quotas"]["calls_per_minute"]}
    rules.write_text(yaml.safe_dump(data))
    settings = load_settings(root / "toolgate.yaml", env={})
    return settings.model_copy(update={"adapters": {**settings.adapters, "browser": LOOPBACK}})


def bench_api(settings: Settings, url: str, calls: int) -> list[float]:
    counter = iter(range(10**9))

    def one(client: TestClient) -> None:
        payload = {
            "run_id": "bench",
            "turn_id": "t",
            "call_id": f"c{next(counter)}",
            "tool": {"name": TOOL},
            "arguments": {"url": url, "selector": "td"},
            "actor": {"user_id": "alice", "agent_id": "bench"},
            "workspace": {"id": "demo"},
        }
        response = client.post(
            "/v1/executions", json=payload, headers={"Authorization": f"Bearer {KEY}"}
        )
        result = response.json()["result"]
        assert result["outcome"] == "succeeded", result

    with TestClient(create_app(settings)) as client:
        for _ in range(WARMUP):
            one(client)
        samples = []
        for _ in range(calls):
            started = time.perf_counter()
            one(client)
            samples.append(time.perf_counter() - started)
    return samples


async def _timed(fn: Callable[[], Awaitable[Any]], calls: int) -> list[float]:
    for _ in range(WARMUP):
        await fn()
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - started)
    return samples


async def bench_adapter(settings: Settings, url: str, calls: int) -> list[float]:
    tool = load_catalogue(settings.path(settings.tools_dir)).resolve(TOOL)
    workspace = Workspace("demo", settings.base_dir)
    config = BrowserConfig.model_validate(LOOPBACK)
    adapter = BrowserAdapter(config, ArtifactStore(settings.base_dir / "var" / "artifacts"))
    arguments = {"url": url, "selector": "td", "session": "main"}

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
            context={"arguments": arguments, "actor": {"user_id": "alice"}},
        )
        out = await adapter.execute(call)
        assert out.outcome.value == "succeeded", out.error

    try:
        return await _timed(one, calls)
    finally:
        await adapter.aclose()


async def bench_direct(url: str, calls: int, screenshot: bool) -> list[float]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(DEFAULT_EXECUTABLE), args=list(DEFAULT_ARGS)
        )
        context = await browser.new_context(viewport={"width": 1280, "height": 800})
        page = await context.new_page()

        async def one() -> None:
            await page.goto(url, wait_until="domcontentloaded")
            cells = page.locator("td")
            await cells.first.wait_for(state="attached")
            texts = await cells.all_inner_texts()
            assert texts[0] == "basic"
            if screenshot:
                await page.screenshot()

        try:
            return await _timed(one, calls)
        finally:
            await browser.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args(argv)
    if not DEFAULT_EXECUTABLE.is_file():
        print(f"chromium not found at {DEFAULT_EXECUTABLE}: apt-get install -y chromium")
        return 2
    with table_page() as url, tempfile.TemporaryDirectory() as tmp:
        settings = project_copy(Path(tmp))
        results = {
            "api": stats(bench_api(settings, url, args.calls)),
            "adapter": stats(asyncio.run(bench_adapter(settings, url, args.calls))),
            "direct": stats(asyncio.run(bench_direct(url, args.calls, screenshot=False))),
            "direct_screenshot": stats(asyncio.run(bench_direct(url, args.calls, True))),
        }
    direct = results["direct"]["median_ms"]
    results["calls"] = {"each": args.calls, "warmup": WARMUP}  # type: ignore[assignment]
    results["ratio_api_to_direct"] = round(results["api"]["median_ms"] / direct, 2)  # type: ignore[assignment]
    results["ratio_adapter_to_direct"] = round(  # type: ignore[assignment]
        results["adapter"]["median_ms"] / direct, 2
    )
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
