"""The same question through every door gets the same answer.

One real gateway process (the shipped project on SQLite) is asked each question through
REST, MCP in both protocol eras (the official SDK client), the CLI's remote commands, the
kit (the plain client, the OpenAI Agents SDK adapter, the LangChain adapter) and the page,
wherever the door can ask it. What is compared is the answer's meaning: the tool set, whether
an execution is visible, the approval's id and page, one call per invocation, an error code.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from gateway.client import AsyncClient, CallOptions, Client
from gateway.client.errors import ApiError
from gateway.client.toolkit import answer, catalogue, with_call_id
from gateway.testing import gateway, make_project
from tests.helpers import ALICE, BOB, require_module
from tests.mcp.helpers import ERAS, connect

pytestmark = pytest.mark.slow

STATUS_TOOL = "toolgate.execution_status"


class Gw:
    def __init__(self, url: str, root: Path) -> None:
        self.url, self.root = url, root
        self.config = root / "toolgate.yaml"
        self.workspace = root / "var" / "workspaces" / "demo"

    def rest(self, key: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {key}"})

    def cli(self, key: str, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "TOOLGATE_API_KEY": key}
        return subprocess.run(
            [str(Path(sys.executable).parent / "toolgate"), *args, "--url", self.url],
            capture_output=True,
            text=True,
            env=env,
            cwd=self.root,
            timeout=60,
            check=False,
        )


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gw]:
    root = tmp_path_factory.mktemp("parity")
    config = make_project(root, f"sqlite:///{root}/toolgate.db")
    with gateway(config) as url:
        yield Gw(url, root)


def mcp(gw: Gw, era: str, key: str, name: str, arguments: dict[str, Any], **meta: Any) -> Any:
    """One ``tools/call`` through the SDK client; its result."""

    async def main() -> Any:
        async with connect(gw.url, era, key) as client:
            return await client.call_tool(name, arguments, meta=meta or None)

    return anyio.run(main)


def mcp_tools(gw: Gw, era: str, key: str) -> set[str]:
    async def main() -> set[str]:
        async with connect(gw.url, era, key) as client:
            listed = await client.list_tools()
        return {t.name for t in listed.tools} - {STATUS_TOOL}

    return anyio.run(main)


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error and result.structured_content, result
    return dict(result.structured_content)


def error_code(result: Any) -> str:
    """An MCP error result's code (a failed execution's error ``type``, or a refusal's)."""
    assert result.is_error, result
    error = (result.meta or {})["io.toolgate/error"]
    return str(error.get("type") or error.get("code"))


@contextmanager
def page_session(gw: Gw, key: str) -> Iterator[httpx.Client]:
    """An httpx client signed in to the page (the sign-in form, with its CSRF token)."""
    with httpx.Client(base_url=gw.url, follow_redirects=False) as client:
        form = client.get("/ui/signin").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', form)
        assert csrf, form
        signed = client.post("/ui/signin", data={"api_key": key, "csrf": csrf.group(1)})
        assert signed.status_code == 303, signed.text
        yield client


# -- the tool set listed under a standing refusal ----------------------------------------------


def test_every_door_lists_the_same_tools_under_a_standing_refusal(gw: Gw) -> None:
    # bob's only role is `approver`: a standing refusal hides the high-risk tools from him
    with gw.rest(BOB) as rest:
        plain = {t["name"] for t in rest.get("/v1/tools").json()["items"]}
        formats = {
            fmt: set(rest.get(f"/v1/tools?format={fmt}").json()["names"].values())
            for fmt in ("llm", "openai", "anthropic", "mcp")
        }
    assert "fs.read_file" in plain and "proc.python" not in plain and "fs.write_file" not in plain
    assert all(names == plain for names in formats.values()), formats
    for era in ERAS:
        assert mcp_tools(gw, era, BOB) == plain, era
    with Client(gw.url, BOB) as client:
        assert {spec.name for spec in catalogue(client)} == plain

    require_module("agents")
    require_module("langchain_core")
    from gateway.client.agents import function_tools
    from gateway.client.langchain import structured_tools

    async def agents_tools() -> set[str]:
        async with AsyncClient(gw.url, BOB) as client:
            return {t.name for t in await function_tools(client)}

    with Client(gw.url, BOB) as client:
        langchain = {t.name for t in structured_tools(client)}
    llm_names = {name.replace(".", "__") for name in plain}
    assert anyio.run(agents_tools) == llm_names
    assert langchain == llm_names


# -- whether another principal's execution is visible ------------------------------------------


def _write(gw: Gw, key: str) -> str:
    with gw.rest(key) as rest:
        done = rest.post(
            "/v1/executions",
            json={
                "run_id": "parity",
                "call_id": f"w-{uuid.uuid4().hex[:8]}",
                "tool": {"name": "fs.list_dir"},
                "arguments": {"path": "."},
                "actor": {"agent_id": "parity"},
                "workspace": {"id": "demo"},
            },
        )
    assert done.status_code == 200, done.text
    return str(done.json()["id"])


def visible_through_every_door(gw: Gw, key: str, execution_id: str) -> dict[str, bool]:
    seen: dict[str, bool] = {}
    with gw.rest(key) as rest:
        seen["rest"] = rest.get(f"/v1/executions/{execution_id}").status_code == 200
    for era in ERAS:
        result = mcp(gw, era, key, STATUS_TOOL, {"execution_id": execution_id})
        seen[f"mcp {era}"] = not result.is_error
    seen["cli"] = gw.cli(key, "executions", "show", execution_id).returncode == 0
    with Client(gw.url, key) as client:
        try:
            seen["kit"] = client.get(execution_id).id == execution_id
        except ApiError as exc:
            assert exc.code == "not_found", exc
            seen["kit"] = False
    with page_session(gw, key) as page:
        seen["page"] = page.get(f"/ui/executions/{execution_id}").status_code == 200
    return seen


def test_every_door_shows_an_execution_to_the_same_principals(gw: Gw) -> None:
    alices = _write(gw, ALICE)
    bobs = _write(gw, BOB)
    # an approver sees every execution; an agent only its own
    for key, execution_id, expected in ((BOB, alices, True), (ALICE, bobs, False)):
        seen = visible_through_every_door(gw, key, execution_id)
        assert set(seen.values()) == {expected}, seen
    assert set(visible_through_every_door(gw, ALICE, alices).values()) == {True}


# -- the approval's id and page in every answer about a parked call ----------------------------


def _doomed(gw: Gw) -> str:
    name = f"doomed-{uuid.uuid4().hex[:8]}.txt"
    (gw.workspace / name).write_text("bye")
    return name


def _delete_body(run_id: str, call_id: str, key: str, path: str) -> dict[str, Any]:
    """A REST request to delete ``path`` (fs.delete_file: it takes a key, and waits for an
    approver)."""
    return {
        "run_id": run_id,
        "call_id": call_id,
        "tool": {"name": "fs.delete_file"},
        "arguments": {"path": path},
        "actor": {"agent_id": "parity"},
        "workspace": {"id": "demo"},
        "idempotency_key": key,
    }


def test_every_answer_about_a_parked_call_names_its_approval_and_page(gw: Gw) -> None:
    pages: dict[str, tuple[str, str]] = {}

    def page_of(approval_id: str, page: str) -> tuple[str, str]:
        assert page.endswith(f"/ui/approvals/{approval_id}"), page
        return approval_id, f"/ui/approvals/{approval_id}"

    call_id = f"p-{uuid.uuid4().hex[:8]}"
    body = _delete_body("parity", call_id, call_id, _doomed(gw))
    with gw.rest(ALICE) as rest:
        parked = rest.post("/v1/executions", json=body).json()
        execution_id = parked["id"]
        by_id = rest.get(f"/v1/executions/{execution_id}").json()
        found = rest.get(f"/v1/executions?run_id=parity&call_id={call_id}").json()["items"][0]
    for door, shown in (("rest post", parked), ("rest get", by_id), ("rest find", found)):
        pages[door] = page_of(shown["approval"]["id"], shown["approval"]["page"])
    approval_id = pages["rest post"][0]
    for era in ERAS:
        status = structured(mcp(gw, era, ALICE, STATUS_TOOL, {"execution_id": execution_id}))
        pages[f"mcp status {era}"] = page_of(status["approval"]["id"], status["approval"]["page"])
        again = structured(
            mcp(
                gw,
                era,
                ALICE,
                "fs.delete_file",
                body["arguments"],
                **{
                    "io.toolgate/run_id": "parity",
                    "io.toolgate/call_id": call_id,
                    "io.toolgate/idempotency_key": call_id,
                    "io.toolgate/agent_id": "parity",
                },
            )
        )
        pages[f"mcp call {era}"] = page_of(again["approval"]["id"], again["approval"]["page"])
    shown = gw.cli(ALICE, "executions", "show", execution_id)
    assert shown.returncode == 0, shown.stderr
    cli = json.loads(shown.stdout)["approval"]
    pages["cli"] = page_of(cli["id"], cli["page"])
    with Client(gw.url, ALICE) as client:
        kit = answer(client.get(execution_id))
    pages["kit"] = page_of(kit["approval_id"], kit["approval_page"])
    assert set(pages.values()) == {(approval_id, f"/ui/approvals/{approval_id}")}, pages


# -- a parked call's approval found by its run and call -----------------------------------------


def test_every_door_finds_a_parked_call_s_approval_by_its_run_and_call(gw: Gw) -> None:
    # an agent whose framework was interrupted knows its run and call ids, not the approval's
    call_id = f"h-{uuid.uuid4().hex[:8]}"
    body = _delete_body("parity-h", call_id, call_id, _doomed(gw))
    with gw.rest(ALICE) as rest:
        parked = rest.post("/v1/executions", json=body).json()
    expected = {(parked["approval"]["id"], "parity-h", call_id)}
    found: dict[str, set[tuple[str, str, str]]] = {}

    def named(items: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
        return {(a["id"], a["run_id"], a["call_id"]) for a in items}

    for who, key in (("requester", ALICE), ("approver", BOB)):
        with gw.rest(key) as rest:
            listed = rest.get("/v1/approvals", params={"run_id": "parity-h", "call_id": call_id})
        found[f"rest {who}"] = named(listed.json()["items"])
        cli = gw.cli(
            key, "approvals", "list", "--json", "--run-id", "parity-h", "--call-id", call_id
        )
        assert cli.returncode == 0, cli.stderr
        found[f"cli {who}"] = named(json.loads(cli.stdout)["items"])
        with Client(gw.url, key) as client:
            found[f"kit {who}"] = named(client.approvals(run_id="parity-h", call_id=call_id))
    assert all(ids == expected for ids in found.values()), found


# -- per-call idempotency of a keyed tool ------------------------------------------------------


def test_a_keyed_tool_is_one_call_per_call_through_every_door(gw: Gw) -> None:
    # fs.delete_file requires an idempotency key: REST sends its own; MCP (both eras) and the
    # kit derive it from the call's run and call ids. Through each, the same call sent again
    # is the same keyed call and another call is another
    seen: dict[str, tuple[bool, bool, str]] = {}

    def outcome(first: str, again: str, other: str, status: str) -> tuple[bool, bool, str]:
        return first == again, other not in (first, again), status

    def rest_call(call_id: str, path: str) -> dict[str, Any]:
        body = _delete_body("parity-k", call_id, f"parity-k/{call_id}", path)
        with gw.rest(ALICE) as rest:
            return dict(rest.post("/v1/executions", json=body).json())

    path = _doomed(gw)
    first, again = (rest_call("k-rest", path) for _ in range(2))
    other = rest_call("k-rest-2", _doomed(gw))
    seen["rest"] = outcome(first["id"], again["id"], other["id"], first["status"])
    for era in ERAS:

        def mcp_call(call_id: str, path: str, era: str = era) -> dict[str, Any]:
            named = {"io.toolgate/run_id": "parity-k", "io.toolgate/call_id": call_id}
            return structured(mcp(gw, era, ALICE, "fs.delete_file", {"path": path}, **named))

        path = _doomed(gw)
        first, again = (mcp_call(f"k-{era}", path) for _ in range(2))
        other = mcp_call(f"k-{era}-2", _doomed(gw))
        ids = (first["execution_id"], again["execution_id"], other["execution_id"])
        seen[f"mcp {era}"] = outcome(*ids, first["status"])
    with Client(gw.url, ALICE) as client:

        def kit_call(call_id: str, path: str) -> Any:
            options = with_call_id(CallOptions(run_id="parity-k"), call_id)
            return client.execute("fs.delete_file", {"path": path}, options)

        path = _doomed(gw)
        first, again = (kit_call("k-kit", path) for _ in range(2))
        other = kit_call("k-kit-2", _doomed(gw))
        seen["kit"] = outcome(first.id, again.id, other.id, first.status)
    assert set(seen.values()) == {(True, True, "awaiting_approval")}, seen


# -- per-call idempotency ----------------------------------------------------------------------


def test_a_call_named_by_long_ids_is_keyed_alike_by_mcp_and_the_kit(gw: Gw) -> None:
    # <run_id>/<call_id> past the 256 characters of a key: both doors derive its digest with
    # one function (gateway/client/keys.py), so the call sent through one and then the
    # other is one keyed call
    run_id = f"parity-long-{uuid.uuid4().hex}".ljust(256, "r")
    call_id = f"call_{uuid.uuid4().hex}"
    path = _doomed(gw)
    ids = {}
    for era in ERAS:
        named = {"io.toolgate/run_id": run_id, "io.toolgate/call_id": call_id}
        named["io.toolgate/agent_id"] = "parity"  # the same request through every door
        sent = structured(mcp(gw, era, ALICE, "fs.delete_file", {"path": path}, **named))
        ids[f"mcp {era}"] = sent["execution_id"]
    with Client(gw.url, ALICE) as client:
        options = with_call_id(CallOptions(run_id=run_id, agent_id="parity"), call_id)
        ids["kit"] = client.execute("fs.delete_file", {"path": path}, options).id
    assert len(set(ids.values())) == 1, ids


def test_each_invocation_is_its_own_call_and_a_retried_one_the_same(gw: Gw) -> None:
    # fs.delete_file requires an idempotency key: each door gives each invocation its own,
    # and the same invocation sent again (the same tool call / call id) is the same call
    executions: dict[str, tuple[str, str, str]] = {}
    for era in ERAS:  # an MCP client names each call's key in _meta (docs/mcp.md)
        first, second = (
            structured(
                mcp(
                    gw,
                    era,
                    ALICE,
                    "fs.delete_file",
                    {"path": _doomed(gw)},
                    **{"io.toolgate/idempotency_key": uuid.uuid4().hex},
                )
            )
            for _ in range(2)
        )
        meta = {
            "io.toolgate/run_id": "parity-i",
            "io.toolgate/call_id": f"i-{era}",
            "io.toolgate/idempotency_key": f"i-{era}",
        }
        arguments = {"path": _doomed(gw)}
        retried = [
            structured(mcp(gw, era, ALICE, "fs.delete_file", arguments, **meta)) for _ in range(2)
        ]
        assert retried[0]["execution_id"] == retried[1]["execution_id"], era
        executions[f"mcp {era}"] = (
            first["execution_id"],
            second["execution_id"],
            retried[0]["execution_id"],
        )

    require_module("agents")
    require_module("langchain_core")
    from agents.tool_context import ToolContext

    from gateway.client.agents import function_tools
    from gateway.client.langchain import structured_tools

    async def agents() -> tuple[str, str, str]:
        async with AsyncClient(gw.url, ALICE, defaults=CallOptions(run_id="parity-a")) as c:
            delete = {t.name: t for t in await function_tools(c)}["fs__delete_file"]
            ids = []
            retried = json.dumps({"path": _doomed(gw)})
            for call_id in ("a-1", "a-2", "a-3", "a-3"):
                raw = retried if call_id == "a-3" else json.dumps({"path": _doomed(gw)})
                ctx = ToolContext(
                    None, tool_name=delete.name, tool_call_id=call_id, tool_arguments=raw
                )
                ids.append(json.loads(await delete.on_invoke_tool(ctx, raw))["execution_id"])
        assert ids[2] == ids[3]
        return ids[0], ids[1], ids[2]

    executions["agents"] = anyio.run(agents)
    with Client(gw.url, ALICE, defaults=CallOptions(run_id="parity-l")) as client:
        delete = {t.name: t for t in structured_tools(client)}["fs__delete_file"]
        bare = [json.loads(delete.invoke({"path": _doomed(gw)}))["execution_id"] for _ in range(2)]
        call = {
            "type": "tool_call",
            "id": "l-1",
            "name": delete.name,
            "args": {"path": _doomed(gw)},
        }
        retried = [json.loads(delete.invoke(call).content)["execution_id"] for _ in range(2)]
    assert retried[0] == retried[1]
    executions["langchain"] = (bare[0], bare[1], retried[0])
    for door, ids in executions.items():
        assert len(set(ids)) == 3, (door, ids)


# -- the error code for the same fault ---------------------------------------------------------


def test_every_door_names_a_fault_with_the_same_code(gw: Gw) -> None:
    codes: dict[str, str] = {}
    body = {
        "run_id": "parity",
        "call_id": f"e-{uuid.uuid4().hex[:8]}",
        "tool": {"name": "fs.nonexistent"},
        "arguments": {},
        "actor": {"agent_id": "parity"},
        "workspace": {"id": "demo"},
    }
    with gw.rest(ALICE) as rest:
        codes["rest"] = rest.post("/v1/executions", json=body).json()["result"]["error"]["type"]
    for era in ERAS:
        codes[f"mcp {era}"] = error_code(mcp(gw, era, ALICE, "fs.nonexistent", {}))
    failed = gw.cli(ALICE, "call", "fs.nonexistent")
    assert failed.returncode == 1, failed.stderr
    codes["cli"] = json.loads(failed.stdout)["result"]["error"]["type"]
    with Client(gw.url, ALICE) as client:
        execution = client.execute("fs.nonexistent", {})
    assert execution.error is not None
    codes["kit"] = execution.error["type"]
    assert set(codes.values()) == {"tool_not_found"}, codes
