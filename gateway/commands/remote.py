"""The subcommands that talk to a running gateway: call, approvals, executions, reload, mcp."""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from gateway.settings import Settings

if TYPE_CHECKING:
    import httpx


from gateway.commands.common import (
    MAX_WAIT_S,
    UsageError,
    argument,
    arguments_json,
    client_target,
    request,
    segment,
    settings_of,
    unreachable,
)
from gateway.commands.progress import Progress, progress
from gateway.commands.tables import approvals_table, executions_table


def cmd_approvals(args: argparse.Namespace) -> int:
    action = args.approvals_command
    if action == "list":
        found = _query(status=args.status, run_id=args.run_id, call_id=args.call_id)
        return request(args, "GET", f"/v1/approvals{found}", render=approvals_table)
    approval = f"/v1/approvals/{segment(args.id)}"
    if action == "show":
        return request(args, "GET", approval)
    body: dict[str, Any] = {"comment": args.comment} if args.comment else {}
    if action == "approve" and args.no_resume:
        body["resume"] = False
    if action == "approve" and args.edit:
        body["arguments"] = dict(argument(a, "--edit") for a in args.edit)
    return request(args, "POST", f"{approval}/{action}", body)


def _query(**params: str | None) -> str:
    """``?k=v&...`` of the options given (an empty one too: the gateway says what is wrong
    with it), or nothing."""
    given = {k: v for k, v in params.items() if v is not None}
    return f"?{urlencode(given)}" if given else ""


def cmd_executions(args: argparse.Namespace) -> int:
    action = args.executions_command
    if action == "list":
        found = _query(run_id=args.run_id, call_id=args.call_id)
        return request(args, "GET", f"/v1/executions{found}", render=executions_table)
    execution = f"/v1/executions/{segment(args.id)}"
    if action == "show":
        return request(args, "GET", execution)
    if action == "events":
        after = f"?after={args.after}" if args.after is not None else ""
        return request(args, "GET", f"{execution}/events{after}")
    if action == "cancel":
        return request(args, "POST", f"{execution}/cancel")
    body = {"outcome": args.outcome, "note": args.note}
    return request(args, "POST", f"{execution}/resolve", body)


def cmd_reload(args: argparse.Namespace) -> int:
    """``POST /v1/admin/reload``: the answer (or the refusal with its faults) as JSON."""
    return request(args, "POST", "/v1/admin/reload")


def cmd_call(args: argparse.Namespace) -> int:
    import httpx

    settings = settings_of(args)
    url, key = client_target(args, settings)
    headers = {"Authorization": f"Bearer {key}"}
    if args.respond_async:
        headers["Prefer"] = "respond-async"
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=args.timeout) as client:
            response = client.post("/v1/executions", json=_call_body(args, settings, key))
            if args.wait is not None and response.status_code == 202:
                execution_id = response.json()["id"]
                with progress(args, f"execution {execution_id}: waiting") as shown:
                    response = _wait_for(client, execution_id, args.wait, args.timeout, shown)
    except httpx.HTTPError as exc:
        return unreachable(url, exc)
    print(json.dumps(response.json(), indent=2))
    if response.status_code >= 400:
        return 1
    result = response.json().get("result") or {}
    return 0 if result.get("outcome") == "succeeded" else 1


def _call_body(args: argparse.Namespace, settings: Settings, key: str) -> dict[str, Any]:
    """The execution request: fresh run and call ids unless given."""
    arguments = arguments_json(args.args_json)
    arguments.update(dict(argument(a) for a in args.arg))
    body: dict[str, Any] = {
        # an option given is sent as given (an empty one too: the gateway refuses it, as it
        # refuses it from every door); only one not given is made up
        "run_id": f"cli-{uuid.uuid4().hex[:12]}" if args.run_id is None else args.run_id,
        "call_id": uuid.uuid4().hex[:12] if args.call_id is None else args.call_id,
        "tool": {"name": args.tool, "requested_version": args.version},
        "arguments": arguments,
        "workspace": {"id": args.workspace},
    }
    principal = settings.principal_for_key(key)
    agent_id = args.agent_id if args.agent_id is not None else "cli"
    if principal is not None:
        body["actor"] = {"user_id": principal.id, "agent_id": agent_id}
    elif args.agent_id is not None:  # a gateway whose keys this configuration does not know
        body["actor"] = {"agent_id": agent_id}
    if args.idempotency_key is not None:
        body["idempotency_key"] = args.idempotency_key
    return body


def _wait_for(
    client: httpx.Client, execution_id: str, wait: float, timeout: float, shown: Progress
) -> httpx.Response:
    """Long-poll the execution until it is completed, or for at most ``wait`` seconds; its
    status after each poll is ``shown``."""
    deadline = time.monotonic() + wait
    while True:
        left = max(0.0, min(MAX_WAIT_S, deadline - time.monotonic()))
        response = client.get(
            f"/v1/executions/{execution_id}",
            params={"wait": f"{left:.3f}"},
            timeout=timeout + left,
        )
        if response.status_code != 202 or time.monotonic() >= deadline:
            return response
        shown.status(f"execution {execution_id}: {response.json().get('status', 'waiting')}")


def cmd_mcp(args: argparse.Namespace) -> int:
    """A stdio MCP server relaying to a gateway's /mcp (for desktop clients)."""
    import anyio

    from gateway.mcp.bridge import relay

    key = os.environ.get(args.key_env)
    if not key:
        raise UsageError(f"set the API key in ${args.key_env} (the bridge takes no key argument)")
    settings = settings_of(args)
    url = (args.url or f"http://{settings.host}:{settings.port}").rstrip("/")
    if not url.endswith("/mcp"):
        url += "/mcp"
    anyio.run(relay, url, key)
    return 0
