"""The long-lived parts a call runs against, built once per gateway process."""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.adapters.base import Adapter
from gateway.declarations.catalogue import Catalogue
from gateway.errors import ConfigError
from gateway.settings import Settings
from gateway.store.store import Store
from gateway.types import PolicyBackend
from gateway.workspace import Workspace


@dataclass(frozen=True)
class Services:
    settings: Settings
    catalogue: Catalogue
    policy: PolicyBackend
    policy_data: Mapping[str, Any]
    workspaces: Mapping[str, Workspace]
    store: Store
    adapters: Mapping[str, Adapter]
    approval_key: bytes = b""
    faults: Mapping[str, str] = field(default_factory=dict)

    def roles(self, principal: str) -> tuple[str, ...]:
        actor = self.policy_data.get("actors", {}).get(principal) or {}
        return tuple(str(r) for r in actor.get("roles", ()) or ())


def approval_key(settings: Settings) -> bytes:
    """The HMAC key of approval tokens: configured, or made once under var/."""
    if settings.approval_secret:
        return settings.approval_secret.encode("utf-8")
    path = settings.path(settings.var_dir) / "approval.key"
    if not path.exists():
        # Written aside and linked into place: two gateways starting at once agree on one key.
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".approval.key.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32))
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return path.read_text().strip().encode("utf-8")


def workspaces_from_policy(data: Mapping[str, Any], base_dir: Path) -> dict[str, Workspace]:
    """Workspaces declared in policy data, with roots resolved and created."""
    found: dict[str, Workspace] = {}
    declared = data.get("workspaces") or {}
    if not isinstance(declared, Mapping):
        raise ConfigError("policies: 'workspaces' must map workspace ids to {root: ...}")
    for ws_id, spec in declared.items():
        root = spec.get("root") if isinstance(spec, Mapping) else None
        if not isinstance(root, str) or not root:
            raise ConfigError(f"policies: workspace {ws_id!r} has no 'root'")
        path = Path(root)
        path = path if path.is_absolute() else base_dir / path
        path.mkdir(parents=True, exist_ok=True)
        found[str(ws_id)] = Workspace(str(ws_id), path.resolve())
    return found
