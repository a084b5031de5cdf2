"""``toolgate policy shadow report`` and ``toolgate policy promote``
(docs/policies.md#shadow-policies)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from gateway.commands.common import (
    UsageError,
    existing_store_url,
    request,
    settings_of,
    since_duration_ms,
    warn,
)


def cmd_policy_shadow_report(args: argparse.Namespace) -> int:
    """What the shadow policy decided otherwise since ``--since``, read from the store (so
    every replica's differences); exit 0 (differences are a report, not a failure)."""
    import asyncio

    from gateway.store.store import Store

    since_ms = since_duration_ms(args.since)
    if args.limit < 0:
        raise UsageError("--limit must be 0 or more")
    url = existing_store_url(settings_of(args), ": nothing to report")

    async def read() -> tuple[list[tuple[str, str, int]], list[Any]]:
        store = Store(url)  # read only: never opened (that would create the schema)
        try:
            counts = await store.shadow_counts(since_ms)
            latest = await store.shadow_differences(since_ms, args.limit) if args.limit else []
        finally:
            store.engine.dispose()
        return counts, latest

    counts, latest = asyncio.run(read())
    report = _report(args.since, since_ms, counts, latest)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for line in _lines(report):
            print(line)
    return 0


def _report(
    since: str, since_ms: int, counts: list[tuple[str, str, int]], latest: list[Any]
) -> dict[str, Any]:
    by_kind: dict[str, int] = {}
    by_tool: dict[str, dict[str, int]] = {}
    for kind, tool, n in counts:
        by_kind[kind] = by_kind.get(kind, 0) + n
        by_tool.setdefault(tool, {})[kind] = n
    return {
        "since": since,
        "since_ms": since_ms,
        "differences": sum(by_kind.values()),
        "by_kind": dict(sorted(by_kind.items())),
        "by_tool": by_tool,
        "latest": [
            {
                "at_ms": d.at_ms,
                "kind": d.kind,
                "tool": d.tool_name,
                "execution_id": d.execution_id,
                "call_id": d.call_id,
                "enforced": {"revision": d.enforced_revision, **json.loads(d.enforced_json)},
                "candidate": {"revision": d.candidate_revision, **json.loads(d.candidate_json)},
            }
            for d in latest
        ],
    }


def _lines(report: dict[str, Any]) -> list[str]:
    lines = [f"shadow policy differences in the last {report['since']}: {report['differences']}"]
    for kind, n in report["by_kind"].items():
        lines.append(f"  {kind:<32} {n}")
    if report["by_tool"]:
        lines.append("by tool:")
        for tool, kinds in sorted(report["by_tool"].items()):
            shown = ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items()))
            lines.append(f"  {tool}: {shown}")
    if report["latest"]:
        lines.append("latest:")
    for item in report["latest"]:
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(item["at_ms"] / 1000))
        enforced, candidate = item["enforced"], item["candidate"]
        lines.append(
            f"  {at} {item['tool']} {item['execution_id'] or item['call_id']}: enforced "
            f"{enforced['result']} ({'; '.join(enforced['reasons']) or 'no reason'}), "
            f"candidate {candidate['result']} ({'; '.join(candidate['reasons']) or 'no reason'})"
        )
    return lines


def cmd_policy_promote(args: argparse.Namespace) -> int:
    """Copy the shadow policy's directories over rego_dir and policies_dir (each exchanged
    atomically), then reload the gateway at ``--url`` unless ``--no-reload``."""
    from gateway.policy.promote import promote
    from gateway.policy.shadow import candidate_dirs

    settings = settings_of(args)
    candidate = candidate_dirs(settings)
    enforcing = (settings.path(settings.rego_dir), settings.path(settings.policies_dir))
    sources = promote(candidate, enforcing)
    warn(sources.warnings)
    print(
        f"toolgate: promoted {candidate[0]} and {candidate[1]} to {enforcing[0]} and "
        f"{enforcing[1]} (revision {sources.revision()})",
        file=sys.stderr,
    )
    if args.no_reload:
        print("toolgate: not reloaded (--no-reload): send SIGHUP or run toolgate reload")
        return 0
    return request(args, "POST", "/v1/admin/reload")
