"""``toolgate audit``: verify the trail, export it, write a checkpoint, print the public key
(docs/operations.md#the-audit-trail)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING

from gateway.commands.common import UsageError, existing_store_url, settings_of
from gateway.settings import Settings

if TYPE_CHECKING:
    from gateway.audit.checkpoints import Written
    from gateway.audit.keys import Verifier
    from gateway.audit.verify import Report
    from gateway.store.store import Store

AUDIT_SCHEMA = 2
"""The schema version that brought the audit trail (a later one reads the same)."""


def since_ms(text: str | None) -> int | None:
    """``--since``: a duration back from now (``24h``, ``30m``) or an ISO 8601 time (UTC
    unless it names its zone)."""
    if text is None:
        return None
    from gateway.units import parse_duration

    try:
        return int((time.time() - parse_duration(text)) * 1000)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise UsageError(
            f"--since {text!r}: give a duration (24h, 30m) or an ISO 8601 time "
            "(2026-12-01T12:00:00Z)"
        ) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


async def _reading(settings: Settings) -> Store:
    """A store opened for reading only (opening it would create or upgrade the schema)."""
    from gateway.errors import StoreError
    from gateway.store.store import Store

    store = Store(existing_store_url(settings))
    try:
        version = await store.schema_version()
    except StoreError:
        store.engine.dispose()
        raise
    if version is None or version < AUDIT_SCHEMA:
        store.engine.dispose()
        raise UsageError(
            f"the store at {store.safe_url} is schema version {version or 1}, from before the "
            "audit trail: start this gateway on it once (toolgate serve, or toolgate audit "
            "checkpoint), which upgrades it and chains the events it holds"
        )
    return store


def _verifier(settings: Settings, public_keys: list[str]) -> Verifier:
    from gateway.audit.keys import Verifier, key_path, load_public_key, load_signer

    if public_keys:
        return Verifier([load_public_key(Path(p)) for p in public_keys])
    keys = [load_public_key(settings.path(p)) for p in settings.audit.public_keys]
    if key_path(settings).exists():
        keys.append(load_signer(settings, create=False).public)
    return Verifier(keys)


def cmd_audit_verify(args: argparse.Namespace) -> int:
    from gateway.audit.verify import verify

    settings = settings_of(args)
    since = since_ms(args.since)
    verifier = _verifier(settings, args.public_key)

    async def run() -> Report:
        store = await _reading(settings)
        try:
            return await verify(store, verifier, since)
        finally:
            store.engine.dispose()

    report = asyncio.run(run())
    if args.json:
        print(
            json.dumps(
                {
                    "ok": report.ok,
                    "chains": report.chains,
                    "events": report.events,
                    "checkpoints": report.checkpoints,
                    "faults": [f.to_json() for f in report.faults],
                },
                indent=2,
            )
        )
    else:
        for fault in report.faults:
            print(fault.line())
        verdict = "intact" if report.ok else f"{len(report.faults)} faults"
        print(
            f"toolgate: audit trail {verdict}: {report.chains} chains, {report.events} events, "
            f"{report.checkpoints} checkpoints ({report.heads} heads) checked",
            file=sys.stderr,
        )
        if report.checkpoints == 0:
            print(
                "toolgate: note: no checkpoint covers these chains: a deleted tail or a deleted "
                "chain cannot be seen",
                file=sys.stderr,
            )
    return 0 if report.ok else 1


def cmd_audit_export(args: argparse.Namespace) -> int:
    from gateway.audit.export import export

    settings = settings_of(args)
    since = since_ms(args.since)

    with ExitStack() as stack:
        out: IO[str] = sys.stdout
        if args.out and args.out != "-":
            try:
                out = stack.enter_context(open(args.out, "w", encoding="utf-8"))
            except OSError as exc:
                raise UsageError(f"--out {args.out}: {exc.strerror}") from exc

        async def run() -> tuple[int, int]:
            store = await _reading(settings)
            try:
                return await export(
                    store, lambda text: print(text, end="", file=out), since, args.checkpoints
                )
            finally:
                store.engine.dispose()

        events, checkpoints = asyncio.run(run())
    print(f"toolgate: exported {events} events, {checkpoints} checkpoints", file=sys.stderr)
    return 0


def cmd_audit_checkpoint(args: argparse.Namespace) -> int:
    from gateway.audit.checkpoints import make_checkpoint
    from gateway.audit.keys import load_signer
    from gateway.store.store import Store

    settings = settings_of(args)
    signer = load_signer(settings)

    async def run() -> Written:
        store = Store(existing_store_url(settings))
        try:
            await store.open()
            return await make_checkpoint(store, signer, everything=args.all)
        finally:
            await store.aclose()

    written = asyncio.run(run())
    if written.record is None:
        print(f"toolgate: no checkpoint written: {written.reason}", file=sys.stderr)
        return 0
    heads = len(json.loads(written.record.heads_json))
    print(f"checkpoint #{written.record.seq}: {heads} heads, signed by key {written.record.key_id}")
    return 0


def cmd_audit_public_key(args: argparse.Namespace) -> int:
    from gateway.audit.keys import load_signer

    signer = load_signer(settings_of(args))
    print(signer.public_pem(), end="")
    print(f"toolgate: key id {signer.key_id}", file=sys.stderr)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    audit = sub.add_parser("audit", help="verify or export the tamper-evident audit trail")
    asub = audit.add_subparsers(dest="audit_command", required=True)
    since_help = "only what was written since then: a duration back (24h) or an ISO 8601 time"
    verify = asub.add_parser(
        "verify", help="check every chain and checkpoint; exit 1 naming each fault"
    )
    verify.add_argument("--since", help=since_help)
    verify.add_argument(
        "--public-key",
        action="append",
        default=[],
        metavar="FILE",
        help="verify checkpoints with this Ed25519 public key (PEM) only; repeatable",
    )
    verify.add_argument("--json", action="store_true", help="the report as JSON, for scripts")
    verify.set_defaults(fn=cmd_audit_verify)
    export = asub.add_parser("export", help="write the events as JSON lines (for a SIEM)")
    export.add_argument("--since", help=since_help)
    export.add_argument("--out", metavar="FILE", help="write here (default: standard output)")
    export.add_argument(
        "--checkpoints", action="store_true", help="add the signed checkpoints as lines too"
    )
    export.set_defaults(fn=cmd_audit_export)
    checkpoint = asub.add_parser("checkpoint", help="sign a checkpoint of the chains now")
    checkpoint.add_argument(
        "--all",
        action="store_true",
        help="of every chain's head, not only those that moved since the last checkpoint",
    )
    checkpoint.set_defaults(fn=cmd_audit_checkpoint)
    public = asub.add_parser("public-key", help="print the checkpoints' public key (PEM)")
    public.set_defaults(fn=cmd_audit_public_key)
