"""The ``toolgate`` command line: serve, check, tools, call, policy, approvals, keys, schema."""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import re
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from gateway.errors import ConfigError, RequestError, ToolgateError
from gateway.settings import Settings, hash_key, load_settings
from gateway.types import ApprovalStatus

if TYPE_CHECKING:
    import httpx

    from gateway.declarations.catalogue import Catalogue

MAX_WAIT_S = 60.0
"""The longest ``?wait=`` the gateway accepts; ``call --wait`` asks again after each."""


class UsageError(RequestError):
    """A command line that cannot work as given (a missing API key, a malformed --arg, an
    unreadable input file): not a fault of the configuration. Printed, never sent."""


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(Path(args.config) if args.config else None)


def _fail(problems: Sequence[str], what: str) -> int:
    print(f"toolgate: {what}:", file=sys.stderr)
    for problem in problems:
        print(f"  - {problem}", file=sys.stderr)
    return 2


def cmd_serve(args: argparse.Namespace) -> int:
    import anyio
    import uvicorn

    from gateway.runtime.bootstrap import check_adapters, load_sources
    from gateway.server.app import create_app

    settings = load_settings(
        Path(args.config) if args.config else None, host=args.host, port=args.port
    )
    loaded = load_sources(settings)  # fail here, with every fault listed, not mid-startup
    anyio.run(check_adapters, settings, loaded.catalogue)
    print(f"toolgate: listening on http://{settings.host}:{settings.port}")
    print(f"toolgate: store {_safe_url(settings)}")
    print(
        f"toolgate: {len(loaded.catalogue)} tool versions from {settings.path(settings.tools_dir)}:"
    )
    for tool in loaded.catalogue.all():
        flag = " (disabled)" if tool.disabled else " (deprecated)" if tool.deprecated else ""
        print(f"    {tool.ref}{flag}")
    modules = ", ".join(name for name, _ in loaded.sources.modules)
    print(
        f"toolgate: policy {settings.policy_backend}: {modules} + data from {settings.policies_dir}"
    )
    if settings.faults:
        print(f"toolgate: FAULT INJECTION ON: {settings.faults}", file=sys.stderr)
    for principal in settings.principals:
        if principal.label:
            print(f"toolgate: principal {principal.id}: {principal.label}")
    app = create_app(settings, loaded=loaded)
    _freeze_startup_objects()
    json_logs = settings.log_format == "json"
    if json_logs:  # every logger, uvicorn's too, one JSON object a line on stderr
        from gateway.observability.logs import configure_json

        configure_json(args.log_level)
    from uvicorn.config import LOGGING_CONFIG

    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=args.log_level,
        access_log=args.access_log,
        server_header=False,
        log_config=None if json_logs else LOGGING_CONFIG,
    )
    return 0


def _freeze_startup_objects() -> None:
    """Move what start-up allocated (modules, the catalogue, pydantic and SQLAlchemy models:
    about 97,000 objects) out of the garbage collector's reach: a full collection walked all
    of them, a 39 ms pause on the benchmark machine, ~0 ms once they are frozen."""
    gc.collect()
    gc.freeze()


def _safe_url(settings: Settings) -> str:
    from sqlalchemy.engine import make_url

    return make_url(settings.resolved_database_url).render_as_string(hide_password=True)


def cmd_check(args: argparse.Namespace) -> int:
    import anyio

    from gateway.runtime.bootstrap import check_adapters, load_sources, open_workspaces

    settings = _settings(args)
    problems: list[str] = []  # every check runs, so that one run lists every fault
    loaded = None
    try:
        loaded = load_sources(settings)
        open_workspaces(loaded.policy_data.workspaces, settings.base_dir)
    except ConfigError as exc:
        problems.extend(exc.problems)
    catalogue = loaded.catalogue if loaded else _loadable_tools(settings)
    try:
        anyio.run(check_adapters, settings, catalogue)
    except ConfigError as exc:
        problems.extend(exc.problems)
    if problems:
        raise ConfigError(problems)
    assert loaded is not None
    _warn(loaded.sources.warnings)
    print(
        f"ok: {len(loaded.catalogue)} tool versions, {len(loaded.sources.modules)} policy "
        f"modules, {len(loaded.sources.test_modules)} policy test modules"
        + (f", {_count(loaded.sources.warnings, 'warning')}" if loaded.sources.warnings else "")
    )
    return 0


def _loadable_tools(settings: Settings) -> Catalogue:
    """The tools that load when others do not, for the adapters' checks (only a failed
    load reads tools.d a second time)."""
    from gateway.adapters.registry import SPECS
    from gateway.declarations.catalogue import Catalogue
    from gateway.declarations.loader import read_catalogue

    try:
        return read_catalogue(settings.path(settings.tools_dir), SPECS)[0]
    except ConfigError:
        return Catalogue(())


def _count(items: Sequence[object], noun: str) -> str:
    return f"{len(items)} {noun}" + ("" if len(items) == 1 else "s")


def _warn(warnings: Sequence[str]) -> None:
    """Policy warnings (docs/policies.md#what-the-load-checks-catch), one line each."""
    for warning in warnings:
        print(f"toolgate: warning: {warning}", file=sys.stderr)


def cmd_tools(args: argparse.Namespace) -> int:
    from gateway.adapters.registry import SPECS
    from gateway.declarations.loader import load_catalogue
    from gateway.server.render import tool_detail

    settings = _settings(args)
    catalogue = load_catalogue(settings.path(settings.tools_dir), SPECS)
    if args.name:
        tool = catalogue.resolve(args.name, args.version)
        print(json.dumps(tool_detail(tool, catalogue.versions(args.name)), indent=2))
        return 0
    tools = list(catalogue.all())
    if args.json:
        listed = [
            {**tool.summary(), "deprecated": tool.deprecated, "disabled": tool.disabled}
            for tool in tools
        ]
        print(json.dumps({"items": listed, "count": len(listed)}, indent=2))
        return 0
    rows = [
        [
            tool.name,
            str(tool.version),
            tool.risk.value,
            tool.side_effect.value,
            "disabled" if tool.disabled else "deprecated" if tool.deprecated else "",
        ]
        for tool in tools
    ]
    print(table(["TOOL", "VERSION", "RISK", "SIDE EFFECT", "STATE"], rows))
    return 0


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Rows under headers in aligned columns (the last one unpadded), for people."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        padded = [str(c).ljust(w) for c, w in zip(cells[:-1], widths, strict=False)]
        return "  ".join([*padded, str(cells[-1])]).rstrip()

    return "\n".join([line(headers), *(line(r) for r in rows)])


def _when(ms: object) -> str:
    """An epoch-milliseconds time as local ``YYYY-MM-DD HH:MM:SS``; ``-`` when absent."""
    if not isinstance(ms, int):
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


def _left(ms: object) -> str:
    """Time left until an epoch-milliseconds instant, e.g. ``42m``; ``expired`` when past."""
    if not isinstance(ms, int):
        return "-"
    seconds = int(ms / 1000 - time.time())
    if seconds <= 0:
        return "expired"
    if seconds < 120:
        return f"{seconds}s"
    return f"{seconds // 60}m" if seconds < 7200 else f"{seconds // 3600}h"


def approvals_table(items: Sequence[dict[str, Any]]) -> str:
    rows = [
        [
            a.get("id", ""),
            a.get("status", ""),
            f"{a['tool']['name']}@{a['tool']['version']}",
            a.get("requested_by", ""),
            a.get("workspace", ""),
            _when(a.get("requested_at_ms")),
            _left(a.get("expires_at_ms")) if a.get("status") == "pending" else "-",
            "; ".join(a.get("reasons") or []),
        ]
        for a in items
    ]
    headers = ["ID", "STATUS", "TOOL", "REQUESTED BY", "WORKSPACE", "REQUESTED", "LEFT", "REASONS"]
    return table(headers, rows)


def executions_table(items: Sequence[dict[str, Any]]) -> str:
    rows = []
    for e in items:
        result = e.get("result") or {}
        error = result.get("error") or {}
        rows.append(
            [
                e.get("id", ""),
                e.get("run_id", ""),
                e.get("call_id", ""),
                f"{e['tool']['name']}@{e['tool']['version'] or '?'}",
                e.get("status", ""),
                result.get("outcome") or "-",
                error.get("type") or "",
                _when(e.get("created_at_ms")),
            ]
        )
    headers = ["ID", "RUN", "CALL", "TOOL", "STATUS", "OUTCOME", "ERROR", "CREATED"]
    return table(headers, rows)


def cmd_policy_test(args: argparse.Namespace) -> int:
    """Run rego/*_test.rego (docs/policies.md#writing-tests); exit 1 on a failure or when no
    test ran."""
    from gateway.policy.loader import load_policy_sources
    from gateway.policy.testing import format_report, run_tests

    try:
        pattern = re.compile(args.run) if args.run is not None else None
    except re.error as exc:
        raise UsageError(f"--run {args.run!r}: not a regular expression: {exc}") from exc
    settings = _settings(args)
    sources = load_policy_sources(
        settings.path(settings.rego_dir), settings.path(settings.policies_dir)
    )
    _warn(sources.warnings)
    run = run_tests(sources, args.filter, pattern, coverage=args.coverage)
    print(format_report(run.results, verbose=args.verbose, skipped=run.skipped))
    for line in run.coverage:
        print(line)
    if not run.results:
        print("toolgate: no test ran", file=sys.stderr)
        return 1
    return 0 if all(r.passed for r in run.results) else 1


def cmd_policy_eval(args: argparse.Namespace) -> int:
    from gateway.policy.embedded import EmbeddedPolicy
    from gateway.policy.loader import load_policy_sources

    settings = _settings(args)
    sources = load_policy_sources(
        settings.path(settings.rego_dir), settings.path(settings.policies_dir)
    )
    source = "standard input" if args.input in (None, "-") else args.input
    try:
        text = sys.stdin.read() if source == "standard input" else Path(source).read_text("utf-8")
        document = json.loads(text)
    except (OSError, ValueError) as exc:
        raise UsageError(f"{source}: cannot read a JSON input document: {exc}") from exc
    if not isinstance(document, dict):
        raise UsageError(f"{source}: the input document must be a JSON object")
    decision = EmbeddedPolicy(sources).decide_sync(document)
    print(json.dumps(decision.to_json(), indent=2))
    return 0


def _policy_sources(args: argparse.Namespace) -> Any:
    from gateway.policy.loader import load_policy_sources

    settings = _settings(args)
    return load_policy_sources(
        settings.path(settings.rego_dir), settings.path(settings.policies_dir)
    )


def cmd_policy_bundle(args: argparse.Namespace) -> int:
    """Write the OPA bundle of rego/ and policies/ (docs/policies.md#bundles)."""
    from gateway.policy import bundle

    sources = _policy_sources(args)
    key = None
    if args.signing_key:
        try:
            key = Path(args.signing_key).read_bytes()
        except OSError as exc:
            raise UsageError(f"--signing-key: cannot read {args.signing_key}: {exc}") from exc
        if args.signing_alg == "HS256":
            key = key.strip()
    built = bundle.build(
        sources, key=key, algorithm=args.signing_alg, keyid=args.keyid, scope=args.scope
    )
    Path(args.output).write_bytes(built.data)
    signed = f", signed {args.signing_alg}" if key else ""
    print(f"wrote {args.output}: revision {built.revision}, roots {list(built.roots)}{signed}")
    return 0


def cmd_policy_serve_opa(args: argparse.Namespace) -> int:
    """Serve OPA's Data API over the embedded engine, for local development."""
    from gateway.policy import bundle
    from gateway.policy.standin import StandIn

    if args.bundle:
        try:
            data = Path(args.bundle).read_bytes()
        except OSError as exc:
            raise UsageError(f"--bundle: cannot read {args.bundle}: {exc}") from exc
    else:
        data = bundle.build(_policy_sources(args)).data
    server = StandIn.from_bundle(data, args.host, args.port)
    print(f"toolgate: OPA stand-in (not OPA) on {server.url}, revision {server.revision}")
    try:
        server.server.serve_forever()
    finally:
        server.server.server_close()
    return 0


def cmd_policy_replay(args: argparse.Namespace) -> int:
    """Decide the recorded policy inputs of past calls again under a candidate policy
    (docs/policies.md#policy-replay); exit 1 when some decision would change."""
    import asyncio

    from gateway.policy import replay
    from gateway.policy.loader import load_policy_sources
    from gateway.store.store import Store
    from gateway.units import parse_duration

    try:
        since_s = parse_duration(args.since)
    except ValueError as exc:
        raise UsageError(f"--since {args.since!r}: {exc}") from exc
    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    settings = _settings(args)
    rego = Path(args.rego) if args.rego else settings.path(settings.rego_dir)
    data = Path(args.data) if args.data else settings.path(settings.policies_dir)
    sources = load_policy_sources(rego, data)
    _warn(sources.warnings)
    url = settings.resolved_database_url
    sqlite_file = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else None
    if sqlite_file is not None and ":memory:" not in url and not Path(sqlite_file).is_file():
        raise UsageError(f"no store at {sqlite_file} (database_url): nothing to replay")
    since_ms = int((time.time() - since_s) * 1000)

    async def run() -> replay.ReplayReport:
        store = Store(url)  # read only: never opened (that would create the schema)
        try:
            found, executions, more = await replay.recorded_decisions(store, since_ms, args.limit)
        finally:
            store.engine.dispose()
        return await replay.replay(found, sources, settings.policy_input_mask, executions, more)

    report = asyncio.run(run())
    print(f"toolgate: replaying against {rego} and {data}", file=sys.stderr)
    for line in report.lines():
        print(line)
    return 1 if report.changes else 0


def cmd_policy_input(args: argparse.Namespace) -> int:
    """Print the policy input of an execution's last decision (its ``policy.decided`` event)."""
    import httpx

    settings = _settings(args)
    url, key = _client_target(args, settings)
    try:
        response = httpx.get(
            f"{url}/v1/executions/{args.id}/events",
            headers={"Authorization": f"Bearer {key}"},
            timeout=args.timeout,
        )
    except httpx.HTTPError as exc:
        print(f"toolgate: cannot reach the gateway at {url}: {exc}", file=sys.stderr)
        return 3
    if response.status_code >= 400:
        print(json.dumps(response.json(), indent=2))
        return 1
    decided = [
        e
        for e in response.json().get("items", [])
        if e.get("type") == "policy.decided" and "input" in e.get("data", {})
    ]
    if not decided:
        print(f"toolgate: execution {args.id} has no recorded policy input", file=sys.stderr)
        return 1
    data = decided[-1]["data"]
    if data.get("input_truncated"):
        print(
            "toolgate: note: long arguments were cut in this record (docs/policies.md)",
            file=sys.stderr,
        )
    print(json.dumps(data["input"], indent=2))
    return 0


def cmd_keys_hash(args: argparse.Namespace) -> int:
    key = args.key if args.key else sys.stdin.readline().strip()
    print(hash_key(key))
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from gateway.adapters.registry import SPECS
    from gateway.declarations.loader import declaration_json_schema

    schema = declaration_json_schema(SPECS)
    print(json.dumps(schema, indent=2, sort_keys=True))
    return 0


def _argument(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep:
        raise UsageError(f"--arg {text!r}: use NAME=VALUE")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def _arguments_json(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        arguments = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--args-json is not JSON: {exc}") from exc
    if not isinstance(arguments, dict):
        raise UsageError("--args-json must be one JSON object of arguments")
    return arguments


def _client_target(args: argparse.Namespace, settings: Settings) -> tuple[str, str]:
    """(base URL, API key) for commands that talk to a running gateway."""
    key = args.key or os.environ.get("TOOLGATE_API_KEY")
    if not key:
        raise UsageError("give an API key with --key or TOOLGATE_API_KEY")
    return args.url or f"http://{settings.host}:{settings.port}", key


def _request(
    args: argparse.Namespace,
    method: str,
    path: str,
    body: Any = None,
    render: Callable[[Sequence[dict[str, Any]]], str] | None = None,
) -> int:
    """Send one request to the gateway, print the answer: its ``items`` as ``render`` makes
    them a table, unless ``--json`` (or an error: always the problem's JSON); exit code 1 on
    an error."""
    import httpx

    settings = _settings(args)
    url, key = _client_target(args, settings)
    try:
        response = httpx.request(
            method,
            url + path,
            json=body,
            headers={"Authorization": f"Bearer {key}"},
            timeout=args.timeout,
        )
    except httpx.HTTPError as exc:
        print(f"toolgate: cannot reach the gateway at {url}: {exc}", file=sys.stderr)
        return 3
    failed = response.status_code >= 400
    if render is not None and not failed and not getattr(args, "json", False):
        items = response.json().get("items", [])
        print(render(items) if items else "(none)")
    else:
        print(json.dumps(response.json(), indent=2))
    return 1 if failed else 0


def cmd_approvals(args: argparse.Namespace) -> int:
    action = args.approvals_command
    if action == "list":
        query = f"?status={args.status}" if args.status else ""
        return _request(args, "GET", f"/v1/approvals{query}", render=approvals_table)
    if action == "show":
        return _request(args, "GET", f"/v1/approvals/{args.id}")
    body: dict[str, Any] = {"comment": args.comment} if args.comment else {}
    if action == "approve" and args.no_resume:
        body["resume"] = False
    return _request(args, "POST", f"/v1/approvals/{args.id}/{action}", body)


def cmd_executions(args: argparse.Namespace) -> int:
    action = args.executions_command
    if action == "list":
        query = urlencode(
            {k: v for k, v in (("run_id", args.run_id), ("call_id", args.call_id)) if v}
        )
        path = "/v1/executions" + (f"?{query}" if query else "")
        return _request(args, "GET", path, render=executions_table)
    if action == "show":
        return _request(args, "GET", f"/v1/executions/{args.id}")
    if action == "events":
        after = f"?after={args.after}" if args.after is not None else ""
        return _request(args, "GET", f"/v1/executions/{args.id}/events{after}")
    if action == "cancel":
        return _request(args, "POST", f"/v1/executions/{args.id}/cancel")
    body = {"outcome": args.outcome, "note": args.note}
    return _request(args, "POST", f"/v1/executions/{args.id}/resolve", body)


def cmd_call(args: argparse.Namespace) -> int:
    import httpx

    settings = _settings(args)
    url, key = _client_target(args, settings)
    headers = {"Authorization": f"Bearer {key}"}
    if args.respond_async:
        headers["Prefer"] = "respond-async"
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=args.timeout) as client:
            response = client.post("/v1/executions", json=_call_body(args, settings, key))
            if args.wait is not None and response.status_code == 202:
                response = _wait_for(client, response.json()["id"], args.wait, args.timeout)
    except httpx.HTTPError as exc:
        print(f"toolgate: cannot reach the gateway at {url}: {exc}", file=sys.stderr)
        return 3
    print(json.dumps(response.json(), indent=2))
    if response.status_code >= 400:
        return 1
    result = response.json().get("result") or {}
    return 0 if result.get("outcome") == "succeeded" else 1


def _call_body(args: argparse.Namespace, settings: Settings, key: str) -> dict[str, Any]:
    """The execution request: fresh run and call ids unless given."""
    arguments = _arguments_json(args.args_json)
    arguments.update(dict(_argument(a) for a in args.arg))
    body: dict[str, Any] = {
        "run_id": args.run_id or f"cli-{uuid.uuid4().hex[:12]}",
        "call_id": args.call_id or uuid.uuid4().hex[:12],
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
    if args.idempotency_key:
        body["idempotency_key"] = args.idempotency_key
    return body


def _wait_for(
    client: httpx.Client, execution_id: str, wait: float, timeout: float
) -> httpx.Response:
    """Long-poll the execution until it is completed, or for at most ``wait`` seconds."""
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


def cmd_mcp(args: argparse.Namespace) -> int:
    """A stdio MCP server relaying to a gateway's /mcp (for desktop clients)."""
    import anyio

    from gateway.mcp.bridge import relay

    key = os.environ.get(args.key_env)
    if not key:
        raise UsageError(f"set the API key in ${args.key_env} (the bridge takes no key argument)")
    settings = _settings(args)
    url = (args.url or f"http://{settings.host}:{settings.port}").rstrip("/")
    if not url.endswith("/mcp"):
        url += "/mcp"
    anyio.run(relay, url, key)
    return 0


def _client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--key", help="API key (default $TOOLGATE_API_KEY)")
    parser.add_argument("--url", help="gateway URL (default from the configuration)")
    parser.add_argument("--timeout", type=float, default=60.0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="toolgate", description=__doc__)
    parser.add_argument(
        "--config", help="configuration file (default ./toolgate.yaml or $TOOLGATE_CONFIG)"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="start the gateway")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--log-level", default="info")
    serve.add_argument("--access-log", action="store_true")
    serve.set_defaults(fn=cmd_serve)

    sub.add_parser("check", help="check tools.d, rego/ and policies/").set_defaults(fn=cmd_check)

    tools = sub.add_parser("tools", help="list tools, or show one with its input schema")
    tools.add_argument("name", nargs="?")
    tools.add_argument("--version")
    tools.add_argument("--json", action="store_true", help="the list as JSON, for scripts")
    tools.set_defaults(fn=cmd_tools)

    call = sub.add_parser("call", help="send one execution request to a running gateway")
    call.add_argument("tool")
    call.add_argument("--arg", action="append", default=[], help="NAME=VALUE (VALUE may be JSON)")
    call.add_argument("--args-json", help="all arguments as one JSON object")
    call.add_argument("--version")
    call.add_argument("--workspace", default="demo")
    call.add_argument("--run-id")
    call.add_argument("--call-id")
    call.add_argument("--idempotency-key")
    call.add_argument("--agent-id", help="which agent of yours is calling (default cli)")
    call.add_argument(
        "--wait",
        type=float,
        nargs="?",
        const=math.inf,
        metavar="SECONDS",
        help="wait until the call is completed (at most SECONDS; no limit without it)",
    )
    call.add_argument(
        "--async",
        dest="respond_async",
        action="store_true",
        help="send Prefer: respond-async (answer once accepted; a worker runs it)",
    )
    _client_options(call)
    call.set_defaults(fn=cmd_call)

    bridge = sub.add_parser("mcp", help="stdio MCP server relaying to a gateway's /mcp")
    bridge.add_argument(
        "--url", help="the gateway (or its /mcp) URL (default from the configuration)"
    )
    bridge.add_argument(
        "--key-env",
        default="TOOLGATE_API_KEY",
        help="environment variable holding the API key (default TOOLGATE_API_KEY)",
    )
    bridge.set_defaults(fn=cmd_mcp)

    policy = sub.add_parser("policy", help="test or evaluate the Rego policy")
    psub = policy.add_subparsers(dest="policy_command", required=True)
    ptest = psub.add_parser("test", help="run rego/*_test.rego")
    ptest.add_argument("--filter", default=None, help="only tests whose name contains this")
    ptest.add_argument(
        "--run", metavar="REGEX", help="only tests whose package.rule name matches (re.search)"
    )
    ptest.add_argument(
        "--fail-on-empty",
        action="store_true",
        help="exit 1 when no test ran (always so; accepted as opa test spells it)",
    )
    ptest.add_argument(
        "-v", "--verbose", action="store_true", help="every test's name and result, and skips"
    )
    ptest.add_argument(
        "--coverage",
        action="store_true",
        help="then the lines of each policy module and the rules of the decision no test reached",
    )
    ptest.set_defaults(fn=cmd_policy_test)
    peval = psub.add_parser("eval", help="print the decision for an input document")
    peval.add_argument(
        "--input", help="JSON file with the policy input ('-' or none: standard input)"
    )
    peval.set_defaults(fn=cmd_policy_eval)
    pbundle = psub.add_parser("bundle", help="write an OPA bundle of rego/ and policies/")
    pbundle.add_argument("-o", "--output", default="bundle.tar.gz")
    pbundle.add_argument("--signing-key", help="HS256 secret or RS256 private key (PEM) file")
    pbundle.add_argument("--signing-alg", choices=["HS256", "RS256"], default="HS256")
    pbundle.add_argument("--keyid", help="the key id OPA verifies with (signing.keyid)")
    pbundle.add_argument("--scope", help="the signature's scope claim")
    pbundle.set_defaults(fn=cmd_policy_bundle)
    pserve = psub.add_parser(
        "serve-opa", help="serve OPA's Data API over the embedded engine (local development)"
    )
    pserve.add_argument("--bundle", help="a bundle file (default: built from rego/, policies/)")
    pserve.add_argument("--host", default="127.0.0.1")
    pserve.add_argument("--port", type=int, default=8181)
    pserve.set_defaults(fn=cmd_policy_serve_opa)
    preplay = psub.add_parser(
        "replay",
        help="decide past calls' recorded inputs again under a candidate policy (exit 1: changes)",
    )
    preplay.add_argument(
        "--since", default="24h", help="executions created this long ago or later (24h, 30m)"
    )
    preplay.add_argument("--rego", help="the candidate's Rego directory (default: rego_dir)")
    preplay.add_argument("--data", help="the candidate's data directory (default: policies_dir)")
    preplay.add_argument(
        "--limit", type=int, default=1000, help="at most this many executions, the newest"
    )
    preplay.set_defaults(fn=cmd_policy_replay)
    pinput = psub.add_parser(
        "input", help="print the policy input of an execution (from a running gateway)"
    )
    pinput.add_argument("id", help="execution id")
    _client_options(pinput)
    pinput.set_defaults(fn=cmd_policy_input)

    approvals = sub.add_parser("approvals", help="list, show and decide approvals")
    asub = approvals.add_subparsers(dest="approvals_command", required=True)
    alist = asub.add_parser("list", help="approvals, optionally by --status")
    alist.add_argument("--status", choices=[s.value for s in ApprovalStatus])
    alist.add_argument("--json", action="store_true", help="the API's JSON, for scripts")
    ashow = asub.add_parser("show", help="one approval: tool, arguments, preview, reasons")
    ashow.add_argument("id")
    aapprove = asub.add_parser("approve", help="approve (the gateway then runs the call)")
    aapprove.add_argument("id")
    aapprove.add_argument("--comment")
    aapprove.add_argument(
        "--no-resume", action="store_true", help="hand the agent a token instead of resuming"
    )
    adeny = asub.add_parser("deny", help="deny: the call ends failed")
    adeny.add_argument("id")
    adeny.add_argument("--comment")
    for p in (alist, ashow, aapprove, adeny):
        _client_options(p)
        p.set_defaults(fn=cmd_approvals)

    executions = sub.add_parser("executions", help="list, show, cancel or resolve executions")
    esub = executions.add_subparsers(dest="executions_command", required=True)
    elist = esub.add_parser(
        "list", help="your executions, newest first (a table; --json for scripts)"
    )
    elist.add_argument("--run-id", help="only this run's")
    elist.add_argument("--call-id", help="only this call id's")
    elist.add_argument("--json", action="store_true", help="the API's JSON, for scripts")
    _client_options(elist)
    elist.set_defaults(fn=cmd_executions)
    eshow = esub.add_parser("show", help="one execution")
    eevents = esub.add_parser("events", help="its event log")
    eevents.add_argument("--after", type=int, metavar="SEQ", help="only events after this seq")
    ecancel = esub.add_parser("cancel", help="ask it to stop")
    eresolve = esub.add_parser("resolve", help="settle an unknown outcome (approvers)")
    eresolve.add_argument("--outcome", required=True, choices=["succeeded", "failed"])
    eresolve.add_argument("--note", required=True, help="how you know")
    for p in (eshow, eevents, ecancel, eresolve):
        p.add_argument("id")
        _client_options(p)
        p.set_defaults(fn=cmd_executions)

    keys = sub.add_parser("keys", help="API key helpers")
    ksub = keys.add_subparsers(dest="keys_command", required=True)
    khash = ksub.add_parser("hash", help="print the sha256 to store for a key")
    khash.add_argument("key", nargs="?")
    khash.set_defaults(fn=cmd_keys_hash)

    schema = sub.add_parser("schema", help="print the JSON Schema of the declaration format")
    schema.set_defaults(fn=cmd_schema)
    return parser


EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what ``cat``/``grep`` exit with when the reader closes first."""


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.fn(args)
        sys.stdout.flush()  # a closed reader (``| head``) shows here, not at exit
    except BrokenPipeError:
        return _reader_gone()
    except ConfigError as exc:
        return _fail(exc.problems, "configuration is not valid")
    except ToolgateError as exc:
        print(f"toolgate: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code


def _reader_gone() -> int:
    """The reader of stdout went away (``toolgate tools | head -1``): stop quietly. Point
    stdout at /dev/null so that the interpreter's last flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    raise SystemExit(main())
