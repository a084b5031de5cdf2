"""The catalogue as framework tools, invoked directly with JSON arguments (no model), each
invocation reaching a real gateway process."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import anyio

from gateway.client import AsyncClient, CallOptions, Client
from tests.helpers import ALICE, require_module

Gw = tuple[str, Path]


def test_agents_function_tools_run_through_the_gateway(gw: Gw) -> None:
    require_module("agents")
    from agents import FunctionTool
    from agents.tool_context import ToolContext

    from gateway.client.agents import function_tools

    url, workspace = gw
    path = f"agents-{uuid.uuid4().hex[:6]}.txt"
    doomed = workspace / f"agents-doomed-{uuid.uuid4().hex[:6]}.txt"
    doomed.write_text("bye")

    async def main() -> tuple[str, str, str, bool, bool]:
        async with AsyncClient(url, ALICE, defaults=CallOptions(agent_id="agents-test")) as client:
            tools = {t.name: t for t in await function_tools(client, approval="plan")}
            write, delete = tools["fs__write_file"], tools["fs__delete_file"]
            assert isinstance(write, FunctionTool) and write.params_json_schema["properties"]
            raw = json.dumps({"path": path, "content": "from agents"})
            ctx = ToolContext(None, tool_name=write.name, tool_call_id="tc-1", tool_arguments=raw)
            first = await write.on_invoke_tool(ctx, raw)
            again = await write.on_invoke_tool(ctx, raw)  # the same tool call: the same call
            bad_raw = json.dumps({"path": path})
            other = ToolContext(
                None, tool_name=write.name, tool_call_id="tc-bad", tool_arguments=bad_raw
            )
            bad = await write.on_invoke_tool(other, bad_raw)
            assert callable(write.needs_approval) and callable(delete.needs_approval)
            write_asks = await write.needs_approval(ctx, {"path": path, "content": "x"}, "tc-2")
            delete_asks = await delete.needs_approval(ctx, {"path": doomed.name}, "tc-3")
            return first, again, bad, write_asks, delete_asks

    first, again, bad, write_asks, delete_asks = anyio.run(main)
    ran = json.loads(first)
    assert ran["outcome"] == "succeeded" and ran["data"]["path"] == path, ran
    assert json.loads(again)["execution_id"] == ran["execution_id"]
    assert (workspace / path).read_text() == "from agents"
    invalid = json.loads(bad)
    assert invalid["outcome"] == "failed" and invalid["error"]["type"] == "invalid_arguments"
    assert (write_asks, delete_asks) == (False, True)  # the gateway's policy, via a plan
    assert doomed.exists()


def test_langchain_structured_tools_run_through_the_gateway(gw: Gw) -> None:
    require_module("langchain_core")
    from langchain_core.tools import StructuredTool

    from gateway.client.langchain import structured_tools

    url, workspace = gw
    path = f"lc-{uuid.uuid4().hex[:6]}.txt"
    with Client(url, ALICE) as client:
        tools = {t.name: t for t in structured_tools(client)}
        write = tools["fs__write_file"]
        assert isinstance(write, StructuredTool)
        out = json.loads(write.invoke({"path": path, "content": "from langchain"}))
        invalid = json.loads(write.invoke({"path": path, "content": 7}))
        denied = json.loads(write.invoke({"path": ".git/config", "content": "x"}))
    assert out["outcome"] == "succeeded" and out["data"]["path"] == path, out
    assert (workspace / path).read_text() == "from langchain"
    assert invalid["outcome"] == "failed" and invalid["error"]["type"] == "invalid_arguments"
    assert denied["outcome"] == "failed" and denied["error"]["phase"] == "policy"

    async def main() -> str:
        async with AsyncClient(url, ALICE) as aclient:
            with Client(url, ALICE) as client:
                tool = {t.name: t for t in structured_tools(client, async_client=aclient)}
                return str(await tool["fs__read_file"].ainvoke({"path": path}))

    read = json.loads(anyio.run(main))
    assert read["outcome"] == "succeeded" and read["data"]["content"] == "from langchain"


def test_langchain_tools_give_each_invocation_its_own_call_and_key(gw: Gw) -> None:
    # fs.delete_file requires an idempotency key: one fixed set of options for every
    # invocation gave `idempotency_key_required` (no key) or would reuse one key
    require_module("langchain_core")
    from gateway.client.langchain import structured_tools

    _, workspace = gw
    names = [f"lc-doomed-{uuid.uuid4().hex[:6]}.txt" for _ in range(2)]
    for name in names:
        (workspace / name).write_text("bye")
    url, _ = gw
    with Client(url, ALICE) as client:
        delete = {t.name: t for t in structured_tools(client)}["fs__delete_file"]
        first, second = (json.loads(delete.invoke({"path": name})) for name in names)
        call = {"type": "tool_call", "id": "lc-tc-1", "name": delete.name, "args": {}}
        call["args"] = {"path": names[0]}
        by_tool_call = delete.invoke(call)  # a ToolMessage, whose content is the answer
        again = delete.invoke(call)  # the same tool call: the same call
    assert first["status"] == second["status"] == "awaiting_approval", (first, second)
    assert first["approval_id"] and second["approval_id"] != first["approval_id"]
    parked = json.loads(by_tool_call.content)
    assert parked["status"] == "awaiting_approval", parked
    assert json.loads(again.content)["execution_id"] == parked["execution_id"]
    assert parked["execution_id"] not in (first["execution_id"], second["execution_id"])
    assert all((workspace / name).exists() for name in names)  # nothing ran unapproved
