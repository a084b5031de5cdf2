"""The floor (``bench/floor_app.py``) keeps what it claims to keep, so that the yardstick
``bench/run.py`` measures the gateway against is not cheaper than the guarantees allow: a
bad or revoked key, a malformed body and a path out of the workspace (a symlink included) are
refused with nothing written; a read commits its execution and seven events chained by
SHA-256 before it answers."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import REPO

_spec = importlib.util.spec_from_file_location("floor_app", REPO / "bench" / "floor_app.py")
assert _spec is not None and _spec.loader is not None
floor_app = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(floor_app)

pytestmark = pytest.mark.anyio

KEY = "tg_floor_key"


@pytest.fixture
def floor(tmp_path: Path) -> tuple[httpx.AsyncClient, Path]:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "one-kib.txt").write_text("x" * 1024)
    (tmp_path / "secret.txt").write_text("outside")
    (tmp_path / "workspace" / "link").symlink_to(tmp_path / "secret.txt")
    app = floor_app.create_app(tmp_path, {KEY: "alice"})
    transport = httpx.ASGITransport(app=app)
    client = httpx.AsyncClient(transport=transport, base_url="http://floor")
    return client, tmp_path


def request(path: Any = "one-kib.txt", **extra: Any) -> dict[str, Any]:
    return {
        "call_id": "c1",
        "tool": {"name": "fs.read_file"},
        "arguments": {"path": path},
        "actor": {"user_id": "alice"},
        "workspace": {"id": "demo"},
        **extra,
    }


def rows(root: Path, table: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(root / "floor.db") as db:
        return db.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()


async def post(client: httpx.AsyncClient, body: Any, key: str = KEY) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await client.post("/call", content=content, headers={"Authorization": f"Bearer {key}"})


async def test_a_read_commits_its_execution_and_seven_chained_events_first(floor: Any) -> None:
    client, root = floor
    r = await post(client, request())
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["outcome"] == "succeeded"
    assert answer["data"]["content"] == "x" * 1024
    assert answer["evidence"]["sha256"] == hashlib.sha256(b"x" * 1024).hexdigest()
    (execution,) = rows(root, "executions")
    assert execution[0] == answer["execution_id"]
    events = rows(root, "events")
    assert [e[3] for e in events] == list(floor_app.EVENTS)
    prev = "0" * 64
    for _id, execution_id, seq, kind, data, prev_hash, digest in events:
        assert prev_hash == prev
        signed = floor_app.canonical([execution_id, seq, kind, json.loads(data)])
        assert digest == hashlib.sha256((prev + signed).encode()).hexdigest()
        prev = digest


@pytest.mark.parametrize(
    ("key", "body", "status"),
    [
        ("wrong", request(), 401),
        (KEY, b"{not json", 400),
        (KEY, request(path=["one-kib.txt"]), 400),
        (KEY, request(tool={"name": "fs.write_file"}), 400),
        (KEY, request(path="../secret.txt"), 403),
        (KEY, request(path="link"), 403),
    ],
)
async def test_a_refused_call_writes_nothing(floor: Any, key: str, body: Any, status: int) -> None:
    client, root = floor
    r = await post(client, body, key)
    assert r.status_code == status, r.text
    assert rows(root, "executions") == []
    assert rows(root, "events") == []


async def test_a_revoked_key_is_refused_on_the_next_call(floor: Any) -> None:
    client, root = floor
    assert (await post(client, request())).status_code == 200
    with sqlite3.connect(root / "floor.db") as db:
        db.execute("INSERT INTO revoked_keys VALUES ('key-0')")
    assert (await post(client, request())).status_code == 401
    assert len(rows(root, "executions")) == 1
