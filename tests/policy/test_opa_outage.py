"""The gateway on policy_backend: opa when OPA gives no decision, through its ASGI app (REST
and MCP doors, SQLite, the loopback OPA stand-in over real HTTP): a retryable refusal
(``policy_unavailable``) that runs nothing, records no execution and shows no internals;
``/readyz`` not ready while OPA does not answer; the refusals counted; and a redirecting OPA
(or proxy in front of it) refused without the policy input ever leaving for its target."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gateway.policy import bundle
from gateway.policy.loader import PolicySources, load_policy_sources
from gateway.server.app import create_app
from gateway.settings import load_settings
from gateway.testing import free_port, make_project
from tests.helpers import ALICE
from tests.policy.opa_helpers import Misbehaving, Recording, Redirecting, standin

MODERN = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}
AUTH = {"Authorization": f"Bearer {ALICE}"}
MCP_HEADERS = {
    **AUTH,
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": MODERN,
}
INTERNALS = ("127.0.0.1", "Cannot connect", "Connect call failed", "HTTP 500", "Internal Server")


class Flaky(Misbehaving):
    """The stand-in OPA, made to answer one fixed way (``reply``) when the test says."""


def project(tmp_path: Path, opa_url: str) -> tuple[Path, PolicySources]:
    config = make_project(tmp_path, f"sqlite:///{tmp_path / 'toolgate.db'}")
    settings = yaml.safe_load(config.read_text())
    settings.update(policy_backend="opa", opa_url=opa_url, opa_timeout=2.0)
    config.write_text(yaml.safe_dump(settings))
    (tmp_path / "var/workspaces/demo").mkdir(parents=True, exist_ok=True)
    return config, load_policy_sources(tmp_path / "rego", tmp_path / "policies")


@asynccontextmanager
async def app_client(config: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(load_settings(config))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080") as c:
            yield c


async def write(c: httpx.AsyncClient, name: str) -> httpx.Response:
    return await c.post(
        "/v1/executions",
        json={
            "run_id": "outage",
            "call_id": name,
            "tool": {"name": "fs.write_file"},
            "arguments": {"path": f"notes/{name}.txt", "content": name},
            "workspace": {"id": "demo"},
        },
        headers=AUTH,
    )


async def mcp(c: httpx.AsyncClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
    headers = {**MCP_HEADERS, "Mcp-Method": method}
    if method == "tools/call":
        headers["Mcp-Name"] = params["name"]
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    answer = await c.post("/mcp", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    text = answer.text
    if not text.lstrip().startswith("{"):
        text = [line[5:] for line in text.splitlines() if line.startswith("data:")][-1]
    message: dict[str, Any] = json.loads(text)
    return message


async def mcp_write(c: httpx.AsyncClient, name: str) -> dict[str, Any]:
    params = {
        "name": "fs.write_file",
        "arguments": {"path": f"notes/{name}.txt", "content": name},
        "_meta": {**ENVELOPE, "io.toolgate/run_id": "outage", "io.toolgate/call_id": name},
    }
    return (await mcp(c, "tools/call", params))["result"]


async def mcp_list(c: httpx.AsyncClient) -> list[str]:
    listed = await mcp(c, "tools/list", {"_meta": ENVELOPE})
    return [tool["name"] for tool in listed["result"]["tools"]]


async def readiness(c: httpx.AsyncClient, status: int) -> dict[str, Any]:
    """``/readyz``'s body once it answers ``status`` (polled: the backend learns in a second)."""
    deadline = time.monotonic() + 15
    while True:
        answer = await c.get("/readyz")
        if answer.status_code == status:
            body: dict[str, Any] = answer.json()
            return body
        assert time.monotonic() < deadline, answer.text
        await asyncio.sleep(0.05)


async def executions_of(c: httpx.AsyncClient, call_id: str) -> list[Any]:
    found = await c.get(
        "/v1/executions", params={"run_id": "outage", "call_id": call_id}, headers=AUTH
    )
    assert found.status_code == 200, found.text
    items: list[Any] = found.json()["items"]
    return items


def refusals(metrics: str, cause: str) -> float:
    pattern = rf'^toolgate_policy_unavailable_total{{backend="opa",cause="{cause}"}} (\S+)$'
    found = re.search(pattern, metrics, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def refused(c: httpx.AsyncClient, workspace: Path, name: str) -> None:
    """A REST write and an MCP write, each refused as policy_unavailable: nothing ran,
    nothing recorded, a retry invited, no internals."""
    answer = await write(c, name)
    assert answer.status_code == 503, answer.text
    assert answer.headers["Retry-After"] == "1"
    problem = answer.json()
    assert (problem["code"], problem["retryable"]) == ("policy_unavailable", True), problem
    assert "retry" in problem["detail"]
    assert not any(word in answer.text for word in INTERNALS), answer.text
    assert await executions_of(c, name) == []

    result = await mcp_write(c, f"{name}-mcp")
    assert result["isError"] is True, result
    error = result["_meta"]["io.toolgate/error"]
    assert (error["type"], error["retryable"]) == ("policy_unavailable", True), result
    assert "a retry may pass" in result["content"][0]["text"], result
    assert not any(word in json.dumps(result) for word in INTERNALS), result
    assert await executions_of(c, f"{name}-mcp") == []
    for written in (name, f"{name}-mcp"):
        assert not (workspace / f"notes/{written}.txt").exists()


def test_an_opa_outage_is_a_retryable_refusal_and_readyz_follows_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    config, sources = project(tmp_path, f"http://127.0.0.1:{port}")
    workspace = tmp_path / "var/workspaces/demo"
    built = bundle.build(sources)

    async def main(server: Flaky) -> Flaky:
        async with app_client(config) as c:
            ready = await readiness(c, 200)
            assert (ready["status"], ready["policy_backend"]) == ("ready", "ok"), ready
            before = await write(c, "before")
            assert before.json()["result"]["outcome"] == "succeeded", before.text

            Flaky.reply = (500, "application/json", b'{"code": "internal_error"}')
            await refused(c, workspace, "answers-500")
            Flaky.reply = None

            server.stop()  # a closed port
            await refused(c, workspace, "down")
            down = await readiness(c, 503)
            assert (down["status"], down["policy_backend"]) == ("not_ready", "unavailable")
            assert down["store"] == "ok"

            server = Flaky.from_bundle(built.data, port=port).start()  # OPA returns
            await readiness(c, 200)
            again = await write(c, "again")
            assert again.json()["result"]["outcome"] == "succeeded", again.text

            metrics = (await c.get("/metrics", headers=AUTH)).text
            assert refusals(metrics, "status") == 2, metrics  # a REST call, an MCP call
            assert refusals(metrics, "connection") == 2, metrics
        return server

    server = Flaky.from_bundle(built.data, port=port).start()
    try:
        server = asyncio.run(main(server))
    finally:
        Flaky.reply = None
        server.stop()
    # what the agent was not told, the log says
    assert f"cannot reach OPA at http://127.0.0.1:{port}" in caplog.text
    assert "OPA answered HTTP 500" in caplog.text


@pytest.mark.parametrize("status", [302, 307, 308])
def test_a_redirecting_opa_is_refused_and_its_target_receives_nothing(
    tmp_path: Path, shipped: PolicySources, status: int
) -> None:
    """OPA, or a proxy in front of it, answering ``status`` with ``Location`` on another
    origin which would allow every call: the write is refused, tools/list lists none of the
    catalogue, the gateway is not ready, and the other origin receives no request at all."""

    class ToOther(Redirecting):
        pass

    async def main(config: Path) -> tuple[httpx.Response, list[str], int]:
        async with app_client(config) as c:
            answer = await write(c, "redirected")
            listed = await mcp_list(c)
            ready = await c.get("/readyz")
            return answer, listed, ready.status_code

    with standin(shipped, Recording) as other, standin(shipped, ToOther) as redirecting:
        ToOther.status, ToOther.to = status, other.url
        config, _ = project(tmp_path, redirecting.url)
        answer, listed, ready = asyncio.run(main(config))
        assert other.seen == []
    assert answer.status_code == 503, answer.text
    assert answer.json()["code"] == "policy_unavailable"
    assert not (tmp_path / "var/workspaces/demo/notes/redirected.txt").exists()
    assert listed == ["toolgate.execution_status"]  # fail closed: none of the catalogue
    assert ready == 503
