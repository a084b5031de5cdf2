"""The MCP SDK is imported on the first request to ``/mcp``, not at start-up (a REST-only
deployment never pays its ~29 MB), and that first request is answered like any other."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.testing import make_project
from tests.helpers import ALICE, REPO

pytestmark = pytest.mark.slow  # every test here starts a process itself

CHILD = """
import asyncio, json, sys
import httpx
from gateway.server.app import create_app
from gateway.settings import load_settings

async def main():
    from pathlib import Path
    app = create_app(load_settings(Path(sys.argv[1])))
    async with app.router.lifespan_context(app):
        before = "mcp.server" in sys.modules
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080") as c:
            rest = await c.get("/v1/tools", headers={"Authorization": "Bearer " + sys.argv[2]})
            after_rest = "mcp.server" in sys.modules
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}}}}
            headers = {"Authorization": "Bearer " + sys.argv[2],
                       "Accept": "application/json, text/event-stream",
                       "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}
            one = lambda: c.post("/mcp", json=body, headers=headers)  # noqa: E731
            first, second = await asyncio.gather(one(), one())
    print(json.dumps({"before": before, "after_rest": after_rest, "rest": rest.status_code,
                      "after_mcp": "mcp.server" in sys.modules,
                      "first": [first.status_code, "fs.read_file" in first.text],
                      "second": [second.status_code, "fs.read_file" in second.text]}))

asyncio.run(main())
"""


def test_the_sdk_loads_on_the_first_mcp_request_and_answers_it(tmp_path: Path) -> None:
    import json

    config = make_project(tmp_path, f"sqlite:///{tmp_path}/toolgate.db")
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(config), ALICE],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["before"] is False and seen["after_rest"] is False, seen
    assert seen["rest"] == 200
    assert seen["after_mcp"] is True
    assert seen["first"] == [200, True] and seen["second"] == [200, True], seen
