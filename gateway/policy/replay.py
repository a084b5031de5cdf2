"""Policy replay: decide the recorded inputs of past calls again under a candidate policy.

Every decision a call got is in its ``policy.decided`` event, with the input document the policy
saw (``gateway.policy.inputs``: long arguments bounded, ``policy_input_mask`` paths masked). A
replay reads those events from the store (read only: ``Store.find_executions``, newest first,
and ``Store.events``), evaluates each input with the embedded engine over the candidate sources,
and reports every decision whose result would change (``allow`` → ``deny``, ``deny`` →
``require_approval``, ...). ``toolgate policy replay`` exits 1 when one would, so that it can
gate a policy change in CI (docs/policies.md#policy-replay).

A recorded input that cannot stand for the real one is *not replayable*, reported and never
evaluated: one whose arguments were cut (``input_truncated``), one recorded before inputs were
(no ``input``), one with a masked value (``***``) at a path the candidate policy reads (or
any masked value when the policy's reads cannot be bounded, ``gateway.policy.reads``), and one
recorded before a field of ``NEWER_FIELDS`` existed that the candidate policy reads: the
replay never guesses what the call would have carried.

A change is *stricter* when the candidate's result comes later in ``allow``,
``require_approval``, ``deny`` than the recorded one (``--fail-on allow-to-deny``), *looser*
when it comes earlier (``--fail-on deny-to-allow``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gateway.policy.embedded import EmbeddedPolicy
from gateway.policy.inputs import MASK
from gateway.policy.loader import PolicySources, new_engine, quiet_panics, syntax_tree
from gateway.policy.reads import InputReads, input_reads
from gateway.store.store import Store
from gateway.types import OnStep

DECIDED = "policy.decided"
T = TypeVar("T")
NEWER_FIELDS = ("action",)
"""Top-level fields of the input that gateways older than them did not record."""
STRICTNESS = {"allow": 0, "require_approval": 1, "deny": 2}
FAIL_ON = ("allow-to-deny", "deny-to-allow", "any")
"""What ``--fail-on`` may name: stricter changes, looser changes, or any change."""


@dataclass(frozen=True)
class RecordedDecision:
    """One ``policy.decided`` event of an execution."""

    execution_id: str
    tool: str
    created_ms: int
    seq: int
    result: str
    reasons: tuple[str, ...]
    input: dict[str, Any] | None
    truncated: bool


@dataclass(frozen=True)
class Change:
    """A recorded decision whose result the candidate policy changes."""

    recorded: RecordedDecision
    result: str
    reasons: tuple[str, ...]

    def line(self) -> str:
        r = self.recorded
        why = "; ".join(self.reasons) or "no reason given"
        return f"{r.execution_id} {r.tool}: {r.result} -> {self.result} ({why})"

    @property
    def direction(self) -> str | None:
        """``allow-to-deny`` (stricter), ``deny-to-allow`` (looser), or None when the recorded
        result is none of the three."""
        before = STRICTNESS.get(self.recorded.result)
        if before is None:
            return None
        return "allow-to-deny" if STRICTNESS[self.result] > before else "deny-to-allow"

    def to_json(self) -> dict[str, Any]:
        r = self.recorded
        return {
            "execution_id": r.execution_id,
            "tool": r.tool,
            "seq": r.seq,
            "from": r.result,
            "to": self.result,
            "direction": self.direction,
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True)
class Skipped:
    """A recorded decision that cannot be replayed, and why."""

    recorded: RecordedDecision
    why: str

    def line(self) -> str:
        return f"{self.recorded.execution_id} {self.recorded.tool}: not replayable: {self.why}"

    def to_json(self) -> dict[str, Any]:
        r = self.recorded
        return {"execution_id": r.execution_id, "tool": r.tool, "seq": r.seq, "why": self.why}


@dataclass(frozen=True)
class ReplayReport:
    executions: int
    decisions: int
    changes: list[Change] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    same_result_other_reasons: int = 0
    more: bool = False
    """The window holds more executions than the limit: only the newest were replayed."""

    def failing(self, fail_on: str = "any") -> list[Change]:
        """The changes ``--fail-on fail_on`` fails on (one of ``FAIL_ON``)."""
        if fail_on == "any":
            return list(self.changes)
        return [c for c in self.changes if c.direction == fail_on]

    def to_json(self, fail_on: str = "any") -> dict[str, Any]:
        """The report ``--json`` prints (docs/policies.md#policy-replay)."""
        return {
            "executions": self.executions,
            "decisions": self.decisions,
            "replayed": self.decisions - len(self.skipped),
            "changes": [c.to_json() for c in self.changes],
            "not_replayable": [s.to_json() for s in self.skipped],
            "same_result_other_reasons": self.same_result_other_reasons,
            "more": self.more,
            "fail_on": fail_on,
            "failed": bool(self.failing(fail_on)),
        }

    def lines(self) -> list[str]:
        out = [f"changed: {c.line()}" for c in self.changes]
        out.extend(s.line() for s in self.skipped)
        replayed = self.decisions - len(self.skipped)
        summary = (
            f"{self.executions} executions, {self.decisions} decisions: {replayed} replayed, "
            f"{len(self.changes)} would change, {len(self.skipped)} not replayable"
        )
        if self.same_result_other_reasons:
            summary += f", {self.same_result_other_reasons} keep their result with other reasons"
        out.append(summary)
        if self.more:
            out.append(
                f"note: more executions than the limit in the window; the newest "
                f"{self.executions} were replayed (raise --limit)"
            )
        return out


async def recorded_decisions(
    store: Store, since_ms: int, limit: int, on_step: OnStep | None = None
) -> tuple[list[RecordedDecision], int, bool]:
    """The decisions of the newest ``limit`` executions created at or after ``since_ms``,
    oldest first; how many executions those are; whether the window holds more.
    ``on_step`` is called after each execution's events are read."""
    records = await store.find_executions(None, None, None, limit=limit + 1)
    window = [r for r in records if r.created_ms >= since_ms]
    more = len(window) > limit
    window = window[:limit]
    found: list[RecordedDecision] = []
    for record in _stepped(list(reversed(window)), on_step):
        for event in await store.events(record.id):
            if event.type != DECIDED:
                continue
            data = event.data
            recorded = data.get("input")
            found.append(
                RecordedDecision(
                    execution_id=record.id,
                    tool=record.tool_name,
                    created_ms=record.created_ms,
                    seq=event.seq,
                    result=str(data.get("result")),
                    reasons=tuple(str(r) for r in data.get("reasons") or ()),
                    input=recorded if isinstance(recorded, dict) else None,
                    truncated=bool(data.get("input_truncated")),
                )
            )
    return found, len(window), more


async def replay(
    decisions: Sequence[RecordedDecision],
    sources: PolicySources,
    mask: Sequence[str] = (),
    executions: int = 0,
    more: bool = False,
    on_step: OnStep | None = None,
) -> ReplayReport:
    """Decide each recorded input again under ``sources``; ``mask`` is the gateway's
    ``policy_input_mask`` (which paths may hold ``***`` rather than the value).
    ``on_step`` is called after each decision."""
    reads = _reads(sources)
    policy = EmbeddedPolicy(sources)
    changes: list[Change] = []
    skipped: list[Skipped] = []
    other_reasons = 0
    try:
        for recorded in _stepped(decisions, on_step):
            why = _not_replayable(recorded, mask, reads)
            if why is not None:
                skipped.append(Skipped(recorded, why))
                continue
            assert recorded.input is not None
            decision = policy.decide_sync(recorded.input)
            result, reasons = decision.result.value, tuple(decision.reasons)
            if result != recorded.result:
                changes.append(Change(recorded, result, reasons))
            elif reasons != recorded.reasons:
                other_reasons += 1
    finally:
        await policy.aclose()
    return ReplayReport(executions, len(decisions), changes, skipped, other_reasons, more)


def _stepped(items: Sequence[T], on_step: OnStep | None) -> Iterator[T]:
    """``items``, calling ``on_step`` once the loop's body is done with each."""
    for done, item in enumerate(items, start=1):
        yield item
        if on_step is not None:
            on_step(done, len(items))


def _reads(sources: PolicySources) -> InputReads:
    try:
        with quiet_panics():
            engine = new_engine(sources.modules, sources.data_json())
            return input_reads(syntax_tree(engine))
    except Exception as exc:  # unbounded, as the embedded backend's cache takes it
        return InputReads((), f"cannot scan the modules: {type(exc).__name__}: {exc}")


def _not_replayable(
    recorded: RecordedDecision, mask: Sequence[str], reads: InputReads
) -> str | None:
    if recorded.input is None:
        return "the event has no recorded input (recorded before inputs were)"
    if recorded.truncated:
        return "its arguments were cut when recorded (input_truncated)"
    for path in mask:
        keys = tuple(path.split("."))
        if not _masked_at(recorded.input, keys):
            continue
        if reads.refusal is not None:
            return f"{path} is masked and the policy's reads of input are not bounded"
        if any(_overlap(keys, read) for read in reads.paths):
            return f"{path} is masked (policy_input_mask) and the policy reads it"
    for name in NEWER_FIELDS:
        if name in recorded.input:
            continue
        missing = f"it was recorded without input.{name} (by an older gateway)"
        if reads.refusal is not None:
            return f"{missing} and the policy's reads of input are not bounded"
        if any(read[:1] == (name,) for read in reads.paths):
            return f"{missing} and the policy reads it"
    return None


def _masked_at(value: Any, keys: tuple[str, ...]) -> bool:
    if isinstance(value, list):
        return any(_masked_at(item, keys) for item in value)
    if not keys:
        return bool(value == MASK)
    return isinstance(value, Mapping) and keys[0] in value and _masked_at(value[keys[0]], keys[1:])


def _overlap(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    n = min(len(a), len(b))
    return a[:n] == b[:n]
