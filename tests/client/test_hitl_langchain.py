"""The gateway's approvals as LangChain's human-in-the-loop, driven by LangChain's fake chat
model in a ``create_agent`` graph (no model) against a real gateway process: a call the
gateway parks is an interrupt in the shape of ``HumanInTheLoopMiddleware``, and each
decision (approve, edit, reject) is made on the gateway by the approver's own key."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.client import AsyncClient, Client, Forbidden
from gateway.testing import gateway, make_project
from tests.helpers import ALICE, BOB, CAROL, REVIEWED_TOOL, require_module

pytestmark = pytest.mark.slow
Gw = tuple[str, Path]


@pytest.fixture(scope="module")
def reviewed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gw]:
    """A gateway whose catalogue has ``fs.write_reviewed`` (path and content editable)."""
    root = tmp_path_factory.mktemp("hitl")
    config = make_project(root, f"sqlite:///{root}/toolgate.db")
    (root / "tools.d" / "fs.write_reviewed.yaml").write_text(REVIEWED_TOOL)
    with gateway(config) as url:
        yield url, root / "var" / "workspaces" / "demo"


def _agent(
    client: Client, approver: Client, *calls: dict[str, Any], async_client: Any = None
) -> Any:
    require_module("langchain")
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from gateway.client.langchain import structured_tools

    class ScriptedChat(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self  # the script names the tools; nothing to bind

    script = [AIMessage(content="", tool_calls=[call]) for call in calls]
    model = ScriptedChat(messages=iter([*script, AIMessage(content="done")]))
    tools = structured_tools(client, approver=approver, async_client=async_client)
    return create_agent(model, tools=tools, checkpointer=InMemorySaver())


def _call(path: str, content: str) -> dict[str, Any]:
    args = {"path": path, "content": content}
    return {"name": "fs__write_reviewed", "args": args, "id": f"lc-{uuid.uuid4().hex[:8]}"}


def _tool_answers(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(m.content) for m in state["messages"] if m.type == "tool"]


def test_langchain_interrupt_is_decided_on_the_gateway(reviewed: Gw) -> None:
    require_module("langchain")
    from langgraph.types import Command

    url, workspace = reviewed
    approved, drafted, edited, rejected = (f"lc-{w}-{uuid.uuid4().hex[:6]}.txt" for w in "ader")
    with Client(url, ALICE) as tg, Client(url, BOB) as bob:
        with pytest.raises(ValueError, match="own key"):
            _agent(tg, Client(url, ALICE), _call(approved, "x"))
        agent = _agent(tg, bob, _call(approved, "as asked"), _call(drafted, "draft"))
        agent_config: Any = {"configurable": {"thread_id": uuid.uuid4().hex}}
        start = {"messages": [{"role": "user", "content": "write two files"}]}

        first = agent.invoke(start, agent_config)
        [asked] = first["__interrupt__"]
        request = asked.value
        assert not (workspace / approved).exists(), "nothing runs before the approver decides"
        assert request["action_requests"][0]["name"] == "fs__write_reviewed"
        assert request["action_requests"][0]["args"]["path"] == approved
        assert "(approval ap_" in request["action_requests"][0]["description"]
        assert ": /ui/approvals/ap_" in request["action_requests"][0]["description"]
        assert request["review_configs"][0]["allowed_decisions"] == ["approve", "edit", "reject"]

        second = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), agent_config)
        assert (workspace / approved).read_text() == "as asked"
        [again] = second["__interrupt__"]  # the model's next call, parked in its turn
        assert again.value["action_requests"][0]["args"]["path"] == drafted

        not_editable = {"name": "fs__write_reviewed", "args": {"create_dirs": False}}
        bad = {"decisions": [{"type": "edit", "edited_action": not_editable}]}
        third = agent.invoke(Command(resume=bad), agent_config)
        [asked_again] = third["__interrupt__"]  # refused: nothing decided, asked again
        assert "refused" in asked_again.value["action_requests"][0]["description"]
        assert asked_again.value["action_requests"][0]["args"]["path"] == drafted

        edit = {"name": "fs__write_reviewed", "args": {"path": edited, "content": "reviewed"}}
        resume = {"decisions": [{"type": "edit", "edited_action": edit}]}
        done = agent.invoke(Command(resume=resume), agent_config)
        assert "__interrupt__" not in done and done["messages"][-1].content == "done"
        first_answer, edited_answer = _tool_answers(done)
        assert first_answer["outcome"] == "succeeded", first_answer
        assert edited_answer["outcome"] == "succeeded" and edited_answer["data"]["path"] == edited
        assert (workspace / edited).read_text() == "reviewed" and not (workspace / drafted).exists()
        events = [e["type"] for e in tg.events(edited_answer["execution_id"])]
        assert "approval.edited" in events

        agent = _agent(tg, bob, _call(rejected, "no"))
        agent_config = {"configurable": {"thread_id": uuid.uuid4().hex}}
        assert agent.invoke(start, agent_config)["__interrupt__"]
        no = {"decisions": [{"type": "reject", "message": "not this one"}]}
        ended = agent.invoke(Command(resume=no), agent_config)
        [denied] = _tool_answers(ended)
        assert denied["outcome"] == "failed" and denied["error"]["type"] == "approval_denied"
        assert "not this one" in denied["error"]["message"]
        assert not (workspace / rejected).exists()


def test_langchain_an_approver_who_may_not_decide_is_told(reviewed: Gw) -> None:
    require_module("langchain")
    from langgraph.types import Command

    url, workspace = reviewed
    path = f"lc-nobody-{uuid.uuid4().hex[:6]}.txt"
    with Client(url, CAROL) as tg, Client(url, ALICE) as alice:  # alice approves nothing
        agent = _agent(tg, alice, _call(path, "x"))
        agent_config: Any = {"configurable": {"thread_id": uuid.uuid4().hex}}
        with pytest.raises(Forbidden) as refused:
            agent.invoke({"messages": [{"role": "user", "content": "write"}]}, agent_config)
            agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), agent_config)
    assert refused.value.code == "not_an_approver"
    assert not (workspace / path).exists()


def test_langchain_interrupt_in_an_async_run(reviewed: Gw) -> None:
    # ainvoke: the call through the AsyncClient, the decision through the approver's client
    # in a thread, the interrupt in the run's context all the same
    require_module("langchain")
    from langgraph.types import Command

    url, workspace = reviewed
    path = f"lc-async-{uuid.uuid4().hex[:6]}.txt"

    async def main() -> tuple[Any, Any]:
        async with AsyncClient(url, ALICE) as atg:
            with Client(url, ALICE) as tg, Client(url, BOB) as bob:
                agent = _agent(tg, bob, _call(path, "async"), async_client=atg)
                agent_config: Any = {"configurable": {"thread_id": uuid.uuid4().hex}}
                start = {"messages": [{"role": "user", "content": "write"}]}
                first = await agent.ainvoke(start, agent_config)
                approve = Command(resume={"decisions": [{"type": "approve"}]})
                return first, await agent.ainvoke(approve, agent_config)

    first, done = anyio.run(main)
    assert first["__interrupt__"][0].value["action_requests"][0]["args"]["path"] == path
    [ran] = _tool_answers(done)
    assert ran["outcome"] == "succeeded" and (workspace / path).read_text() == "async"
