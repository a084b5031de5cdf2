"""``toolgate mcp``: the SDK's stdio client through the bridge to a real gateway."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import anyio
import pytest
from mcp import Client, StdioServerParameters

from gateway.mcp import meta
from tests.helpers import ALICE, REPO
from tests.mcp.helpers import ERAS, Gateway, meta_of


def _bridge(gw: Gateway, key: str = ALICE) -> StdioServerParameters:
    env = {**os.environ, "TOOLGATE_API_KEY": key, "PYTHONPATH": str(REPO)}
    args = ["-m", "gateway.cli", "mcp", "--url", gw.url]
    return StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(gw.root))


@pytest.mark.parametrize("era", ERAS)
def test_the_stdio_bridge_lists_and_calls(gw: Gateway, era: str) -> None:
    path = f"bridge-{era}-{uuid.uuid4().hex[:6]}.txt"

    async def main() -> tuple[set[str], object]:
        async with Client(_bridge(gw), mode=era) as client:  # type: ignore[arg-type]
            names = {t.name for t in (await client.list_tools()).tools}
            result = await client.call_tool(
                "fs.write_file",
                {"path": path, "content": "via stdio"},
                meta={meta.IDEMPOTENCY_KEY: uuid.uuid4().hex},
            )
            return names, result

    names, result = anyio.run(main)
    assert "fs.write_file" in names
    assert meta_of(result)[meta.OUTCOME] == "succeeded"
    assert (gw.workspace / path).read_text() == "via stdio"


def test_the_bridge_wants_its_key_in_the_environment(gw: Gateway) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TOOLGATE_API_KEY"}
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "mcp", "--url", gw.url],
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 2 and "TOOLGATE_API_KEY" in done.stderr
