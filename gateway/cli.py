"""The ``toolgate`` command line: serve, check, tools, call, policy, approvals, keys, audit,
schema."""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.errors import ConfigError, ToolgateError
from gateway.settings import RELOADABLE, Settings, hash_key, load_settings
from gateway.types import ApprovalStatus

if TYPE_CHECKING:
    import socket

    from gateway.declarations.catalogue import Catalogue
    from gateway.runtime.bootstrap import Loaded

from gateway.commands import audit as audit_commands
from gateway.commands import keys as keys_commands
from gateway.commands.common import (
    client_options,
    count,
    fail,
    settings_of,
    warn,
)
from gateway.commands.policy import (
    TEST_TIMEOUT,
    cmd_policy_bundle,
    cmd_policy_eval,
    cmd_policy_input,
    cmd_policy_replay,
    cmd_policy_serve_opa,
    cmd_policy_test,
)
from gateway.commands.remote import cmd_approvals, cmd_call, cmd_executions, cmd_mcp, cmd_reload
from gateway.commands.shadow import cmd_policy_promote, cmd_policy_shadow_report
from gateway.commands.tables import table


def cmd_serve(args: argparse.Namespace) -> int:
    import socket

    import anyio

    from gateway.allocator import limit_arenas
    from gateway.errors import CannotListen
    from gateway.http.jwks import check_file as check_jwks_file
    from gateway.http.server import EXIT_CANNOT_LISTEN, EXIT_START_FAILED, listen, run
    from gateway.notifications.endpoints import check_startup
    from gateway.runtime.bootstrap import check_adapters, load_sources

    limit_arenas()  # before any thread: bursts on the store's threads reuse the same arenas
    config = Path(args.config) if args.config else None
    settings = load_settings(config, host=args.host, port=args.port)
    if args.workers < 1:
        print("toolgate: --workers must be at least 1", file=sys.stderr)
        return 2
    loaded = load_sources(settings)  # fail here, with every fault listed, not mid-startup
    store_url = _safe_url(settings)
    anyio.run(check_adapters, settings, loaded.catalogue)
    check_startup(settings, os.environ)  # the notification endpoints' secrets and templates
    jwks = check_jwks_file(settings)
    if jwks:
        raise ConfigError(jwks)
    if args.listen_fd is not None:  # a worker of `serve --workers N`: the parent's socket
        sock = socket.socket(fileno=args.listen_fd)
    else:
        try:
            sock = listen(settings.host, settings.port)
        except CannotListen as exc:
            print(f"toolgate: {exc.message}", file=sys.stderr)
            return EXIT_CANNOT_LISTEN
        _banner(settings, loaded, sock, store_url)  # once the socket is bound: "listening" is true
    if args.workers > 1:
        from gateway.commands.workers import serve_workers

        return serve_workers(settings, config, sock, args.workers, args.log_level, args.access_log)
    # Every logger, uvicorn's too, through one handler on stderr that masks secrets.
    from gateway.observability.logs import configure

    configure(settings.log_format, args.log_level)
    try:
        return run(_opener(settings, loaded), sock, settings, args.log_level, args.access_log)
    except ConfigError:
        raise  # main lists every fault: exit status 2
    except ToolgateError as exc:  # the store does not answer, say: one line, no traceback
        print(f"toolgate: cannot start: {exc.message}", file=sys.stderr)
        return EXIT_START_FAILED


def _banner(settings: Settings, loaded: Loaded, sock: socket.socket, store_url: str) -> None:
    from gateway.http.server import address

    host, port = sock.getsockname()[:2]  # the port bound, when the configuration says 0
    print(f"toolgate: listening on http://{address(host, port)}")
    print(f"toolgate: store {store_url}")
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
    sys.stdout.flush()  # a log file or pipe shows it now, not when the buffer fills


def _opener(settings: Settings, loaded: Loaded) -> Callable[[], Awaitable[Any]]:
    """Open the app (its runtime), then freeze what start-up made."""

    async def opened() -> Any:
        from gateway.server.app import open_app

        app = await open_app(settings, loaded)
        _freeze_startup_objects()
        return app

    return opened


def _freeze_startup_objects() -> None:
    """Move what start-up allocated (modules, the catalogue, pydantic and SQLAlchemy models:
    about 97,000 objects) out of the garbage collector's reach: a full collection walked all
    of them, a 39 ms pause on the benchmark machine, ~0 ms once they are frozen."""
    gc.collect()
    gc.freeze()


def _safe_url(settings: Settings) -> str:
    from gateway.store.store import parse_url

    return parse_url(settings.resolved_database_url).render_as_string(hide_password=True)


def cmd_check(args: argparse.Namespace) -> int:
    import anyio

    from gateway.audit.keys import check as check_audit_keys
    from gateway.http.jwks import check_file as check_jwks_file
    from gateway.notifications.endpoints import check as check_endpoints
    from gateway.runtime.bootstrap import check_adapters, load_sources, open_workspaces

    settings = settings_of(args)
    problems: list[str] = []  # every check runs, so that one run lists every fault
    loaded = None
    try:
        loaded = load_sources(settings)
        open_workspaces(loaded.policy_data, settings.base_dir)
    except ConfigError as exc:
        problems.extend(exc.problems)
    try:
        _safe_url(settings)  # its form only: check connects to nothing
    except ConfigError as exc:
        problems.extend(exc.problems)
    catalogue = loaded.catalogue if loaded else _loadable_tools(settings)
    try:
        anyio.run(check_adapters, settings, catalogue)
    except ConfigError as exc:
        problems.extend(exc.problems)
    problems.extend(check_endpoints(settings, os.environ))
    problems.extend(check_jwks_file(settings))
    problems.extend(check_audit_keys(settings))
    if problems:
        raise ConfigError(problems)
    assert loaded is not None
    warnings = loaded.sources.warnings
    warn(warnings)
    print(
        f"ok: {len(loaded.catalogue)} tool versions, {len(loaded.sources.modules)} policy "
        f"modules, {len(loaded.sources.test_modules)} policy test modules"
        + (f", {count(warnings, 'warning')}" if warnings else "")
    )
    print(_reload_note(settings))
    if warnings and args.strict:
        print(
            f"toolgate: --strict: warnings fail the check ({count(warnings, 'warning')})",
            file=sys.stderr,
        )
        return EXIT_WARNINGS
    return 0


EXIT_WARNINGS = 1
"""``check --strict``: no fault, but warnings (faults exit 2)."""


def _reload_note(settings: Settings) -> str:
    """What a reload of a running gateway would apply (``settings.RELOADABLE``)."""
    keys = ", ".join(sorted(RELOADABLE))
    where = f" ({settings.config_file.name})" if settings.config_file else ""
    return (
        f"reload (SIGHUP, toolgate reload) applies tools.d, rego/, policies/ and these keys "
        f"of toolgate.yaml{where}: {keys}; a change to any other key needs a restart"
    )


def _loadable_tools(settings: Settings) -> Catalogue:
    """The tools that can be built when some have faults, for the adapters' checks in the
    same run (only a failed load reads tools.d a second time)."""
    from gateway.adapters.registry import SPECS
    from gateway.declarations.catalogue import Catalogue
    from gateway.declarations.loader import read_catalogue

    try:
        return read_catalogue(settings.path(settings.tools_dir), SPECS, faulty=True)[0]
    except ConfigError:
        return Catalogue(())


def cmd_tools(args: argparse.Namespace) -> int:
    from gateway.adapters.registry import SPECS
    from gateway.declarations.loader import load_catalogue
    from gateway.server.render import tool_detail

    settings = settings_of(args)
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
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        help="gateway processes on one socket (docs/deploy.md#several-workers-on-one-host)",
    )
    serve.add_argument("--listen-fd", type=int, help=argparse.SUPPRESS)  # a worker's socket
    serve.set_defaults(fn=cmd_serve)

    check = sub.add_parser("check", help="check toolgate.yaml, tools.d, rego/ and policies/")
    check.add_argument("--strict", action="store_true", help="fail (exit status 1) on warnings too")
    check.set_defaults(fn=cmd_check)

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
    client_options(call)
    call.set_defaults(fn=cmd_call)

    reload = sub.add_parser(
        "reload", help="reload a running gateway's tools.d, rego/ and policies/ (admins)"
    )
    client_options(reload)
    reload.set_defaults(fn=cmd_reload)

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
    ptest.add_argument(
        "--fail-under",
        type=float,
        metavar="PCT",
        help="exit 1 when the tests evaluate less than PCT%% of the policy's lines or reach "
        "less than PCT%% of the decision's rule definitions (implies --coverage)",
    )
    ptest.add_argument(
        "--timeout",
        default=TEST_TIMEOUT,
        metavar="DURATION",
        help="how long one test may run before it fails as out of time (default %(default)s)",
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
    preplay.add_argument(
        "--fail-on",
        choices=["allow-to-deny", "deny-to-allow", "any"],
        default="any",
        help="exit 1 only for stricter changes, only for looser ones, or for any (default)",
    )
    preplay.add_argument("--json", action="store_true", help="print the report as JSON")
    preplay.set_defaults(fn=cmd_policy_replay)
    pshadow = psub.add_parser("shadow", help="the shadow (candidate) policy's differences")
    pshadow_sub = pshadow.add_subparsers(dest="shadow_command", required=True)
    preport = pshadow_sub.add_parser(
        "report", help="what the shadow policy decided otherwise, all replicas (from the store)"
    )
    preport.add_argument("--since", default="1h", help="differences this long ago or later")
    preport.add_argument("--limit", type=int, default=10, help="list the newest N (0: none)")
    preport.add_argument("--json", action="store_true", help="the report as JSON")
    preport.set_defaults(fn=cmd_policy_shadow_report)
    ppromote = psub.add_parser(
        "promote", help="make the shadow policy the enforcing one (copy its files, reload)"
    )
    ppromote.add_argument(
        "--no-reload", action="store_true", help="copy only (reload later: SIGHUP, toolgate reload)"
    )
    client_options(ppromote)
    ppromote.set_defaults(fn=cmd_policy_promote)
    pinput = psub.add_parser(
        "input", help="print the policy input of an execution (from a running gateway)"
    )
    pinput.add_argument("id", help="execution id")
    client_options(pinput)
    pinput.set_defaults(fn=cmd_policy_input)

    approvals = sub.add_parser("approvals", help="list, show and decide approvals")
    asub = approvals.add_subparsers(dest="approvals_command", required=True)
    alist = asub.add_parser(
        "list", help="approvals (approvers), or those of a call you may see by --run-id/--call-id"
    )
    alist.add_argument("--status", choices=[s.value for s in ApprovalStatus])
    alist.add_argument("--run-id", help="only this run's (anyone: the approvals they may see)")
    alist.add_argument("--call-id", help="only this call id's")
    alist.add_argument("--json", action="store_true", help="the API's JSON, for scripts")
    ashow = asub.add_parser("show", help="one approval: tool, arguments, preview, reasons")
    ashow.add_argument("id")
    aapprove = asub.add_parser("approve", help="approve (the gateway then runs the call)")
    aapprove.add_argument("id")
    aapprove.add_argument("--comment")
    aapprove.add_argument(
        "--no-resume", action="store_true", help="hand the agent a token instead of resuming"
    )
    aapprove.add_argument(
        "--edit",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="change an editable argument before approving (VALUE may be JSON)",
    )
    adeny = asub.add_parser("deny", help="deny: the call ends failed")
    adeny.add_argument("id")
    adeny.add_argument("--comment")
    for p in (alist, ashow, aapprove, adeny):
        client_options(p)
        p.set_defaults(fn=cmd_approvals)

    executions = sub.add_parser("executions", help="list, show, cancel or resolve executions")
    esub = executions.add_subparsers(dest="executions_command", required=True)
    elist = esub.add_parser(
        "list", help="your executions, newest first (a table; --json for scripts)"
    )
    elist.add_argument("--run-id", help="only this run's")
    elist.add_argument("--call-id", help="only this call id's")
    elist.add_argument("--json", action="store_true", help="the API's JSON, for scripts")
    client_options(elist)
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
        client_options(p)
        p.set_defaults(fn=cmd_executions)

    keys = sub.add_parser("keys", help="API key helpers")
    ksub = keys.add_subparsers(dest="keys_command", required=True)
    khash = ksub.add_parser("hash", help="print the sha256 to store for a key")
    khash.add_argument("key", nargs="?")
    khash.set_defaults(fn=cmd_keys_hash)
    keys_commands.add_parsers(ksub)

    audit_commands.add_parser(sub)

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
        return fail(exc.problems, "configuration is not valid")
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
