"""The versioned tool catalogue: resolve a name and a version range to one declaration."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gateway.declarations.fastvalid import FastValidator
from gateway.declarations.model import ToolDeclaration
from gateway.declarations.semver import parse_range
from gateway.errors import ResolveError
from gateway.yamlsrc import Lines


class Catalogue:
    """Immutable after construction; a reload builds a new one."""

    def __init__(
        self,
        tools: Iterable[ToolDeclaration],
        lines: Mapping[str, Lines] | None = None,
        revision: str = "",
    ) -> None:
        self.revision = revision
        """A digest of the files it was loaded from (``loader.revision_of``); empty for a
        catalogue built in code."""
        self._lines = dict(lines or {})
        by_name: dict[str, list[ToolDeclaration]] = {}
        for tool in tools:
            by_name.setdefault(tool.name, []).append(tool)
        self._by_name = {
            name: sorted(versions, key=lambda t: t.version, reverse=True)
            for name, versions in sorted(by_name.items())
        }
        self._validators: dict[str, FastValidator] = {}
        # What every call asks again, kept once: the tool without a version asked for (the
        # common call), and each declaration's validator by the declaration's identity
        # (its ``ref`` is built anew on every read). The catalogue holds its declarations,
        # so no other object can take one's id while it lives.
        self._latest: dict[str, ToolDeclaration] = {}
        self._validator_of: dict[int, FastValidator] = {}
        self._outputs: dict[str, FastValidator] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_name.values())

    @property
    def names(self) -> list[str]:
        return list(self._by_name)

    def versions(self, name: str) -> list[ToolDeclaration]:
        """Every version of ``name``, newest first (disabled ones included)."""
        return list(self._by_name.get(name, ()))

    def all(self) -> list[ToolDeclaration]:
        return [tool for versions in self._by_name.values() for tool in versions]

    def lines(self, tool: ToolDeclaration) -> Lines:
        """Where ``tool``'s keys are in its file, for messages naming file, line and key
        (a tool built in code, not loaded, has no file: its ref stands for one)."""
        return self._lines.get(tool.ref) or Lines(tool.ref, {})

    def resolve(self, name: str, requested: str | None = None) -> ToolDeclaration:
        """The newest enabled version of ``name`` matching ``requested`` (any when None)."""
        if requested is None and (latest := self._latest.get(name)) is not None:
            return latest
        found = self._resolve(name, requested)
        if requested is None:
            self._latest[name] = found
        return found

    def _resolve(self, name: str, requested: str | None) -> ToolDeclaration:
        versions = self._by_name.get(name)
        if not versions:
            raise ResolveError(f"no tool named {name!r} is declared", code="tool_not_found")
        try:
            matches = parse_range(requested or "")
        except ValueError as exc:
            raise ResolveError(
                f"requested_version {requested!r} is not a version or range: {exc}",
                code="invalid_version_range",
            ) from exc
        candidates = [t for t in versions if matches(t.version)]
        if not candidates:
            have = ", ".join(str(t.version) for t in versions)
            raise ResolveError(
                f"no version of {name} matches {requested!r} (declared: {have})",
                code="version_not_found",
            )
        enabled = [t for t in candidates if not t.disabled]
        if not enabled:
            raise ResolveError(
                f"{name} {requested or ''} is disabled".replace("  ", " "), code="tool_disabled"
            )
        return enabled[0]

    def validator(self, tool: ToolDeclaration) -> FastValidator:
        """A reusable validator for ``tool`` (built once: construction is costly).

        It validates and normalises like ``JsonValidator(tool.input, purge_readonly=True)``,
        with a compiled fast path that defers to cerberus (see ``fastvalid``).
        """
        validator = self._validator_of.get(id(tool))
        if validator is not None:
            return validator
        key = tool.ref
        validator = self._validators.get(key)
        if validator is None:
            validator = FastValidator(tool.input, purge_readonly=True)
            self._validators[key] = validator
        if any(t is tool for t in self._by_name.get(tool.name, ())):
            self._validator_of[id(tool)] = validator  # one of its own: it lives as long
        return validator

    def output_validator(self, tool: ToolDeclaration) -> FastValidator | None:
        """The checker of ``tool``'s ``output:`` (None when it declares none), built once.

        It validates like ``JsonValidator(tool.output)`` (unknown fields refused), with the
        fast path; the loader refused the rules that would change the data, so a document it
        accepts is accepted as it stands.
        """
        if tool.output is None:
            return None
        key = tool.ref
        validator = self._outputs.get(key)
        if validator is None:
            validator = FastValidator(tool.output)
            self._outputs[key] = validator
        return validator
