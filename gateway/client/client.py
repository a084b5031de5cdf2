"""A typed client of the gateway's REST API (docs/api.md), sync and async.

``Client`` and ``AsyncClient`` have the same methods; both build their requests with
``_Requests`` (one place for paths, bodies and parameters), send them with ``_arguments``
and ``_transport_error``, and read the answers with ``_read`` (one place for the
problem+json errors of ``gateway.client.errors``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from gateway.client.errors import TransportError, raise_for_problem

MAX_WAIT_S = 60.0
"""The longest ``?wait=`` the gateway holds one request for."""


@dataclass(frozen=True, slots=True)
class Execution:
    """One execution as the gateway answered it (docs/api.md#the-execution-resource)."""

    raw: Mapping[str, Any]

    @property
    def id(self) -> str:
        return str(self.raw["id"])

    @property
    def status(self) -> str:
        return str(self.raw["status"])

    @property
    def terminal(self) -> bool:
        return self.status == "completed"

    @property
    def result(self) -> Mapping[str, Any]:
        return self.raw.get("result") or {}

    @property
    def outcome(self) -> str | None:
        outcome = self.result.get("outcome")
        return str(outcome) if outcome is not None else None

    @property
    def succeeded(self) -> bool:
        return self.outcome == "succeeded"

    @property
    def data(self) -> Any:
        return self.result.get("data")

    @property
    def error(self) -> Mapping[str, Any] | None:
        error = self.result.get("error")
        return error if isinstance(error, Mapping) else None

    @property
    def approval(self) -> Mapping[str, Any] | None:
        approval = self.raw.get("approval")
        return approval if isinstance(approval, Mapping) else None


@dataclass(frozen=True, slots=True)
class CallOptions:
    """The parts of a request besides the tool and its arguments (docs/api.md#request-body).

    ``call_id`` defaults to a new one per call: send the same one again to make a retry the
    same call."""

    run_id: str = field(default_factory=lambda: f"run-{uuid.uuid4().hex}")
    workspace: str = "demo"
    agent_id: str = "toolgate-client"
    turn_id: str = ""
    call_id: str | None = None
    version: str | None = None
    idempotency_key: str | None = None
    expected_state: Mapping[str, Any] | None = None
    deadline_ms: int | None = None
    approval_token: str | None = None
    cancellation_token: str | None = None


def request_body(
    tool: str, arguments: Mapping[str, Any], options: CallOptions, user_id: str | None = None
) -> dict[str, Any]:
    """The JSON body of ``POST /v1/executions`` and ``POST /v1/plans``."""
    ref: dict[str, Any] = {"name": tool}
    if options.version is not None:
        ref["requested_version"] = options.version
    actor: dict[str, Any] = {"agent_id": options.agent_id}
    if user_id is not None:
        actor["user_id"] = user_id
    body: dict[str, Any] = {
        "run_id": options.run_id,
        "turn_id": options.turn_id,
        "call_id": f"call-{uuid.uuid4().hex}" if options.call_id is None else options.call_id,
        "tool": ref,
        "arguments": dict(arguments),
        "actor": actor,
        "workspace": {"id": options.workspace},
    }
    optional = {
        "idempotency_key": options.idempotency_key,
        "expected_state": dict(options.expected_state) if options.expected_state else None,
        "deadline": options.deadline_ms,
        "approval_token": options.approval_token,
        "cancellation_token": options.cancellation_token,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    return body


def segment(value: str) -> str:
    """``value`` (an id, a tool name) as one segment of a request's path, quoted whole: an id
    holding ``/``, ``?`` or ``#``, or one that is ``.`` or ``..`` (which a client removes with
    the segment before it), names no other route, and the gateway answers it as any id
    nobody has (404 ``not_found``), as MCP's status tool does."""
    quoted = quote(value, safe="")
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted


@dataclass(frozen=True, slots=True)
class _Request:
    method: str
    path: str
    params: Mapping[str, Any] | None = None
    json: Any = None
    headers: Mapping[str, str] | None = None
    timeout: float | None = None


class _Requests:
    """Every request of the API, as data (no I/O)."""

    @staticmethod
    def execute(body: Mapping[str, Any], respond_async: bool) -> _Request:
        headers = {"Prefer": "respond-async"} if respond_async else None
        return _Request("POST", "/v1/executions", json=body, headers=headers)

    @staticmethod
    def plan(body: Mapping[str, Any]) -> _Request:
        return _Request("POST", "/v1/plans", json=body)

    @staticmethod
    def get(execution_id: str, wait: float | None) -> _Request:
        # any wait is sent for the gateway to judge (400 invalid_wait past 0 to MAX_WAIT_S,
        # as it answers every door); it never holds a request longer than MAX_WAIT_S
        params = {"wait": f"{wait:g}"} if wait else None
        timeout = MAX_WAIT_S + 30 if wait else None
        return _Request("GET", f"/v1/executions/{segment(execution_id)}", params, timeout=timeout)

    @staticmethod
    def find(run_id: str | None, call_id: str | None) -> _Request:
        params = {k: v for k, v in (("run_id", run_id), ("call_id", call_id)) if v is not None}
        return _Request("GET", "/v1/executions", params)

    @staticmethod
    def cancel(execution_id: str) -> _Request:
        return _Request("POST", f"/v1/executions/{segment(execution_id)}/cancel")

    @staticmethod
    def events(execution_id: str, after: int | None) -> _Request:
        params = {"after": str(after)} if after is not None else None
        return _Request("GET", f"/v1/executions/{segment(execution_id)}/events", params)

    @staticmethod
    def next_page(page: Mapping[str, Any]) -> _Request | None:
        """The request of the page after ``page`` (its ``next`` link), None after the last."""
        link = page.get("next")
        return _Request("GET", link) if link else None

    @staticmethod
    def tools(fmt: str | None, workspace: str) -> _Request:
        params = {"workspace": workspace, **({"format": fmt} if fmt else {})}
        return _Request("GET", "/v1/tools", params)

    @staticmethod
    def tool(name: str, version: str | None) -> _Request:
        params = {"version": version} if version else None
        return _Request("GET", f"/v1/tools/{segment(name)}", params)

    @staticmethod
    def approvals(status: str | None, run_id: str | None, call_id: str | None) -> _Request:
        given = (("status", status), ("run_id", run_id), ("call_id", call_id))
        return _Request("GET", "/v1/approvals", {k: v for k, v in given if v is not None})

    @staticmethod
    def approval(approval_id: str) -> _Request:
        return _Request("GET", f"/v1/approvals/{segment(approval_id)}")

    @staticmethod
    def decide(
        approval_id: str,
        verb: str,
        comment: str | None,
        resume: bool,
        arguments: Mapping[str, Any] | None = None,
    ) -> _Request:
        body: dict[str, Any] = {"resume": resume}
        if comment is not None:
            body["comment"] = comment
        if arguments is not None:
            body["arguments"] = dict(arguments)
        return _Request("POST", f"/v1/approvals/{segment(approval_id)}/{verb}", json=body)


def _arguments(req: _Request) -> dict[str, Any]:
    """The keyword arguments of ``httpx.Client.request`` (and its async twin) for ``req``."""
    return {
        "method": req.method,
        "url": req.path,
        "params": req.params,
        "json": req.json,
        "headers": req.headers,
        "timeout": req.timeout or httpx.USE_CLIENT_DEFAULT,
    }


def _transport_error(req: _Request, exc: httpx.HTTPError) -> TransportError:
    return TransportError(f"{req.method} {req.path}: {exc}")


def _wait_step(deadline: float) -> tuple[float, float]:
    """Seconds left before ``deadline`` and the ``?wait=`` of the next long poll."""
    left = deadline - time.monotonic()
    return left, max(min(left, MAX_WAIT_S), 0)


def _read(response: httpx.Response) -> Any:
    raise_for_problem(response)
    return response.json()


def _headers(api_key: str) -> dict[str, str]:
    """The headers of every request. A key is sent as the gateway reads it (trimmed); none
    (empty) sends no ``Authorization``, so that the gateway answers 401 ``missing_api_key``
    as it answers every door's caller without one."""
    headers = {"User-Agent": "toolgate-client"}
    if api_key.strip():
        headers["Authorization"] = f"Bearer {api_key.strip()}"
    return headers


def same_key(a: Client | AsyncClient, b: Client | AsyncClient) -> bool:
    """Whether two clients send the same API key: an agent's client and the client of the
    person who decides its calls must not (the gateway refuses self-approval as well)."""
    header = "Authorization"
    return a is b or a._http.headers.get(header) == b._http.headers.get(header)


class Client:
    """The REST API, synchronously. ``defaults``: the ``CallOptions`` of every call that
    passes none."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        defaults: CallOptions | None = None,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.defaults = defaults or CallOptions()
        self._http = httpx.Client(
            base_url=base_url, headers=_headers(api_key), timeout=timeout, transport=transport
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, req: _Request) -> Any:
        try:
            response = self._http.request(**_arguments(req))
        except httpx.HTTPError as exc:
            raise _transport_error(req, exc) from exc
        return _read(response)

    def execute(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        options: CallOptions | None = None,
        *,
        respond_async: bool = False,
    ) -> Execution:
        """Run one call (``POST /v1/executions``): its execution, terminal unless it waits
        for an approval (or ``respond_async``)."""
        body = request_body(tool, arguments or {}, options or self.defaults)
        return Execution(self._send(_Requests.execute(body, respond_async)))

    def plan(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        options: CallOptions | None = None,
    ) -> dict[str, Any]:
        """What the call would do, with no side effect (``POST /v1/plans``)."""
        body = request_body(tool, arguments or {}, options or self.defaults)
        return dict(self._send(_Requests.plan(body)))

    def get(self, execution_id: str, wait: float | None = None) -> Execution:
        return Execution(self._send(_Requests.get(execution_id, wait)))

    def wait(self, execution_id: str, timeout: float = 300.0) -> Execution:
        """Long-poll until the execution is completed or ``timeout`` seconds pass (then it is
        returned as it stands)."""
        deadline = time.monotonic() + timeout
        while True:
            left, wait = _wait_step(deadline)
            execution = self.get(execution_id, wait=wait)
            if execution.terminal or left <= 0:
                return execution

    def find(self, run_id: str | None = None, call_id: str | None = None) -> list[Execution]:
        items = self._send(_Requests.find(run_id, call_id))["items"]
        return [Execution(item) for item in items]

    def cancel(self, execution_id: str) -> Execution:
        return Execution(self._send(_Requests.cancel(execution_id)))

    def events(self, execution_id: str, after: int | None = None) -> list[dict[str, Any]]:
        """The execution's log (``after``: only the events whose ``seq`` is greater), whole:
        the gateway answers a page at a time, and each page's ``next`` is followed to the
        end."""
        items: list[dict[str, Any]] = []
        req: _Request | None = _Requests.events(execution_id, after)
        while req is not None:
            page = self._send(req)
            items.extend(page["items"])
            req = _Requests.next_page(page)
        return items

    def tools(self, format: str | None = None, workspace: str | None = None) -> dict[str, Any]:
        """The tools the caller may use in ``workspace`` (default: the ``defaults``'), as
        every door lists them; ``format`` (``llm``, ``openai``, ``anthropic``, ``mcp``): as
        LLM tool definitions, with ``names`` mapping back."""
        return dict(self._send(_Requests.tools(format, workspace or self.defaults.workspace)))

    def tool(self, name: str, version: str | None = None) -> dict[str, Any]:
        return dict(self._send(_Requests.tool(name, version)))

    def approvals(
        self, status: str | None = None, *, run_id: str | None = None, call_id: str | None = None
    ) -> list[dict[str, Any]]:
        """``GET /v1/approvals``: the inbox (approvers only), or, by ``run_id`` and
        ``call_id``, the approvals of that call the caller may see (its requester too)."""
        return list(self._send(_Requests.approvals(status, run_id, call_id))["items"])

    def approval(self, approval_id: str) -> dict[str, Any]:
        return dict(self._send(_Requests.approval(approval_id)))

    def approve(
        self,
        approval_id: str,
        comment: str | None = None,
        *,
        resume: bool = True,
        arguments: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Approve (``POST /v1/approvals/{id}/approve``); ``arguments``: edit the arguments the
        tool marks editable before approving (the gateway checks the edited call again)."""
        request = _Requests.decide(approval_id, "approve", comment, resume, arguments)
        return dict(self._send(request))

    def deny(self, approval_id: str, comment: str | None = None) -> dict[str, Any]:
        return dict(self._send(_Requests.decide(approval_id, "deny", comment, True)))


class AsyncClient:
    """The REST API, asynchronously: the methods of ``Client``, awaited."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        defaults: CallOptions | None = None,
        timeout: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.defaults = defaults or CallOptions()
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=_headers(api_key), timeout=timeout, transport=transport
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, req: _Request) -> Any:
        try:
            response = await self._http.request(**_arguments(req))
        except httpx.HTTPError as exc:
            raise _transport_error(req, exc) from exc
        return _read(response)

    async def execute(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        options: CallOptions | None = None,
        *,
        respond_async: bool = False,
    ) -> Execution:
        body = request_body(tool, arguments or {}, options or self.defaults)
        return Execution(await self._send(_Requests.execute(body, respond_async)))

    async def plan(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        options: CallOptions | None = None,
    ) -> dict[str, Any]:
        body = request_body(tool, arguments or {}, options or self.defaults)
        return dict(await self._send(_Requests.plan(body)))

    async def get(self, execution_id: str, wait: float | None = None) -> Execution:
        return Execution(await self._send(_Requests.get(execution_id, wait)))

    async def wait(self, execution_id: str, timeout: float = 300.0) -> Execution:
        deadline = time.monotonic() + timeout
        while True:
            left, wait = _wait_step(deadline)
            execution = await self.get(execution_id, wait=wait)
            if execution.terminal or left <= 0:
                return execution

    async def find(self, run_id: str | None = None, call_id: str | None = None) -> list[Execution]:
        items = (await self._send(_Requests.find(run_id, call_id)))["items"]
        return [Execution(item) for item in items]

    async def cancel(self, execution_id: str) -> Execution:
        return Execution(await self._send(_Requests.cancel(execution_id)))

    async def events(self, execution_id: str, after: int | None = None) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        req: _Request | None = _Requests.events(execution_id, after)
        while req is not None:
            page = await self._send(req)
            items.extend(page["items"])
            req = _Requests.next_page(page)
        return items

    async def tools(
        self, format: str | None = None, workspace: str | None = None
    ) -> dict[str, Any]:
        request = _Requests.tools(format, workspace or self.defaults.workspace)
        return dict(await self._send(request))

    async def tool(self, name: str, version: str | None = None) -> dict[str, Any]:
        return dict(await self._send(_Requests.tool(name, version)))

    async def approvals(
        self, status: str | None = None, *, run_id: str | None = None, call_id: str | None = None
    ) -> list[dict[str, Any]]:
        request = _Requests.approvals(status, run_id, call_id)
        return list((await self._send(request))["items"])

    async def approval(self, approval_id: str) -> dict[str, Any]:
        return dict(await self._send(_Requests.approval(approval_id)))

    async def approve(
        self,
        approval_id: str,
        comment: str | None = None,
        *,
        resume: bool = True,
        arguments: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        request = _Requests.decide(approval_id, "approve", comment, resume, arguments)
        return dict(await self._send(request))

    async def deny(self, approval_id: str, comment: str | None = None) -> dict[str, Any]:
        return dict(await self._send(_Requests.decide(approval_id, "deny", comment, True)))
