"""Concurrency proofs against real gateway processes sharing one store (SQLite, PostgreSQL).

- 50 concurrent requests with one idempotency key: exactly one side effect; every answer is
  the identical committed result or 409; none is a 5xx.
- 20 concurrent read-modify-write increments guarded by expected_state: no lost update.
- Both again with the requests spread over two gateway processes sharing the database.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.conftest import ALICE
from tests.integration.gateways import gateway, make_project

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
HEADERS = {"Authorization": f"Bearer {ALICE}"}
_ids = itertools.count()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _body(tool: str, arguments: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "run_id": "conc",
        "call_id": f"c{next(_ids)}",
        "tool": {"name": tool},
        "arguments": arguments,
        "actor": {"user_id": "alice", "agent_id": "t"},
        "workspace": {"id": "demo"},
        **extra,
    }


async def _one_key_many_requests(urls: list[str], workspace: Path) -> None:
    answers: list[httpx.Response] = []

    async def send(client: httpx.AsyncClient, i: int) -> None:
        body = _body(
            "fs.append_file", {"path": "count.txt", "content": "x\n"}, idempotency_key="once"
        )
        answers.append(await client.post(urls[i % len(urls)] + "/v1/executions", json=body))

    async with (
        httpx.AsyncClient(headers=HEADERS, timeout=60) as client,
        anyio.create_task_group() as tg,
    ):
        for i in range(50):
            tg.start_soon(send, client, i)
    statuses = sorted({a.status_code for a in answers})
    assert set(statuses) <= {200, 409}, [a.text for a in answers if a.status_code not in (200, 409)]
    done = [a.json() for a in answers if a.status_code == 200]
    assert done, "no request completed"
    results = {json.dumps(d["result"], sort_keys=True) for d in done}
    ids = {d["id"] for d in done}
    assert len(results) == 1 and len(ids) == 1
    assert json.loads(results.pop())["outcome"] == "succeeded"
    assert (workspace / "count.txt").read_text() == "x\n"  # exactly one side effect


async def _increments(urls: list[str], workspace: Path, workers: int = 20) -> None:
    (workspace / "counter.txt").write_text("0")

    async def increment(client: httpx.AsyncClient, i: int) -> None:
        url = urls[i % len(urls)] + "/v1/executions"
        for _ in range(400):
            read = (
                await client.post(url, json=_body("fs.read_file", {"path": "counter.txt"}))
            ).json()
            data = read["result"]["data"]
            write = _body(
                "fs.write_file",
                {"path": "counter.txt", "content": str(int(data["content"]) + 1)},
                expected_state={"sha256": data["sha256"]},
            )
            result = (await client.post(url, json=write)).json()["result"]
            if result["outcome"] == "succeeded":
                return
            assert result["error"]["type"] in ("state_mismatch", "lock_timeout"), result
        raise AssertionError("an increment never got through")

    async with (
        httpx.AsyncClient(headers=HEADERS, timeout=60) as client,
        anyio.create_task_group() as tg,
    ):
        for i in range(workers):
            tg.start_soon(increment, client, i)
    assert (workspace / "counter.txt").read_text() == str(workers)


async def test_one_gateway(tmp_path: Path, database_url: str) -> None:
    config = make_project(tmp_path, database_url)
    workspace = tmp_path / "var" / "workspaces" / "demo"
    with gateway(config) as url:
        await _one_key_many_requests([url], workspace)
        await _increments([url], workspace)


async def test_two_gateways_share_one_store(tmp_path: Path, database_url: str) -> None:
    config = make_project(tmp_path, database_url)
    workspace = tmp_path / "var" / "workspaces" / "demo"
    with gateway(config) as first, gateway(config) as second:
        await _one_key_many_requests([first, second], workspace)
        await _increments([first, second], workspace)
