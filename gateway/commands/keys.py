"""``toolgate keys list | revoke | unrevoke``: the configured API keys and their revocation.

These commands open the store of the configuration (``database_url``) directly: a
revocation is a row every replica reads on each request, so it holds everywhere as soon as
the command returns (docs/security.md#revoking-a-key).
"""

from __future__ import annotations

import argparse
import getpass
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from gateway.commands.common import UsageError, settings_of
from gateway.commands.tables import table, when
from gateway.settings import ApiKey, Settings
from gateway.store.store import Store

T = TypeVar("T")


def _with_store(settings: Settings, fn: Callable[[Store], Awaitable[T]]) -> T:
    async def run() -> T:
        store = Store(settings.resolved_database_url)
        await store.open()
        try:
            return await fn(store)
        finally:
            await store.aclose()

    return anyio.run(run)


def _configured(settings: Settings) -> dict[str, tuple[str, ApiKey]]:
    return {key.id: (p.id, key) for p in settings.principals for key in p.all_keys}


def cmd_keys_list(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    revoked = {r.key_id: r for r in _with_store(settings, lambda s: s.revocations())}
    now_ms = time.time() * 1000
    rows = []
    for key_id, (principal, key) in _configured(settings).items():
        expires = key.expires_ms
        if key_id in revoked:
            state = f"revoked {when(revoked[key_id].revoked_ms)}"
        elif expires is not None and expires <= now_ms:
            state = "expired"
        else:
            state = "active"
        rows.append([key_id, principal, when(expires) if expires else "never", state])
    print(table(["KEY ID", "PRINCIPAL", "EXPIRES", "STATE"], rows))
    unknown = sorted(set(revoked) - set(_configured(settings)))
    if unknown:
        print(f"revoked, no longer configured: {', '.join(unknown)}")
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    configured = _configured(settings)
    if args.key_id not in configured and not args.force:
        known = ", ".join(sorted(configured)) or "none"
        raise UsageError(
            f"no configured key has the id {args.key_id!r} (configured: {known}); "
            "--force revokes it anyway"
        )
    by = args.by or getpass.getuser()
    fresh = _with_store(settings, lambda s: s.revoke_key(args.key_id, by, args.reason or ""))
    owner = configured.get(args.key_id, ("?", None))[0]
    if fresh:
        print(f"revoked key {args.key_id} (principal {owner}): refused from now on")
    else:
        print(f"key {args.key_id} was already revoked")
    return 0


def cmd_keys_unrevoke(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    if _with_store(settings, lambda s: s.unrevoke_key(args.key_id)):
        print(f"key {args.key_id} is accepted again")
        return 0
    raise UsageError(f"key {args.key_id!r} is not revoked")


def add_parsers(ksub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    klist = ksub.add_parser("list", help="the configured keys: principal, expiry, revoked")
    klist.set_defaults(fn=cmd_keys_list)
    krevoke = ksub.add_parser("revoke", help="refuse a key on every replica, from now on")
    krevoke.add_argument("key_id", help="the key's id (principals[].keys[].id)")
    krevoke.add_argument("--reason", help="why (kept with the revocation)")
    krevoke.add_argument("--by", help="who revokes it (default: your user name)")
    krevoke.add_argument(
        "--force", action="store_true", help="revoke an id this configuration does not list"
    )
    krevoke.set_defaults(fn=cmd_keys_revoke)
    kunrevoke = ksub.add_parser("unrevoke", help="take a revocation back")
    kunrevoke.add_argument("key_id")
    kunrevoke.set_defaults(fn=cmd_keys_unrevoke)
