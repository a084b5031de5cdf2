"""``toolgate policy ...``: test, eval, bundle, serve-opa, replay, input."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

from gateway.commands.common import (
    UsageError,
    client_target,
    existing_store_url,
    pages,
    segment,
    settings_of,
    since_duration_ms,
    unreachable,
    warn,
)
from gateway.commands.progress import Progress, progress

TEST_TIMEOUT = "5s"
"""How long one Rego test may run by default (``policy test --timeout``), as ``opa test``'s
default: the shipped tests take about a millisecond each."""


def cmd_policy_test(args: argparse.Namespace) -> int:
    """Run rego/*_test.rego (docs/policies.md#writing-tests), each within ``--timeout``; exit 1
    on a failure (a test out of time included), when no test ran, or (``--fail-under PCT``)
    when the coverage of lines or of the decision's rule definitions is below PCT percent."""
    from gateway.policy.loader import load_policy_sources
    from gateway.policy.testing import format_report, run_tests
    from gateway.units import parse_duration

    try:
        pattern = re.compile(args.run) if args.run is not None else None
    except re.error as exc:
        raise UsageError(f"--run {args.run!r}: not a regular expression: {exc}") from exc
    fail_under = args.fail_under
    if fail_under is not None and not 0 <= fail_under <= 100:
        raise UsageError(f"--fail-under {fail_under:g}: must be a percentage, 0 to 100")
    try:
        timeout = parse_duration(args.timeout)
    except ValueError as exc:
        raise UsageError(f"--timeout {args.timeout!r}: {exc}") from exc
    settings = settings_of(args)
    sources = load_policy_sources(
        settings.path(settings.rego_dir), settings.path(settings.policies_dir)
    )
    warn(sources.warnings)
    with progress(args, "policy tests") as shown:
        run = run_tests(
            sources,
            args.filter,
            pattern,
            coverage=args.coverage or fail_under is not None,
            on_step=shown.step,
            timeout=timeout,
        )
    print(format_report(run.results, verbose=args.verbose, skipped=run.skipped))
    for line in run.coverage:
        print(line)
    if run.totals is not None and (args.coverage or fail_under is not None):
        print(run.totals.line(fail_under))
    if not run.results:
        print("toolgate: no test ran", file=sys.stderr)
        return 1
    if fail_under is not None:
        if run.totals is None:
            print("toolgate: --fail-under: the engine reported no coverage", file=sys.stderr)
            return 1
        if run.totals.below(fail_under):
            return 1
    return 0 if all(r.passed for r in run.results) else 1


def cmd_policy_eval(args: argparse.Namespace) -> int:
    from gateway.policy.embedded import EmbeddedPolicy
    from gateway.policy.loader import load_policy_sources

    settings = settings_of(args)
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

    settings = settings_of(args)
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
    (docs/policies.md#policy-replay); exit 1 when some decision would change as ``--fail-on``
    says (any change, only stricter ones, only looser ones), 0 when none would, 2 on an
    error."""
    import asyncio

    from gateway.policy import replay
    from gateway.policy.loader import load_policy_sources
    from gateway.store.store import Store

    since_ms = since_duration_ms(args.since)
    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    settings = settings_of(args)
    rego = Path(args.rego) if args.rego else settings.path(settings.rego_dir)
    data = Path(args.data) if args.data else settings.path(settings.policies_dir)
    sources = load_policy_sources(rego, data)
    warn(sources.warnings)
    url = existing_store_url(settings, ": nothing to replay")

    async def run(shown: Progress) -> replay.ReplayReport:
        store = Store(url)  # read only: never opened (that would create the schema)
        try:
            found, executions, more = await replay.recorded_decisions(
                store, since_ms, args.limit, on_step=shown.step
            )
        finally:
            store.engine.dispose()
        shown.status("replaying decisions")
        shown.restart()
        return await replay.replay(
            found, sources, settings.policy_input_mask, executions, more, on_step=shown.step
        )

    with progress(args, "reading executions") as shown:
        report = asyncio.run(run(shown))
    print(f"toolgate: replaying against {rego} and {data}", file=sys.stderr)
    if args.json:
        print(json.dumps(report.to_json(args.fail_on), indent=2))
    else:
        for line in report.lines():
            print(line)
    return 1 if report.failing(args.fail_on) else 0


def cmd_policy_input(args: argparse.Namespace) -> int:
    """Print the policy input of an execution's last decision (its ``policy.decided`` event)."""
    import httpx

    settings = settings_of(args)
    url, key = client_target(args, settings)
    headers = {"Authorization": f"Bearer {key}"}
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=args.timeout) as http:
            failed, answer = pages(http, http.get(f"/v1/executions/{segment(args.id)}/events"))
    except httpx.HTTPError as exc:
        return unreachable(url, exc)
    if failed:
        print(json.dumps(answer, indent=2))
        return 1
    decided = [
        e
        for e in answer.get("items", [])
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
