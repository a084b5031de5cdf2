"""Concurrency proofs against real gateway processes sharing one store (SQLite, PostgreSQL).

- 50 concurrent requests with one idempotency key: exactly one side effect; every answer is
  the identical committed result or 409; none is a 5xx.
- 20 concurrent read-modify-write increments guarded by expected_state: no lost update.
- Both again with the requests spread over two gateway processes sharing the database.
- A call waiting for a lock, cancelled through the other gateway, ends the wait at once.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import httpx
import pytest

from gateway.store.records import LockBusy, LockRequest
from gateway.store.store import Store
from gateway.testing import gateway, make_project
from gateway.types import LockMode
from tests.helpers import ALICE, until
from tests.server.helpers import body as _body

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
HEADERS = {"Authorization": f"Bearer {ALICE}"}


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


async def test_a_cancel_through_another_gateway_ends_a_lock_wait(
    tmp_path: Path, database_url: str
) -> None:
    config = make_project(tmp_path, database_url)
    key = "ws:demo:file:held.txt"
    store = Store(database_url)
    await store.open()
    try:
        held = await store.try_acquire(
            "ex_holder", "holder", [LockRequest(key, LockMode.EXCLUSIVE)], 600
        )
        assert not isinstance(held, LockBusy)
        with gateway(config) as first, gateway(config) as second:
            async with httpx.AsyncClient(headers=HEADERS, timeout=60) as client:
                await _cancel_the_waiter(client, first, second)
            still = await store.try_acquire(
                "ex_other", "other", [LockRequest(key, LockMode.EXCLUSIVE)], 1
            )
            assert isinstance(still, LockBusy) and still.holder == "ex_holder"  # held throughout
    finally:
        await store.aclose()
    assert not (tmp_path / "var" / "workspaces" / "demo" / "held.txt").exists()


async def _cancel_the_waiter(client: httpx.AsyncClient, first: str, second: str) -> None:
    """Start a write on ``first`` that waits for its lock, cancel it through ``second``."""
    body = _body("fs.write_file", {"path": "held.txt", "content": "never"})
    waiter = (
        await client.post(first + "/v1/executions", json=body, headers={"Prefer": "respond-async"})
    ).json()

    async def running() -> bool:  # a worker of the first gateway took it: it waits for the lock
        seen = (await client.get(first + waiter["links"]["self"])).json()
        return bool(seen["status"] == "running")

    await until(running, "a worker of the first gateway to take the call", limit=30)
    cancel = await client.post(second + waiter["links"]["self"] + "/cancel")
    # running when asked: the answer is the call as marked (docs/failures.md, cancel)
    assert (cancel.status_code, cancel.json()["status"]) == (202, "cancelling"), cancel.text
    # Without the fix this ends lock_timeout at the tool's timeout (10 s).
    done = (await client.get(second + waiter["links"]["self"] + "?wait=30")).json()
    result = done["result"]
    assert done["status"] == "completed", done
    assert result["outcome"] == "cancelled" and result["error"]["type"] == "cancelled"
    assert result["side_effect"]["attempted"] is False
