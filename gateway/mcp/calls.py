"""The request handlers of ``/mcp``: ``tools/list``, ``tools/call`` and ``tasks/*``.

A call the SDK serves runs in the gateway's own task group, never in the handler's (which the
SDK cancels): the handler waits for it, and when the request goes away
(``notifications/cancelled`` in 2025-11-25, a closed stream in 2026-07-28) the execution is
cancelled through ``gateway.runtime.cancellation`` like a REST cancel, so the pipeline always
ends with a truthful outcome. ``answer`` is the one answer to a call, which the fast path
(gateway/mcp/stateless.py) gives too.
"""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import anyio
import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, METHOD_NOT_FOUND
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from gateway import jsonlimits, tracecontext
from gateway.errors import LimitExceeded, NotFound, ToolgateError
from gateway.mcp import elicitation, meta, results, tools
from gateway.mcp.context import Door
from gateway.pipeline.records import ToolExecutionRequest
from gateway.pipeline.request import parse_request
from gateway.runtime.container import Runtime
from gateway.service import calls, catalogue, executions
from gateway.store.records import ApprovalRecord, ExecutionRecord

log = logging.getLogger("toolgate.mcp")
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
PROGRESS_POLL_S = 0.2
TASK_RESULT_WAIT_S = 30.0
_T = TypeVar("_T")
LIMIT_EXCEEDED = -32029
"""The JSON-RPC error code of a request refused by a bound on load (a server-defined code;
``data`` is the error with its ``code``, ``retry_after`` and ``setting``): ``tasks/result``."""


def _raw_meta(ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
    raw = (ctx.params or {}).get("_meta")
    return dict(raw) if isinstance(raw, Mapping) else {}


def _modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


# -- tools/list -----------------------------------------------------------------------------


async def list_tools(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> dict[str, Any]:
    door = Door.of(ctx)
    workspace = _raw_meta(ctx).get(meta.WORKSPACE, door.services.settings.mcp.workspace)
    if workspace is not None and not isinstance(workspace, str):
        raise MCPError(
            code=INVALID_PARAMS,
            message=f"_meta[{meta.WORKSPACE!r}] names a workspace by its id, a string",
        )
    try:
        visible = await catalogue.visible(
            door.services, door.principal, workspace, door.roles, door.auth_method
        )
    except LimitExceeded as exc:  # one principal's listings must not hold the policy's time
        raise MCPError(code=LIMIT_EXCEEDED, message=exc.message, data=exc.to_json()) from exc
    listed = [tools.mcp_tool(tool) for tool in visible]
    listed.append(copy.deepcopy(STATUS_TOOL_DEF))
    if _modern(ctx):
        return {"tools": listed, "resultType": "complete"}
    for tool in listed:
        tool["execution"] = {"taskSupport": "optional"}
    listed[-1]["execution"] = {"taskSupport": "forbidden"}  # the status tool answers at once
    return {"tools": listed}


STATUS_TOOL_DEF: dict[str, Any] = {
    "name": results.STATUS_TOOL,
    "title": "Toolgate execution status",
    "description": (
        "The state of one of your executions by id (a call that awaited approval, say): its "
        "result once it has one. wait_s (0-60) waits that long for it to finish."
    ),
    "inputSchema": {
        "type": "object",
        "properties": {
            "execution_id": {"type": "string", "minLength": 1, "maxLength": 256},
            "wait_s": {"type": "number", "minimum": 0, "maximum": 60},
        },
        "required": ["execution_id"],
        "additionalProperties": False,
    },
    "annotations": {
        "title": "Toolgate execution status",
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": False,
    },
}


# -- tools/call -----------------------------------------------------------------------------


async def legacy_task_call(
    ctx: ServerRequestContext[Any, Any], call_next: CallNext
) -> HandlerResult:
    """Middleware: a 2025-11-25 ``tools/call`` with ``params.task`` may be answered with a
    ``CreateTaskResult``, which the SDK's result check for ``tools/call`` would refuse: such
    a call is handled here, ahead of that check. Everything else passes through."""
    params = ctx.params or {}
    if (
        ctx.method != "tools/call"
        or ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        or not isinstance(params.get("task"), dict)
    ):
        return await call_next(ctx)
    try:
        typed = types.CallToolRequestParams.model_validate(params, by_name=False)
    except ValidationError as exc:
        raise MCPError(code=INVALID_PARAMS, message="invalid tools/call params") from exc
    return await call_tool(ctx, typed)


def no_param_headers(name: str) -> None:
    """Mcp-Param-* header checks: the published schemas declare no ``x-mcp-header``, so
    there is nothing to check (and no need to list the tools on every call)."""
    return None


async def call_tool(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> dict[str, Any]:
    """``tools/call``; never raises (an exception would reach the client as a bare
    internal error): every failure is an ``isError`` result."""
    door = Door.of(ctx)
    if params.name == results.STATUS_TOOL:
        if _legacy_task(ctx, params):
            raise MCPError(
                code=METHOD_NOT_FOUND,
                message=f"{results.STATUS_TOOL} answers at once: call it without params.task",
            )
        work = _status_tool(door, params.arguments or {})
    elif elicitation.resuming(params):  # a 2026-07-28 retry after an approval was asked
        work = elicitation.resume(door, ctx, params)
    else:
        work = _call(door, ctx, params)
    out = await _answered(work, params.name)
    if _modern(ctx):
        out.setdefault("resultType", "complete")
    return out


async def _answered(work: Awaitable[_T], name: str) -> _T | dict[str, Any]:
    """What ``work`` answers, a refusal as an ``isError`` result, or an internal error's."""
    try:
        return await work
    except Exception as exc:
        return failed(exc, name)


def failed(exc: Exception, name: str) -> dict[str, Any]:
    """The ``isError`` result of a call that raised ``exc`` (raised again if it is the
    SDK's, which it answers as a JSON-RPC error)."""
    if isinstance(exc, ToolgateError):
        return results.refused(exc)
    if isinstance(exc, MCPError):
        raise exc
    log.error("tools/call of %s failed", name, exc_info=exc)
    return results.internal("tools/call failed")


Answer = tuple[dict[str, Any], str | None]
"""A result, and the JSON text of its ``structuredContent`` when one of its text blocks is
that very string (``results.answer``), or None."""


def wants_task(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> bool:
    """2025-11-25: the request asks for a task (``params.task``); 2026-07-28: the client
    declared the tasks extension in its capabilities."""
    if not _modern(ctx):
        return params.task is not None
    caps = ctx.session.client_capabilities
    return caps is not None and TASKS_EXTENSION in (caps.extensions or {})


async def _call(
    door: Door, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> dict[str, Any]:
    raw = _raw_meta(ctx)
    client = ctx.session.client_params
    client_name = client.client_info.name if client is not None else "mcp"
    try:
        request = execution_request(
            door, raw, params.name, params.arguments, ctx.request_id, client_name
        )
        if meta.dry_run(raw):
            if _legacy_task(ctx, params):
                raise MCPError(
                    code=INVALID_PARAMS,
                    message="a dry run answers at once with its plan: send it without params.task",
                )
            plan = await calls.plan(door.services, request)
            out = results.plan_result(plan)
            return results.within_output_schema(out, door.services.catalogue, plan.tool)
        run = _start(door, request)
    except ToolgateError as exc:
        if _legacy_task(ctx, params):
            raise _task_refused(exc) from None
        raise
    if wants_task(ctx, params):
        return await _answer_with_task(door, ctx, run)
    progress = raw.get("progressToken")
    try:
        if progress is None:
            await run.wait()
        else:
            async with anyio.create_task_group() as group:
                group.start_soon(_forward_output, ctx, run, progress)
                await run.wait()
                group.cancel_scope.cancel()
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await cancel_abandoned(door, run)
        raise
    # A parked call asks its approval through the protocol when the client can show a URL.
    return await elicitation.ask(door, ctx, run.record) or await _answer(door, run)


def execution_request(
    door: Door,
    raw: Mapping[str, Any],
    name: str,
    arguments: Mapping[str, Any] | None,
    request_id: str | int | None,
    client_name: str,
) -> ToolExecutionRequest:
    """The call as ``POST /v1/executions`` would take it, checked the same way."""
    origin = meta.CallOrigin(
        principal=door.principal,
        session_id=door.session_id,
        request_id=request_id,
        client_name=client_name,
        default_workspace=door.services.settings.mcp.workspace,
    )
    limits = door.services.settings.json_limits
    shape = _bounded({"arguments": arguments, "_meta": raw}, limits)
    body = meta.execution_body(name, arguments, raw, origin)
    # The body's arguments are the checked ones (copied), at the level they have there: as
    # the REST door does for its body, tell normalisation that they need no check again.
    request = parse_request(
        body,
        door.principal,
        roles=door.roles,
        auth_method=door.auth_method,
        body_bound=jsonlimits.Bound(limits, shape),
    )
    return _with_trace(request, raw.get(meta.TRACEPARENT) or door.traceparent)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _bounded(params: dict[str, Any], limits: jsonlimits.JsonLimits) -> jsonlimits.Shape:
    """Refuse, before anything runs, in the arguments and ``_meta`` what the REST door
    refuses in a body (400 ``malformed_json``, ``json_too_deep``, ``json_too_many_values``):
    a lone UTF-16 surrogate (``"\\ud800"``, which no store, hash or answer can encode), a
    number JSON cannot carry, nesting or size past the bounds, by the rule the REST door
    applies (``jsonlimits.check_call``: the arguments bounded on their own, ``_meta`` apart).
    A JSON-RPC invalid-params error: the message holds no surrogate of the request (each is
    written as its escape). Returns the arguments' shape."""
    try:
        return jsonlimits.check_call(params, limits, "params")
    except jsonlimits.JsonLimitError as exc:
        text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", exc.message)
        raise MCPError(
            code=INVALID_PARAMS, message=f"{text}; nothing was run", data={"type": exc.code}
        ) from None


def _start(door: Door, request: ToolExecutionRequest) -> Run:
    """The call running in the gateway's task group, holding one of its principal's
    execution slots until its execution ends (``Run.drive``), not until the request does."""
    running = door.services.admission.executions
    running.take(door.principal)
    run = Run(door.services, request)
    try:
        door.tasks.start_soon(run.drive)
    except BaseException:
        running.give_back(door.principal)
        raise
    return run


def _with_trace(request: ToolExecutionRequest, traceparent: Any) -> ToolExecutionRequest:
    """Continue the caller's trace: a valid ``traceparent`` from ``_meta`` or the header
    becomes the request's (as the REST door's header does)."""
    parsed = tracecontext.parse(traceparent) if isinstance(traceparent, str) else None
    return request if parsed is None else replace(request, traceparent=parsed)


@dataclass(slots=True)
class Run:
    """One call running (in the gateway's task group, or a plain call's request task)."""

    services: Runtime
    request: ToolExecutionRequest
    record: ExecutionRecord | None = None
    error: ToolgateError | None = None
    finished: bool = False
    _done: anyio.Event | None = None
    """Made for the first who waits (``wait``): a plain call's request waits for nothing."""

    async def drive(self) -> None:
        """Run the call, which holds its principal's execution slot (taken by ``_start``
        or the fast path's ``stateless.plain_call``)."""
        try:
            self.record = await calls.run_holding(self.services, self.request)
        except ToolgateError as exc:
            self.error = exc
        except Exception as exc:
            log.exception("the MCP call %s failed", self.request.call_id)
            self.error = ToolgateError(f"the gateway failed: {type(exc).__name__}")
        finally:
            self.services.admission.executions.give_back(self.request.principal)
            self.finished = True
            if self._done is not None:
                self._done.set()

    async def wait(self) -> None:
        """Until the run is done."""
        if not self.finished:
            if self._done is None:
                self._done = anyio.Event()
            await self._done.wait()

    async def find(self) -> ExecutionRecord | None:
        """The execution, once reserved (it is durable from then on)."""
        if self.record is not None:
            return self.record
        return await calls.find_call(self.services, self.request)


async def answer(door: Door, run: Run) -> Answer:
    """The answer to a ``tools/call`` whose run is done, the SDK's path and the fast path's
    alike (gateway/mcp/stateless.py): a refusal, or the execution as ``results.answer``
    builds it."""
    if run.error is not None:
        return results.refused(run.error), None
    assert run.record is not None
    record = run.record
    approval = None if record.terminal else await _approval(door, record)
    return results.answer(record, approval, door.base_url, door.services.catalogue)


async def _answer(door: Door, run: Run) -> dict[str, Any]:
    return (await answer(door, run))[0]


def _terminal(door: Door, record: ExecutionRecord) -> dict[str, Any]:
    """The answer about a finished execution (a task's result)."""
    return results.answer(record, None, door.base_url, door.services.catalogue)[0]


async def _approval(door: Door, record: ExecutionRecord) -> ApprovalRecord | None:
    return await executions.approval_of(door.services, record)


def _legacy_task(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> bool:
    """A 2025-11-25 task-augmented ``tools/call``: answered with a ``CreateTaskResult`` or a
    JSON-RPC error, nothing else (a spec-following client validates the answer as one)."""
    return params.task is not None and not _modern(ctx)


def _task_refused(exc: ToolgateError) -> MCPError:
    """A task-augmented call refused before it became an execution (no task to answer), or
    a ``tasks/*`` request refused: a JSON-RPC error whose ``data`` is the error, its code
    and ``retryable`` as every other door names them."""
    code = LIMIT_EXCEEDED if isinstance(exc, LimitExceeded) else INVALID_PARAMS
    message = f"refused ({exc.code}): {exc.message}"
    return MCPError(code=code, message=message, data=exc.to_json())


async def _answer_with_task(
    door: Door, ctx: ServerRequestContext[Any, Any], run: Run
) -> dict[str, Any]:
    """Wait up to ``mcp.task_wait``; a call finished by then is answered as usual in
    2026-07-28, one that is parked or still running as a task (its execution record is
    already durable). 2025-11-25 answers a task however soon the call ended (a client that
    sent ``params.task`` takes a ``CreateTaskResult`` only), or, for a call refused before
    it became an execution, a JSON-RPC error."""
    modern = _modern(ctx)
    with anyio.move_on_after(door.services.settings.mcp.task_wait):
        await run.wait()
    finished = run.finished and (run.error is not None or (run.record and run.record.terminal))
    if finished and modern:
        return await _answer(door, run)
    record = await run.find()
    while record is None and not run.finished:
        with anyio.move_on_after(0.05):
            await run.wait()
        record = await run.find()
    if record is None:
        if modern:
            return await _answer(door, run)
        raise _task_refused(run.error or ToolgateError("the call ended before it ran"))
    latest = await executions.latest(door.services, record)
    found = results.task(latest, await _approval(door, latest), door.base_url)
    if modern:
        return {"resultType": "task", **found}
    # 2025-11-25's CreateTaskResult; the text block is for clients that do not read `task`.
    return {
        "task": found,
        "content": [{"type": "text", "text": found["statusMessage"]}],
        "_meta": results.related(latest),
    }


async def _forward_output(ctx: ServerRequestContext[Any, Any], run: Run, token: Any) -> None:
    """``tool.output`` events → ``notifications/progress`` (the client gave a token)."""
    seq, count = -1, 0
    while True:
        await anyio.sleep(PROGRESS_POLL_S)
        record = await run.find()
        if record is None:
            continue
        for event in (await executions.events(run.services, record, seq)).events:
            seq = event.seq
            if event.type != "tool.output":
                continue
            count += 1
            text = str(event.data.get("text", ""))[:2000]
            note = types.ProgressNotification(
                params=types.ProgressNotificationParams(
                    progress_token=token, progress=count, message=text
                )
            )
            await ctx.session.send_notification(note, related_request_id=ctx.request_id)


async def cancel_abandoned(door: Door, run: Run) -> None:
    """The client gave up on the call: cancel its execution (the pipeline settles it)."""
    with anyio.move_on_after(5):
        record = await run.find()
        while record is None and not run.finished:
            await anyio.sleep(0.05)
            record = await run.find()
        if record is None:
            return
        latest = await executions.latest(door.services, record)
        if latest.terminal:
            return
        try:
            await calls.cancel(door.services, door.principal, latest)
        except ToolgateError as exc:
            log.info("cancelling abandoned execution %s: %s", latest.id, exc.message)


async def _status_tool(door: Door, arguments: Mapping[str, Any]) -> dict[str, Any]:
    execution_id = arguments.get("execution_id")
    if not isinstance(execution_id, str):
        return results.refused(ToolgateError("execution_id is a string", code="invalid_arguments"))
    try:
        wait = executions.wait_seconds(arguments.get("wait_s"), "wait_s")
    except ToolgateError as exc:
        return results.refused(exc)
    found = await executions.find_visible(door.services, door.principal, execution_id)
    if found is None:
        return results.not_found(execution_id)
    record = await executions.wait_for_end(door.services, door.principal, found, wait)
    if record.terminal:
        return results.call_result(record, door.base_url)
    return results.pending_result(record, await _approval(door, record), door.base_url)


async def _own_task(
    ctx: ServerRequestContext[Any, Any], task_id: str
) -> tuple[Door, ExecutionRecord]:
    """The caller's door, and its own execution behind a task: a task is its requester's
    alone."""
    door = Door.of(ctx)
    record = await executions.find_visible(door.services, door.principal, task_id)
    if record is None or record.principal != door.principal:
        raise _task_refused(NotFound(f"no task or execution {task_id!r}"))
    return door, record


# -- tasks/* --------------------------------------------------------------------------------


async def get_task(
    ctx: ServerRequestContext[Any, Any], params: types.GetTaskRequestParams
) -> dict[str, Any]:
    """``tasks/get`` from the store (any replica). 2026-07-28 inlines the final result."""
    door, record = await _own_task(ctx, params.task_id)
    out = results.task(record, await _approval(door, record), door.base_url)
    if _modern(ctx) and record.terminal:
        out["result"] = _terminal(door, record)
    return out


async def task_result(
    ctx: ServerRequestContext[Any, Any], params: types.GetTaskPayloadRequestParams
) -> dict[str, Any]:
    """2025-11-25's ``tasks/result``: the call's result once it has one (waits a while)."""
    door, record = await _own_task(ctx, params.task_id)
    if not record.terminal:
        try:
            record = await executions.wait_for_end(
                door.services, door.principal, record, TASK_RESULT_WAIT_S
            )
        except LimitExceeded as exc:
            raise MCPError(code=LIMIT_EXCEEDED, message=exc.message, data=exc.to_json()) from exc
    if not record.terminal:
        raise MCPError(
            code=INVALID_PARAMS,
            message=f"task {record.id} has not finished; poll tasks/get",
        )
    out = _terminal(door, record)
    out["_meta"].update(results.related(record))
    return out


async def cancel_task(
    ctx: ServerRequestContext[Any, Any], params: types.CancelTaskRequestParams
) -> dict[str, Any]:
    """``tasks/cancel``: a durable ``cancelling``, the tree killed, a truthful outcome."""
    door, record = await _own_task(ctx, params.task_id)
    try:
        record = await calls.cancel(door.services, door.principal, record)
    except ToolgateError as exc:
        raise _task_refused(exc) from exc
    return results.task(record, await _approval(door, record), door.base_url)
