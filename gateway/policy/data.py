"""The policy data the gateway itself reads, typed: parsed once at load, frozen.

The Rego policy reads the raw data (``data.toolgate``); the gateway's own readers (who may
decide or list approvals, self-approval, quotas, actors' roles, workspaces) read this model
instead, so that each key has one meaning. The rules, as docs/policies.md states them:

- ``approvers``: the roles that decide an approval of a call of risk R are ``by_risk[R]`` if
  listed, else ``default``; with neither, nobody decides it (the Rego refuses such an
  approval too). Listing approvals (and seeing others' executions) needs one of the roles
  named anywhere in ``approvers``: with none named, nobody lists them.
- ``allow_self_approval``: only ``true`` lets an actor approve (or resolve) their own call.
- ``quotas.calls_per_minute``: a limit per tool risk; a risk not listed is unlimited.
- ``actors.<id>.roles``: an actor missing, listed with no roles or ``roles: null`` has none.
- ``workspaces.<id>.root`` (required) and ``members``.
- ``protected_paths``: a list of workspace-relative paths (the Rego refuses a write there;
  every workspace carries the list, and a process tool's view makes them read-only).

A wrong shape is a ConfigError naming the file, line and key. Keys the gateway does not read
(``risk_rules``, your own) are left to the Rego; so are extra keys of an
actor or a workspace, which a rule may read. ``approvers`` and ``quotas`` take only the keys
above: a misspelt key there would silently change who decides or what is limited.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gateway.errors import ConfigError
from gateway.types import Risk
from gateway.yamlsrc import Lines

RISKS = tuple(r.value for r in Risk)
Roles = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Approvers:
    default: Roles = ()
    by_risk: Mapping[str, Roles] = field(default_factory=lambda: MappingProxyType({}))
    allow_self_approval: bool = False

    def roles_for(self, risk: str) -> Roles:
        """The roles that may decide an approval of a ``risk`` call (none: nobody)."""
        return self.by_risk.get(risk, self.default)

    @property
    def named(self) -> frozenset[str]:
        """Every role named here: holding one lets an actor list approvals."""
        return frozenset(self.default).union(*self.by_risk.values())


@dataclass(frozen=True, slots=True)
class WorkspaceSpec:
    id: str
    root: str
    """As written: relative to the directory of toolgate.yaml unless absolute."""
    members: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PolicyData:
    actors: Mapping[str, Roles] = field(default_factory=lambda: MappingProxyType({}))
    """Each actor's roles."""
    approvers: Approvers = field(default_factory=Approvers)
    workspaces: Mapping[str, WorkspaceSpec] = field(default_factory=lambda: MappingProxyType({}))
    calls_per_minute: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    """Quota per tool risk (``quotas.calls_per_minute``)."""
    protected_paths: tuple[str, ...] = ()
    """Workspace-relative paths that no tool may write (``gateway.workspace.protected_entry``)."""

    def roles(self, principal: str) -> Roles:
        return self.actors.get(principal, ())

    def may_list_approvals(self, principal: str) -> bool:
        """Whether ``principal`` holds a role named in ``approvers``."""
        return not self.approvers.named.isdisjoint(self.roles(principal))

    def quota(self, risk: str) -> int | None:
        return self.calls_per_minute.get(risk)

    @classmethod
    def parse(cls, data: Mapping[str, Any], lines: Mapping[str, Lines] | None = None) -> PolicyData:
        """The model of ``data`` (the merged policies/*.yaml); ConfigError lists every wrong
        shape, each with its file, line and key when ``lines`` (the loader's) has them."""
        reader = _Reader(lines or {})
        model = cls(
            actors=reader.actors(data.get("actors")),
            approvers=reader.approvers(data.get("approvers")),
            workspaces=reader.workspaces(data.get("workspaces")),
            calls_per_minute=reader.quotas(data.get("quotas")),
            protected_paths=reader.protected(data.get("protected_paths")),
        )
        if reader.problems:
            raise ConfigError(reader.problems)
        return model


class _Reader:
    """Reads each key the gateway uses, collecting the faults instead of stopping."""

    def __init__(self, lines: Mapping[str, Lines]) -> None:
        self._lines = lines
        self.problems: list[str] = []

    def fault(self, loc: tuple[str | int, ...], message: str) -> None:
        lines = self._lines.get(str(loc[0]))
        where = lines.where(loc) if lines else "policies: " + ".".join(map(str, loc))
        self.problems.append(f"{where}: {message}")

    def mapping(self, value: Any, loc: tuple[str | int, ...], what: str) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.fault(loc, f"must be a mapping of {what} (got {_kind(value)})")
            return {}
        return value

    def strings(self, value: Any, loc: tuple[str | int, ...]) -> tuple[str, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            self.fault(loc, f"must be a list of strings (got {_kind(value)})")
            return ()
        for i, item in enumerate(value):
            if not isinstance(item, str):
                self.fault((*loc, i), f"must be a string (got {_kind(item)})")
        return tuple(item for item in value if isinstance(item, str))

    def only(self, value: Mapping[str, Any], loc: tuple[str, ...], known: tuple[str, ...]) -> None:
        for key in value:
            if key not in known:
                self.fault((*loc, key), f"unknown key (known: {', '.join(known)})")

    def risks(self, value: Mapping[str, Any], loc: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
        for risk, item in value.items():
            if risk in RISKS:
                yield risk, item
            else:
                self.fault((*loc, risk), f"no such tool risk (one of {', '.join(RISKS)})")

    def actors(self, value: Any) -> Mapping[str, Roles]:
        found: dict[str, Roles] = {}
        for actor, spec in self.mapping(value, ("actors",), "user ids to {roles: [...]}").items():
            spec = self.mapping(spec, ("actors", actor), "keys such as roles")
            found[actor] = self.strings(spec.get("roles"), ("actors", actor, "roles"))
        return MappingProxyType(found)

    def approvers(self, value: Any) -> Approvers:
        loc = ("approvers",)
        spec = self.mapping(value, loc, "default, by_risk and allow_self_approval")
        self.only(spec, loc, ("default", "by_risk", "allow_self_approval"))
        by_risk = self.mapping(spec.get("by_risk"), (*loc, "by_risk"), "tool risks to roles")
        allow_self = spec.get("allow_self_approval", False)
        if not isinstance(allow_self, bool | None):
            self.fault((*loc, "allow_self_approval"), f"must be true or false (got {allow_self!r})")
        return Approvers(
            default=self.strings(spec.get("default"), (*loc, "default")),
            by_risk=MappingProxyType(
                {
                    risk: self.strings(roles, (*loc, "by_risk", risk))
                    for risk, roles in self.risks(by_risk, (*loc, "by_risk"))
                }
            ),
            allow_self_approval=allow_self is True,
        )

    def workspaces(self, value: Any) -> Mapping[str, WorkspaceSpec]:
        found: dict[str, WorkspaceSpec] = {}
        declared = self.mapping(value, ("workspaces",), "workspace ids to {root: ...}")
        for ws_id, spec in declared.items():
            loc = ("workspaces", ws_id)
            spec = self.mapping(spec, loc, "keys such as root and members")
            root = spec.get("root")
            if not isinstance(root, str) or not root:
                self.fault(loc, f"workspace {ws_id!r} has no 'root' (a directory)")
                continue
            members = self.strings(spec.get("members"), (*loc, "members"))
            found[ws_id] = WorkspaceSpec(ws_id, root, members)
        return MappingProxyType(found)

    def protected(self, value: Any) -> tuple[str, ...]:
        found = self.strings(value, ("protected_paths",))
        for i, entry in enumerate(found):
            parts = entry.strip("/").split("/")
            if "\x00" in entry or entry.startswith("/") or {"", ".", ".."} & set(parts):
                self.fault(
                    ("protected_paths", i),
                    f"must be a workspace-relative path without '.' or '..' (got {entry!r})",
                )
        return found

    def quotas(self, value: Any) -> Mapping[str, int]:
        spec = self.mapping(value, ("quotas",), "calls_per_minute")
        self.only(spec, ("quotas",), ("calls_per_minute",))
        loc = ("quotas", "calls_per_minute")
        limits = self.mapping(spec.get("calls_per_minute"), loc, "tool risks to a number")
        found: dict[str, int] = {}
        for risk, limit in self.risks(limits, loc):
            if limit is None:
                continue  # as if not listed: unlimited
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
                self.fault((*loc, risk), f"must be a whole number, 0 or more (got {limit!r})")
            else:
                found[risk] = limit
        return MappingProxyType(found)


def _kind(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)
