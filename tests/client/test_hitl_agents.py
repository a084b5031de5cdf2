"""The gateway's approvals as the OpenAI Agents SDK's own human-in-the-loop, driven by the
SDK's scripted model (no model) against a real gateway process: a call the gateway parks
interrupts the run, the approver decides it on the gateway with their own key, and the
resumed run answers the model the gateway's result."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.client import AsyncClient, CallOptions, Forbidden
from tests.helpers import ALICE, BOB, CAROL, require_module

pytestmark = pytest.mark.slow
Gw = tuple[str, Path]


def _outputs(result: Any) -> list[dict[str, Any]]:
    from agents.items import ToolCallOutputItem

    return [json.loads(i.output) for i in result.new_items if isinstance(i, ToolCallOutputItem)]


def test_agents_interruption_is_decided_on_the_gateway(gw: Gw) -> None:
    require_module("agents")
    from agents import Agent, RunConfig, Runner
    from agents.testing import ScriptedModel, assistant_message, function_call

    from gateway.client.agents import Approver, function_tools

    QUIET = RunConfig(tracing_disabled=True)
    url, workspace = gw
    kept, doomed = (workspace / f"hitl-{w}-{uuid.uuid4().hex[:6]}.txt" for w in ("kept", "doomed"))
    kept.write_text("keep")
    doomed.write_text("bye")

    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        options = CallOptions(agent_id="agents-hitl")
        async with (
            AsyncClient(url, CAROL, defaults=options) as tg,  # an agent, and an approver
            AsyncClient(url, BOB) as bob,
            AsyncClient(url, ALICE) as alice,
            AsyncClient(url, CAROL) as carol_again,
        ):
            tools = await function_tools(tg, approval="interrupt")
            with pytest.raises(ValueError, match="own key"):
                Approver(tg, carol_again)  # the agent's key never decides its calls

            async def turn(path: Path, call_id: str) -> tuple[Any, Any, Any]:
                model = ScriptedModel(
                    [
                        [function_call("fs__delete_file", {"path": path.name}, call_id=call_id)],
                        [assistant_message("done")],
                    ]
                )
                agent = Agent(name="coder", model=model, tools=tools)
                first = await Runner.run(agent, f"delete {path.name}", run_config=QUIET)
                return agent, first, model

            agent, first, _ = await turn(doomed, "tc-approve")
            [item] = first.interruptions
            seen["parked_exists"] = doomed.exists()
            state = first.to_state()
            with pytest.raises(Forbidden) as refused:  # alice may not decide
                await Approver(tg, alice).approve(state, item)
            seen["refused"] = refused.value.code
            seen["asked"] = await Approver(tg, bob).approval(item)
            seen["approved"] = await Approver(tg, bob).approve(state, item, "ok")
            resumed = await Runner.run(agent, state, run_config=QUIET)
            seen["approve"] = (_outputs(resumed), resumed.final_output)

            agent, first, _ = await turn(kept, "tc-reject")
            [item] = first.interruptions
            state = first.to_state()
            seen["denied"] = await Approver(tg, bob).reject(state, item, "keep it")
            resumed = await Runner.run(agent, state, run_config=QUIET)
            seen["reject"] = (_outputs(resumed), resumed.final_output)
        return seen

    seen = anyio.run(main)
    assert seen["parked_exists"], "nothing runs before the approver decides"
    assert seen["refused"] == "not_an_approver"
    assert seen["asked"]["arguments"] == {"path": doomed.name}
    assert seen["approved"]["status"] == "approved" and seen["approved"]["decided_by"] == "bob"
    [ran], final = seen["approve"]
    assert ran["outcome"] == "succeeded" and final == "done", seen["approve"]
    assert not doomed.exists()
    assert seen["denied"]["status"] == "denied"
    [denied], final = seen["reject"]
    assert denied["outcome"] == "failed" and denied["error"]["type"] == "approval_denied", denied
    assert "keep it" in denied["error"]["message"]
    assert kept.read_text() == "keep"
