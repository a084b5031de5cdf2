"""The official MCP SDK client against a real gateway process, in both protocol eras."""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

import anyio
import httpx
import mcp_types as types
import pytest
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.shared.exceptions import MCPError
from prometheus_client.parser import text_string_to_metric_families

from gateway.mcp import meta
from gateway.observability.metrics import UNDECLARED_TOOL
from tests.helpers import ALICE, BOB, until, wait_until
from tests.mcp.helpers import ERAS, Gateway, connect, meta_of


def _ids() -> dict[str, str]:
    """Explicit run and call ids (so the test can find the execution over REST)."""
    return {meta.RUN_ID: f"r-{uuid.uuid4().hex[:8]}", meta.CALL_ID: f"c-{uuid.uuid4().hex[:8]}"}


@pytest.mark.parametrize("era", ERAS)
def test_list_tools_publishes_the_rest_schema_and_declared_annotations(
    gw: Gateway, era: str
) -> None:
    async def main() -> dict[str, types.Tool]:
        async with connect(gw.url, era) as client:
            return {t.name: t for t in (await client.list_tools()).tools}

    tools = anyio.run(main)
    with gw.rest(ALICE) as rest:
        published = rest.get("/v1/tools", params={"format": "mcp"}).json()["items"]
    for item in published:
        assert tools[item["name"]].input_schema == item["inputSchema"], item["name"]
    write, read, http_get = tools["fs.write_file"], tools["fs.read_file"], tools["http.get_json"]
    assert write.description and write.title == "fs.write_file 1.2.0"  # the newest version
    assert write.annotations is not None and read.annotations and http_get.annotations
    assert (write.annotations.read_only_hint, write.annotations.destructive_hint) == (False, True)
    assert write.annotations.open_world_hint is False
    assert (read.annotations.read_only_hint, read.annotations.destructive_hint) == (True, False)
    assert read.annotations.idempotent_hint is True
    assert http_get.annotations.open_world_hint is True
    assert tools["fs.apply_patch"].annotations.destructive_hint is False  # type: ignore[union-attr]
    assert "toolgate.execution_status" in tools


@pytest.mark.parametrize("era", ERAS)
def test_the_listing_is_what_the_policy_could_allow(gw: Gateway, era: str) -> None:
    async def main() -> set[str]:
        async with connect(gw.url, era, key=BOB) as client:
            return {t.name for t in (await client.list_tools()).tools}

    names = anyio.run(main)  # bob is an approver: low-risk tools only (policies/rules.yaml)
    assert "fs.read_file" in names and "fs.write_file" not in names and "proc.python" not in names


@pytest.mark.parametrize("era", ERAS)
def test_write_file_then_the_same_idempotency_key(gw: Gateway, era: str) -> None:
    path = f"mcp-{era}-{uuid.uuid4().hex[:6]}.txt"
    key = {meta.IDEMPOTENCY_KEY: f"k-{uuid.uuid4().hex}"}

    async def call(client: Any) -> types.CallToolResult:
        return await client.call_tool("fs.write_file", {"path": path, "content": "one"}, meta=key)

    async def main() -> tuple[types.CallToolResult, types.CallToolResult]:
        async with connect(gw.url, era) as client:
            first = await call(client)
            (gw.workspace / path).write_text("changed by someone else")
            return first, await call(client)

    first, again = anyio.run(main)
    assert not first.is_error, first.content
    assert first.structured_content and first.structured_content["path"] == path
    got = meta_of(first)
    assert got[meta.OUTCOME] == "succeeded" and got[meta.SIDE_EFFECT]["committed"] is True
    assert any(e["kind"] == "file_hash" for e in got[meta.EVIDENCE])
    assert first.content[0].text.startswith("{")  # type: ignore[union-attr]
    # The same key: the stored result, the same execution, and no second write.
    assert meta_of(again)[meta.EXECUTION_ID] == got[meta.EXECUTION_ID]
    assert (gw.workspace / path).read_text() == "changed by someone else"


@pytest.mark.parametrize("era", ERAS)
def test_an_invalid_argument_is_a_clear_error_and_writes_nothing(gw: Gateway, era: str) -> None:
    path = f"bad-{era}-{uuid.uuid4().hex[:6]}.txt"

    async def main() -> types.CallToolResult:
        async with connect(gw.url, era) as client:
            return await client.call_tool("fs.write_file", {"path": path, "content": 42})

    result = anyio.run(main)
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert text.startswith("failed:") and "content" in text and "Traceback" not in text
    assert meta_of(result)[meta.ERROR]["phase"] == "validate"
    assert not (gw.workspace / path).exists()


@pytest.mark.parametrize("era", ERAS)
def test_a_denied_call(gw: Gateway, era: str) -> None:
    async def main() -> types.CallToolResult:
        async with connect(gw.url, era) as client:
            return await client.call_tool("fs.write_file", {"path": ".git/config", "content": "x"})

    result = anyio.run(main)
    assert result.is_error
    error = meta_of(result)[meta.ERROR]
    assert error["phase"] == "policy" and "protected" in error["message"]
    assert not (gw.workspace / ".git" / "config").exists()


@pytest.mark.parametrize("era", ERAS)
def test_a_dry_run_answers_with_the_plan_and_runs_nothing(gw: Gateway, era: str) -> None:
    path = f"plan-{era}-{uuid.uuid4().hex[:6]}.txt"
    (gw.workspace / path).write_text("old\n")
    ids = {**_ids(), meta.IDEMPOTENCY_KEY: f"k-{uuid.uuid4().hex}"}
    args = {"path": path, "content": "new\n"}

    async def main() -> tuple[types.CallToolResult, types.CallToolResult, types.CallToolResult]:
        async with connect(gw.url, era) as client:
            plan = await client.call_tool("fs.write_file", args, meta={**ids, meta.DRY_RUN: True})
            denied = await client.call_tool(
                "fs.write_file", {"path": ".git/config", "content": "x"}, meta={meta.DRY_RUN: True}
            )
            real = await client.call_tool("fs.write_file", args, meta=ids)
            return plan, denied, real

    plan, denied, real = anyio.run(main)
    assert not plan.is_error and plan.structured_content, plan.content
    planned = plan.structured_content
    assert planned["would"] == "run" and "+new" in planned["preview"]["diff"], planned
    assert meta_of(plan)[meta.DRY_RUN] is True and meta_of(plan)[meta.OUTCOME] == "planned"
    assert denied.structured_content and denied.structured_content["would"] == "fail"
    assert denied.structured_content["policy"]["result"] == "deny"
    # the plan used neither the call id nor the key: the same call then runs, once
    assert meta_of(real)[meta.OUTCOME] == "succeeded", real.content
    assert (gw.workspace / path).read_text() == "new\n"
    with gw.rest(ALICE) as rest:
        found = rest.get("/v1/executions", params={"run_id": ids[meta.RUN_ID]}).json()
        events = rest.get(f"/v1/executions/{found['items'][0]['id']}/events").json()["items"]
    assert found["count"] == 1
    decided = next(e for e in events if e["type"] == "policy.decided")
    assert decided["data"]["input"]["arguments_sha256"] == planned["arguments_sha256"]


@pytest.mark.parametrize("era", ERAS)
def test_a_request_error_is_an_error_result_not_an_exception(gw: Gateway, era: str) -> None:
    async def main() -> types.CallToolResult:
        async with connect(gw.url, era) as client:
            return await client.call_tool(
                "fs.read_file", {"path": "x"}, meta={meta.RUN_ID: "r", meta.TURN_ID: 7}
            )

    result = anyio.run(main)
    assert result.is_error and "invalid_request" in result.content[0].text  # type: ignore[union-attr]


def _approve(gw: Gateway, approval_id: str) -> None:
    with gw.rest(BOB) as rest:
        response = rest.post(f"/v1/approvals/{approval_id}/approve", json={"comment": "ok"})
        assert response.status_code == 202, response.text


def _delete_target(gw: Gateway, era: str) -> str:
    path = f"doomed-{era}-{uuid.uuid4().hex[:6]}.txt"
    (gw.workspace / path).write_text("bye")
    return path


@pytest.mark.parametrize("era", ERAS)
def test_approval_without_task_support_answers_at_once_then_the_outcome(
    gw: Gateway, era: str
) -> None:
    path = _delete_target(gw, era)
    args = {"path": path}
    ids = {**_ids(), meta.IDEMPOTENCY_KEY: f"k-{uuid.uuid4().hex}"}

    async def first() -> types.CallToolResult:
        async with connect(gw.url, era) as client:
            return await client.call_tool("fs.delete_file", args, meta=ids)

    pending = anyio.run(first)
    assert not pending.is_error
    body = pending.structured_content or {}
    assert body["status"] == "awaiting_approval" and body["approval"]["id"].startswith("ap")
    assert "/v1/approvals/" in body["message"] and meta.CALL_ID in body["how_to_get_the_outcome"]
    assert (gw.workspace / path).exists()
    _approve(gw, body["approval"]["id"])

    async def later() -> tuple[types.CallToolResult, types.CallToolResult]:
        async with connect(gw.url, era) as client:
            status = await client.call_tool(
                "toolgate.execution_status", {"execution_id": body["execution_id"], "wait_s": 30}
            )
            return status, await client.call_tool("fs.delete_file", args, meta=ids)

    status, recalled = anyio.run(later)
    assert not status.is_error and meta_of(status)[meta.OUTCOME] == "succeeded"
    assert meta_of(recalled)[meta.EXECUTION_ID] == body["execution_id"]
    assert meta_of(recalled)[meta.OUTCOME] == "succeeded"
    assert not (gw.workspace / path).exists()


# -- tasks ----------------------------------------------------------------------------------


class TaskCreated(types.Result):
    """2026-07-28's ``CreateTaskResult`` (``Result & Task``, ``resultType: "task"``)."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    status_message: str | None = None


class TaskState(types.Result):
    """``tasks/get`` (2026-07-28 inlines ``result`` once the task is terminal)."""

    task_id: str
    status: str
    status_message: str | None = None
    result: dict[str, Any] | None = None


async def _unresolved(result: TaskCreated, ctx: ClaimContext) -> types.CallToolResult:
    raise AssertionError("the test reads the task itself (allow_claimed=True)")


class Tasks(ClientExtension):
    """A client that declares the tasks extension (the SDK ships none)."""

    identifier = "io.modelcontextprotocol/tasks"

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=TaskCreated, resolve=_unresolved)]


async def _create_task(client: Any, era: str, name: str, args: dict[str, Any], ids: Any) -> Any:
    if era == "legacy":
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(
                name=name, arguments=args, task=types.TaskMetadata(ttl=60_000), _meta=ids
            )
        )
        created = await client.session.send_request(request, types.CreateTaskResult)
        return created.task
    return await client.session.call_tool(name, args, meta=ids, allow_claimed=True)


async def _poll_task(client: Any, task_id: str, statuses: set[str]) -> TaskState:
    """The task's state once its status is one of ``statuses`` (``tasks/get``, polled)."""

    async def reached() -> TaskState | None:
        state = await client.session.send_request(
            types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)), TaskState
        )
        return state if state.status in statuses else None

    return await until(reached, f"task {task_id} to reach {sorted(statuses)}")


@pytest.mark.parametrize("era", ERAS)
def test_approval_with_task_support_is_a_task_approved_by_another_principal(
    gw: Gateway, era: str
) -> None:
    path = _delete_target(gw, era)
    ids = {**_ids(), meta.IDEMPOTENCY_KEY: f"k-{uuid.uuid4().hex}"}

    async def main() -> tuple[Any, TaskState, types.CallToolResult]:
        async with connect(gw.url, era, extensions=[Tasks()]) as client:
            task = await _create_task(client, era, "fs.delete_file", {"path": path}, ids)
            assert task.status == "working" and "/v1/approvals/ap" in task.status_message
            with gw.rest(BOB) as rest:  # durable before the answer: REST sees it at once
                execution = rest.get(f"/v1/executions/{task.task_id}").json()
            assert execution["status"] == "awaiting_approval"
            await anyio.to_thread.run_sync(_approve, gw, execution["approval"]["id"])
            state = await _poll_task(client, task.task_id, {"completed", "cancelled", "failed"})
            if era == "legacy":
                payload = await client.session.send_request(
                    types.GetTaskPayloadRequest(
                        params=types.GetTaskPayloadRequestParams(task_id=task.task_id)
                    ),
                    types.CallToolResult,
                )
            else:
                payload = types.CallToolResult.model_validate(state.result)
            return task, state, payload

    task, state, payload = anyio.run(main)
    assert state.status == "completed", state
    assert not payload.is_error and meta_of(payload)[meta.OUTCOME] == "succeeded"
    assert meta_of(payload)[meta.EXECUTION_ID] == task.task_id
    assert not (gw.workspace / path).exists()


@pytest.mark.parametrize("era", ERAS)
def test_tasks_cancel_cancels_the_execution(gw: Gateway, era: str) -> None:
    path = _delete_target(gw, era)
    ids = {**_ids(), meta.IDEMPOTENCY_KEY: f"k-{uuid.uuid4().hex}"}

    async def main() -> tuple[Any, Any]:
        async with connect(gw.url, era, extensions=[Tasks()]) as client:
            task = await _create_task(client, era, "fs.delete_file", {"path": path}, ids)
            cancelled = await client.session.send_request(
                types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task.task_id)),
                TaskState,
            )
            return task, cancelled

    task, cancelled = anyio.run(main)
    assert cancelled.status == "cancelled"
    with gw.rest(ALICE) as rest:
        execution = rest.get(f"/v1/executions/{task.task_id}").json()
    assert execution["result"]["outcome"] == "cancelled"
    assert (gw.workspace / path).exists()


# -- cancel, progress -----------------------------------------------------------------------


def _script(gw: Gateway, body: str) -> str:
    name = f"s_{uuid.uuid4().hex[:8]}.py"
    (gw.workspace / name).write_text(body)
    return name


def _execution(gw: Gateway, ids: dict[str, str], terminal: bool = True) -> dict[str, Any]:
    """The execution of the call ``ids`` once it exists (``terminal``: once completed)."""
    params = {"run_id": ids[meta.RUN_ID], "call_id": ids[meta.CALL_ID]}

    def found() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = rest.get("/v1/executions", params=params).json()["items"]
        return items if items and (items[0]["status"] == "completed" or not terminal) else []

    with gw.rest(ALICE) as rest:
        items = wait_until(found, f"the execution of {params} to {'end' if terminal else 'exist'}")
        execution: dict[str, Any] = rest.get(f"/v1/executions/{items[0]['id']}").json()
        return execution


def _printed(gw: Gateway, execution_id: str, text: str) -> None:
    """Waits until the execution's script has printed ``text``: it is running."""

    def printed() -> bool:
        events = rest.get(f"/v1/executions/{execution_id}/events").json()["items"]
        return any(e["type"] == "tool.output" and text in e["data"]["text"] for e in events)

    with gw.rest(ALICE) as rest:
        wait_until(printed, f"the script to print {text!r}")


@pytest.mark.parametrize("era", ERAS)
def test_a_client_cancel_cancels_the_execution(gw: Gateway, era: str) -> None:
    script = _script(gw, "import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    ids = _ids()

    async def main() -> None:
        async with connect(gw.url, era) as client, anyio.create_task_group() as group:

            async def call() -> None:
                await client.call_tool("proc.python", {"script": script}, meta=ids)

            group.start_soon(call)
            found = await anyio.to_thread.run_sync(_execution, gw, ids, False)
            await anyio.to_thread.run_sync(_printed, gw, found["id"], "started")
            group.cancel_scope.cancel()  # the SDK's notifications/cancelled, or a closed stream

    started = time.monotonic()
    anyio.run(main)
    execution = _execution(gw, ids)
    # A write cut short after it began, with no reconcile probe: unknown, error cancelled
    # (docs/failures.md, cancel).
    result = execution["result"]
    assert (result["outcome"], result["error"]["type"]) == ("unknown", "cancelled"), result
    with gw.rest(ALICE) as rest:
        events = rest.get(f"/v1/executions/{execution['id']}/events").json()["items"]
    cancels = [e for e in events if e["data"].get("status") == "cancelling"]
    assert cancels and cancels[0]["data"]["by"] == "alice"
    assert time.monotonic() - started < 50  # not the script's 60 s: the tree was killed


@pytest.mark.parametrize("era", ERAS)
def test_tool_output_becomes_progress_notifications(gw: Gateway, era: str) -> None:
    gate = f"gate_{uuid.uuid4().hex[:8]}"  # the script ends once the client saw its output
    script = _script(
        gw,
        "import os, time\n"
        "deadline = time.monotonic() + 50  # under proc.python's timeout: a failing test ends\n"
        "for i in range(3):\n"
        "    print('line', i, flush=True)\n"
        f"    while not os.path.exists({gate!r}) and time.monotonic() < deadline:\n"
        "        time.sleep(0.02)\n",
    )
    seen: list[str] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append(message or "")
        (gw.workspace / gate).touch()

    async def main() -> types.CallToolResult:
        async with connect(gw.url, era) as client:
            return await client.call_tool(
                "proc.python", {"script": script}, progress_callback=progress
            )

    result = anyio.run(main)
    assert not result.is_error, result.content
    assert "line 0" in "".join(seen), seen


def test_a_bad_key_is_401_with_www_authenticate(gw: Gateway) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    for headers in ({}, {"Authorization": "Bearer nope"}):
        response = httpx.post(gw.url + "/mcp", json=body, headers=headers, timeout=10)
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert response.headers["content-type"] == "application/problem+json"

    async def main() -> None:
        async with connect(gw.url, "legacy", key="nope") as client:
            await client.list_tools()

    with pytest.raises(ExceptionGroup) as caught:  # the SDK client cannot open the session
        anyio.run(main)
    assert caught.group_contains(MCPError)


def test_dns_rebinding_protection_refuses_an_unlisted_host(gw: Gateway) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {
        "Authorization": f"Bearer {ALICE}",
        "Host": "evil.example:80",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
    }
    response = httpx.post(gw.url + "/mcp", json=body, headers=headers, timeout=10)
    assert response.status_code == 421


def _executions_by_tool(gw: Gateway) -> dict[str, float]:
    with gw.rest() as rest:
        response = rest.get("/metrics")
    assert response.status_code == 200, response.text
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name == "toolgate_executions_total":
                tool = sample.labels["tool"]
                found[tool] = found.get(tool, 0.0) + sample.value
    return found


def test_made_up_tool_names_add_no_metric_series(gw: Gateway) -> None:
    """Each call naming a tool no catalogue declares, over REST and both MCP eras, counts
    under the one fixed ``tool`` label: a caller cannot add series."""
    before = _executions_by_tool(gw)
    names = [f"made.up_{uuid.uuid4().hex[:8]}" for _ in range(9)]
    with gw.rest() as rest:
        for name in names[:3]:
            sent = {
                "run_id": "r",
                "call_id": name,
                "tool": {"name": name},
                "arguments": {},
                "actor": {"user_id": "bob", "agent_id": "t"},
                "workspace": {"id": "demo"},
            }
            answer = rest.post("/v1/executions", json=sent)
            assert answer.json()["result"]["error"]["type"] == "tool_not_found", answer.text

    async def main(era: str, called: list[str]) -> None:
        async with connect(gw.url, era) as client:
            for name in called:
                result = await client.call_tool(name, {}, meta=_ids())
                assert result.is_error and "is declared" in str(result.content)

    anyio.run(main, "legacy", names[3:6])
    anyio.run(main, "2026-07-28", names[6:])
    after = _executions_by_tool(gw)
    assert set(after) - set(before) <= {UNDECLARED_TOOL}
    assert not set(after) & set(names)
    assert after[UNDECLARED_TOOL] - before.get(UNDECLARED_TOOL, 0.0) == len(names)
