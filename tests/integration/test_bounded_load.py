"""Bounded load against a real gateway process (docs/security.md#bounded-load): every bound
answers 429 (a principal's share) or 503 (everyone's total) with ``Retry-After`` and
problem+json, and a flood from one principal does not starve another.

Alice floods; carol (another agent) must still be served; bob (an approver) decides.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import yaml

from gateway.mcp import meta
from gateway.testing import gateway, make_project, run_agent_code_without_approval
from tests.helpers import ALICE, BOB, CAROL, GATE, starts_processes, wait_until
from tests.mcp.helpers import connect, meta_of

LIMITS: dict[str, Any] = {
    "workers": 2,
    "max_executions_per_principal": 2,
    "max_executions_total": 3,
    "max_queued_per_principal": 3,
    "max_queued_total": 4,
    "max_waiters_per_principal": 1,
    "max_waiters_total": 1,
    "max_streams_per_principal": 1,
    "max_streams_total": 1,
    "max_pending_approvals_per_principal": 2,
    "max_header_bytes": 2048,
    "max_body_bytes": 64 * 1024,
    "stream_poll_interval": 0.05,
}
SESSIONS = {"max_sessions_per_principal": 1, "max_sessions_total": 1}
STREAM = {"Accept": "text/event-stream"}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
SESSION_HEADERS = {**MCP_HEADERS, "mcp-protocol-version": "2025-11-25"}
_ids = itertools.count()


class Gw:
    def __init__(self, url: str, root: Path) -> None:
        self.url, self.root = url, root
        self.workspace = root / "var" / "workspaces" / "demo"

    def client(self, key: str) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)


@pytest.fixture(scope="module")
@starts_processes
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gw]:
    root = tmp_path_factory.mktemp("load")
    config = make_project(root, f"sqlite:///{root}/toolgate.db")
    run_agent_code_without_approval(root, ("proc.python",))
    data = yaml.safe_load(config.read_text())
    data.update(LIMITS)
    data["mcp"] = {**data.get("mcp", {}), **SESSIONS}
    config.write_text(yaml.safe_dump(data))
    workspace = root / "var" / "workspaces" / "demo"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "slow.py").write_text("import sys, time\ntime.sleep(float(sys.argv[1]))\n")
    (workspace / "gate.py").write_text(GATE)
    with gateway(config) as url:
        yield Gw(url, root)


def _body(tool: str, arguments: dict[str, Any], user: str, run_id: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "call_id": f"c{next(_ids)}",
        "tool": {"name": tool},
        "arguments": arguments,
        "actor": {"user_id": user, "agent_id": "t"},
        "workspace": {"id": "demo"},
    }


def _slow(seconds: float, user: str, run_id: str) -> dict[str, Any]:
    return _body("proc.python", {"script": "slow.py", "args": [str(seconds)]}, user, run_id)


def _gated(gate: str, user: str, run_id: str) -> dict[str, Any]:
    """A ``proc.python`` call that runs until ``gate`` is opened (``_open``): it holds its
    slot, and a bound is full for as long as the test needs, however slow this machine is."""
    return _body("proc.python", {"script": "gate.py", "args": [gate]}, user, run_id)


def _open(gw: Gw, gate: str) -> None:
    (gw.workspace / gate).write_text("open")


def _write(user: str, run_id: str = "load") -> dict[str, Any]:
    return _body(
        "fs.write_file", {"path": f"{user}-{next(_ids)}.txt", "content": "x"}, user, run_id
    )


def _refused(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """A refusal by a bound: the status, problem+json with the code, and Retry-After."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["code"] == code and body["retryable"] is True, body
    assert int(response.headers["retry-after"]) == body["retry_after"] >= 1
    assert body["setting"] and body["limit"] >= 1
    return body


def _running(client: httpx.Client, run_id: str) -> int:
    items = client.get("/v1/executions", params={"run_id": run_id}).json()["items"]
    return sum(1 for item in items if item["status"] == "running")


def _park(gw: Gw, key: str, user: str) -> httpx.Response:
    """A call that waits for approval (fs.delete_file always needs one)."""
    name = f"park-{next(_ids)}.txt"
    (gw.workspace / name).write_text("bye")
    body = _body("fs.delete_file", {"path": name}, user, "parked")
    body["idempotency_key"] = body["call_id"]
    with gw.client(key) as client:
        return client.post("/v1/executions", json=body)


# --- executions: the flood -------------------------------------------------------------------


def test_a_flood_of_slow_calls_from_one_principal_does_not_starve_another(gw: Gw) -> None:
    with (
        gw.client(ALICE) as alice,
        gw.client(CAROL) as carol,
        gw.client(BOB) as bob,
        concurrent.futures.ThreadPoolExecutor(4) as pool,
    ):
        gate = f"flood-{next(_ids)}"
        flood = [pool.submit(alice.post, "/v1/executions", json=_gated(gate, "alice", "flood"))]
        flood.append(pool.submit(alice.post, "/v1/executions", json=_gated(gate, "alice", "flood")))
        wait_until(lambda: _running(alice, "flood") == 2, "alice's two slow calls to run")

        # alice is at her share: every further call is refused at once, and runs nothing
        for _ in range(3):
            _refused(alice.post("/v1/executions", json=_write("alice")), 429, "too_many_executions")

        async def over_mcp() -> Any:
            async with connect(gw.url, "2026-07-28", key=ALICE) as client:
                return await client.call_tool("fs.write_file", {"path": "m.txt", "content": "x"})

        result = anyio.run(over_mcp)  # the MCP door holds the same bound
        assert result.is_error and meta_of(result)[meta.ERROR]["type"] == "too_many_executions"
        assert meta_of(result)[meta.ERROR]["retry_after"] >= 1
        assert not (gw.workspace / "m.txt").exists()

        # carol is served while alice floods
        for _ in range(3):
            served = carol.post("/v1/executions", json=_write("carol"))
            assert served.status_code == 200, served.text
            assert served.json()["result"]["outcome"] == "succeeded"

        # one slow call of carol's fills the total (3): the next call of anyone is a 503
        held = pool.submit(carol.post, "/v1/executions", json=_gated(gate, "carol", "held"))
        wait_until(lambda: _running(carol, "held") == 1, "carol's slow call to run")
        _refused(carol.post("/v1/executions", json=_write("carol")), 503, "overloaded")
        read = _body("fs.read_file", {"path": "slow.py"}, "bob", "load")
        _refused(bob.post("/v1/executions", json=read), 503, "overloaded")

        _open(gw, gate)
        for future in [*flood, held]:
            done = future.result(timeout=60)
            assert done.status_code == 200 and done.json()["result"]["outcome"] == "succeeded"
    # every slot was given back
    with gw.client(ALICE) as alice:
        assert alice.post("/v1/executions", json=_write("alice")).status_code == 200


# --- the queue -------------------------------------------------------------------------------


def _started_ms(client: httpx.Client, execution_id: str) -> int:
    events = client.get(f"/v1/executions/{execution_id}/events").json()["items"]
    return min(e["at_ms"] for e in events if e["type"] == "tool.started")


def test_the_queue_is_bounded_and_workers_serve_another_principal_first(gw: Gw) -> None:
    prefer = {"Prefer": "respond-async"}
    with gw.client(ALICE) as alice, gw.client(CAROL) as carol:
        # two workers: alice's first two calls run, the next three wait in the queue
        first, second = f"q1-{next(_ids)}", f"q2-{next(_ids)}"
        queued = []
        for body in (_gated(first, "alice", "q"), _gated(second, "alice", "q")):
            sent = alice.post("/v1/executions", json=body, headers=prefer)
            assert sent.status_code == 202, sent.text
            queued.append(sent.json()["id"])
        for seconds in (0.1, 0.1, 0.1):
            sent = alice.post("/v1/executions", json=_slow(seconds, "alice", "q"), headers=prefer)
            assert sent.status_code == 202, sent.text
            queued.append(sent.json()["id"])
        wait_until(lambda: _running(alice, "q") == 2, "the workers to take alice's first two calls")
        _refused(
            alice.post("/v1/executions", json=_slow(0.1, "alice", "q"), headers=prefer),
            429,
            "too_many_queued",
        )
        mine = carol.post("/v1/executions", json=_slow(0.1, "carol", "q"), headers=prefer)
        assert mine.status_code == 202, mine.text
        # the queue now holds max_queued_total (4): the next call of anyone is a 503
        _refused(
            carol.post("/v1/executions", json=_slow(0.1, "carol", "q"), headers=prefer),
            503,
            "overloaded",
        )
        _open(gw, first)  # a worker is free: it takes carol's call before alice's next
        ended = carol.get(f"/v1/executions/{mine.json()['id']}", params={"wait": 30}).json()
        assert ended["result"]["outcome"] == "succeeded", ended
        _open(gw, second)
        for execution_id in queued:
            # one waiter each at a time (max_waiters_per_principal is 1)
            found = alice.get(f"/v1/executions/{execution_id}", params={"wait": 30}).json()
            assert found["result"]["outcome"] == "succeeded", found
        # when alice's first call ended, the free worker took carol's call, not alice's next
        carol_started = _started_ms(carol, mine.json()["id"])
        assert carol_started < min(_started_ms(alice, e) for e in queued[2:])


# --- long-polls, streams, approvals -------------------------------------------------------


@pytest.fixture(scope="module")
def parked(gw: Gw) -> dict[str, dict[str, Any]]:
    """One execution awaiting approval for alice and one for carol."""
    out = {}
    for key, user in ((ALICE, "alice"), (CAROL, "carol")):
        response = _park(gw, key, user)
        assert response.status_code == 202, response.text
        out[user] = response.json()
    return out


def _refused_while(
    ask: Callable[[], httpx.Response], status: int, code: str, what: str
) -> dict[str, Any]:
    """Ask until the answer is the refusal (an ask that got the slot holds it briefly)."""
    found: list[dict[str, Any]] = []

    def refused() -> bool:
        answer = ask()
        if answer.status_code == status:
            found.append(_refused(answer, status, code))
        return bool(found)

    wait_until(refused, what)
    return found[0]


def test_long_polls_are_bounded(gw: Gw, parked: dict[str, dict[str, Any]]) -> None:
    mine, theirs = parked["alice"]["links"]["self"], parked["carol"]["links"]["self"]
    stop = threading.Event()
    with (
        gw.client(ALICE) as alice,
        gw.client(CAROL) as carol,
        concurrent.futures.ThreadPoolExecutor(1) as pool,
    ):

        def hold() -> list[int]:  # alice long-polls, again and again, until told to stop
            statuses = []
            while not stop.is_set():
                statuses.append(alice.get(mine, params={"wait": 2}).status_code)
            return statuses

        holding = pool.submit(hold)
        try:
            _refused_while(
                lambda: alice.get(mine, params={"wait": 0.2}),
                429,
                "too_many_waiters",
                "a second long-poll of alice's to be refused",
            )
            _refused_while(  # max_waiters_total is 1
                lambda: carol.get(theirs, params={"wait": 0.2}),
                503,
                "overloaded",
                "carol's long-poll to be refused while alice holds the only slot",
            )
            assert alice.get(mine).status_code == 202  # no wait: no slot needed
        finally:
            stop.set()
        assert 202 in holding.result(timeout=30)
        # given back: a long-poll of carol's now waits and answers
        assert carol.get(theirs, params={"wait": 0.2}).status_code == 202


def test_event_streams_are_bounded_in_total(gw: Gw, parked: dict[str, dict[str, Any]]) -> None:
    mine, theirs = parked["alice"]["links"]["events"], parked["carol"]["links"]["events"]
    with gw.client(ALICE) as alice, gw.client(CAROL) as carol:
        with alice.stream("GET", mine, headers=STREAM) as held:
            assert held.status_code == 200
            _refused(alice.get(mine, headers=STREAM), 429, "too_many_streams")
            _refused(carol.get(theirs, headers=STREAM), 503, "overloaded")
        statuses: list[int] = []

        def carol_streams() -> bool:
            with carol.stream("GET", theirs, headers=STREAM) as again:
                statuses.append(again.status_code)
            return statuses[-1] == 200

        wait_until(carol_streams, "the stream slot to be given back")


def _pending(gw: Gw, user: str) -> list[dict[str, Any]]:
    with gw.client(BOB) as bob:
        items = bob.get("/v1/approvals", params={"status": "pending"}).json()["items"]
    return [a for a in items if a["requested_by"] == user]


def _executions(gw: Gw, key: str) -> set[str]:
    with gw.client(key) as client:
        return {e["id"] for e in client.get("/v1/executions").json()["items"]}


def test_pending_approvals_are_bounded_per_principal(
    gw: Gw, parked: dict[str, dict[str, Any]]
) -> None:
    limit = LIMITS["max_pending_approvals_per_principal"]
    for _ in range(limit - len(_pending(gw, "alice"))):
        assert _park(gw, ALICE, "alice").status_code == 202
    before = _executions(gw, ALICE)
    _refused(_park(gw, ALICE, "alice"), 429, "too_many_approvals")
    after = _executions(gw, ALICE)
    assert after == before  # nothing was parked, no execution was made
    assert len(_pending(gw, "alice")) == limit
    assert _park(gw, CAROL, "carol").status_code == 202  # carol has her own share
    # a decision gives the share back
    newest = max(_pending(gw, "alice"), key=lambda a: a["requested_at_ms"])
    with gw.client(BOB) as bob:
        assert bob.post(f"/v1/approvals/{newest['id']}/deny").status_code == 200
    assert _park(gw, ALICE, "alice").status_code == 202


# --- MCP sessions ----------------------------------------------------------------------------


def _initialize(gw: Gw, key: str) -> httpx.Response:
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "load-test", "version": "1"},
        },
    }
    with gw.client(key) as client:
        return client.post("/mcp", content=json.dumps(message), headers=MCP_HEADERS)


def test_mcp_sessions_are_bounded(gw: Gw) -> None:
    opened = _initialize(gw, ALICE)
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    _refused(_initialize(gw, ALICE), 429, "too_many_sessions")
    _refused(_initialize(gw, CAROL), 503, "overloaded")
    with gw.client(ALICE) as alice:
        closed = alice.delete("/mcp", headers={"mcp-session-id": session, **SESSION_HEADERS})
    assert closed.status_code == 200, closed.text
    theirs = _initialize(gw, CAROL)  # the slot is back once alice's session is gone
    assert theirs.status_code == 200, theirs.text
    with gw.client(CAROL) as carol:
        session = theirs.headers["mcp-session-id"]
        carol.delete("/mcp", headers={"mcp-session-id": session, **SESSION_HEADERS})


# --- sizes, on every door --------------------------------------------------------------------


def _chunks(size: int) -> Iterator[bytes]:
    for _ in range(size // 4096):
        yield b" " * 4096


DOORS = [
    ("/v1/executions", "application/json", 64 * 1024, "problem"),
    ("/mcp", "application/json", 64 * 1024, "problem"),
    ("/ui/signin", "application/x-www-form-urlencoded", 16 * 1024, "page"),
]


@pytest.mark.parametrize(("path", "ctype", "limit", "kind"), DOORS)
@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_body_over_the_bound_is_413_on_every_door(
    gw: Gw, path: str, ctype: str, limit: int, kind: str, framing: str
) -> None:
    headers = {"Content-Type": ctype, "Accept": "application/json, text/event-stream"}
    size = limit + 8192
    content: bytes | Iterator[bytes] = b" " * size if framing == "content-length" else _chunks(size)
    with gw.client(ALICE) as client:
        response = client.post(path, content=content, headers=headers)
    assert response.status_code == 413, response.text
    if kind == "problem":
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["code"] == "payload_too_large"
    else:
        assert "larger than" in response.text and response.headers["content-type"].startswith(
            "text/html"
        )


def test_headers_over_the_bound_are_431_and_far_over_it_the_server_closes(gw: Gw) -> None:
    with gw.client(ALICE) as client:
        response = client.get("/v1/tools", headers={"X-Pad": "a" * 3000})
        assert response.status_code == 431
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["code"] == "headers_too_large"
        assert client.get("/v1/tools", headers={"X-Pad": "a" * 1000}).status_code == 200
    try:
        huge = httpx.get(gw.url + "/v1/tools", headers={"X-Pad": "a" * 1024 * 1024}, timeout=30)
    except httpx.HTTPError:
        pass  # the server may close before it answers
    else:  # the HTTP server refused it before the gateway saw it: no problem+json
        assert huge.status_code in (400, 431), huge.text
        assert huge.headers.get("content-type") != "application/problem+json"
    assert httpx.get(gw.url + "/healthz", timeout=30).status_code == 200


def _raw(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    conn = socket.create_connection((host, int(port)), timeout=30)
    return conn


def _read_all(conn: socket.socket) -> bytes:
    chunks = []
    while chunk := conn.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_a_head_that_never_ends_is_refused_by_the_server_before_it_is_whole(gw: Gw) -> None:
    """One header value sent in pieces without its line end: the server answers 431 and
    closes once the head passes the bound (2 KiB + 8 KiB slack), without waiting for it to end,
    whichever HTTP parser runs (httptools buffers such a value whole if nothing stops it)."""
    answer, reset = b"", False
    with _raw(gw.url) as conn:
        conn.settimeout(10)  # a server still buffering the head would leave recv waiting: fail
        conn.sendall(b"GET /v1/tools HTTP/1.1\r\nHost: x\r\nX-Pad: ")
        try:
            for _ in range(64):  # 64 KiB at most, far past the bound
                conn.sendall(b"a" * 1024)
                time.sleep(0.005)
        except (BrokenPipeError, ConnectionResetError):
            reset = True  # the server closed the connection while we were still sending
        try:
            answer = _read_all(conn)
        except ConnectionResetError:
            reset = True  # a reset after the close may lose the refusal itself
    assert answer or reset, "the server neither answered nor closed the connection"
    if answer:
        status = answer.split(b"\r\n", 1)[0]
        assert status.split(b" ")[1] in (b"400", b"431"), answer[:200]
    assert httpx.get(gw.url + "/healthz", timeout=30).status_code == 200


def test_a_body_is_not_counted_as_head_and_keep_alive_goes_on(gw: Gw) -> None:
    """Only the head is bounded by the server: a 48 KiB body (under ``max_body_bytes``) on a
    kept-alive connection, then a second request on the same connection, both answered."""
    body = json.dumps({"pad": "a" * 48 * 1024}).encode()
    with _raw(gw.url) as conn:
        head = (
            b"POST /v1/plans HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            + ALICE.encode()
            + b"\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
        )
        second = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        conn.sendall(head + body + second)
        answer = _read_all(conn)
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", answer)
    assert len(statuses) == 2, answer[:400]
    assert statuses[0] == b"400" and b"problem+json" in answer, answer[:400]  # the app judged it
    assert statuses[1] == b"200"


def test_the_refusals_are_counted_by_the_setting_that_refused(gw: Gw) -> None:
    """Reads the refusals the floods above made on the module's gateway: it runs after them,
    as pytest runs a module, and on their worker under xdist (`make test`: --dist loadfile)."""
    with gw.client(BOB) as bob:
        text = bob.get("/metrics").text
    counts = {
        line.split('setting="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("toolgate_refusals_total{")
    }
    for setting in (
        "max_executions_per_principal",
        "max_executions_total",
        "max_queued_per_principal",
        "max_queued_total",
        "max_waiters_per_principal",
        "max_streams_total",
        "mcp.max_sessions_per_principal",
        "max_pending_approvals_per_principal",
    ):
        assert counts.get(setting, 0) >= 1, (setting, counts)
    assert counts["max_executions_per_principal"] >= 3  # alice's flood: three refused calls
