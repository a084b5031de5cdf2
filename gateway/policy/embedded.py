"""The embedded policy backend: Rego evaluated in-process by the regorus interpreter.

A regorus Engine may only be used, and dropped, on the thread that made it. Each thread
therefore builds its own engine lazily from the sources and keeps it in a module-level
``threading.local``. That local lives as long as the process, so an engine is only ever dropped
on its own thread: when the thread exits, or when it next decides and finds that the engine's
backend was closed.

Evaluation is ``Engine.set_input_json`` + ``eval_rule_as_json`` (JSON both ways, as OPA's REST
API would carry it, so a set in the decision arrives as a list on both backends). The
interpreter is strict: an error anywhere in the policy (division by zero, a builtin given a
wrong type) fails the whole evaluation, which denies.

Not the regorus VM (``Rvm`` running ``Program.compile_from_modules``), although it is about
twice as fast: in regorus 0.13 it lets ``x := <undefined>`` succeed inside a rule body
(``r if { n := count(input.missing) }`` is true), turns builtin errors into undefined, and stops
at 25,000 instructions. The loader still uses its compiler, for its load-time checks only.

Fail closed: an undefined or malformed decision, an evaluation error, an engine panic, or an
input that is not JSON gives ``deny`` with ``policy error: <cause>`` as its only reason.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import weakref
from collections.abc import Mapping
from typing import Any

from gateway.errors import ConfigError
from gateway.policy.loader import (
    DECISION_RULE,
    EngineError,
    PolicySources,
    engine_call,
    new_engine,
)
from gateway.types import JSON, Decision, DecisionResult

os.environ.setdefault("RUST_LIB_BACKTRACE", "0")

UNDEFINED = "<undefined>"
"""What regorus returns, as JSON, for an undefined rule (pass it to parse_decision)."""
_RESULTS = {r.value: r for r in DecisionResult}

# --- per-thread engines ----------------------------------------------------------------------

_THREAD = threading.local()
_TOKENS = itertools.count(1)
# Tokens of closed backends. It only grows, so a thread that has seen len(_RETIRED) tokens knows
# nothing was closed since; set.add is atomic under the GIL, so no lock (which a finalizer run
# by the garbage collector could deadlock on) is needed.
_RETIRED: set[int] = set()


def _thread_engines() -> dict[int, Any]:
    """This thread's engines by backend token, without those of closed backends."""
    slots: dict[int, Any] | None = getattr(_THREAD, "slots", None)
    if slots is None:
        slots = _THREAD.slots = {}
        _THREAD.seen = len(_RETIRED)
    elif _THREAD.seen != len(_RETIRED):
        _THREAD.seen = len(_RETIRED)
        for token in [t for t in slots if t in _RETIRED]:
            del slots[token]  # dropped here, on the thread that made it
    return slots


# --- the backend ------------------------------------------------------------------------------


class EmbeddedPolicy:
    """The PolicyBackend that evaluates the Rego sources in-process."""

    def __init__(self, sources: PolicySources, *, rule: str = DECISION_RULE) -> None:
        """Build an engine on this thread now, so that a fault shows at start-up.

        Raises ConfigError if regorus cannot load the sources.
        """
        self._sources = sources
        self._rule = rule
        self._token = next(_TOKENS)
        self._closed = False
        weakref.finalize(self, _RETIRED.add, self._token)
        try:
            self._engine()
        except EngineError as exc:
            raise ConfigError(f"policy: regorus cannot load the sources: {exc}") from exc

    async def decide(self, document: Mapping[str, JSON]) -> Decision:
        """Decide on the event loop's thread.

        An evaluation holds the GIL from start to end, so a worker thread would add a hop
        without letting anything else run meanwhile.
        """
        return self.decide_sync(document)

    def decide_sync(self, document: Mapping[str, JSON]) -> Decision:
        """Decide for one policy input document; never raises, denies on any fault."""
        if self._closed:
            return policy_error("the policy backend is closed")
        try:
            input_json = json.dumps(document, allow_nan=False)
        except (TypeError, ValueError) as exc:
            return policy_error(f"the input document is not JSON: {exc}")
        try:
            engine = self._engine()
            engine_call(engine.set_input_json, input_json)
            value = json.loads(engine_call(engine.eval_rule_as_json, self._rule))
        except EngineError as exc:
            return policy_error(str(exc))
        except ValueError as exc:
            return policy_error(f"the engine returned something other than JSON: {exc}")
        return parse_decision(value)

    async def aclose(self) -> None:
        """Refuse further decisions and drop the engines (each on its own thread)."""
        self._closed = True
        _RETIRED.add(self._token)
        _thread_engines()

    def _engine(self) -> Any:
        slots = _thread_engines()
        engine = slots.get(self._token)
        if engine is None:
            engine = slots[self._token] = new_engine(
                self._sources.modules, self._sources.data_json()
            )
        return engine


def parse_decision(value: Any) -> Decision:
    """Check a decision value (as JSON carries it); anything malformed denies.

    Also meant for other backends: an OPA answer goes through the same checks (pass
    ``UNDEFINED`` when OPA's response has no ``result``).
    """
    if value == UNDEFINED:
        return policy_error("the decision is undefined")
    if not isinstance(value, dict):
        return policy_error(f"the decision is not an object: {_short(value)}")
    result = _RESULTS.get(str(value.get("result")))
    if result is None or not isinstance(value.get("result"), str):
        return policy_error(f"unknown decision result {_short(value.get('result'))}")
    reasons = value.get("reasons")
    if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
        return policy_error(f"the decision reasons are not a list of strings: {_short(reasons)}")
    extra = {k: v for k, v in value.items() if k not in ("result", "reasons")}
    return Decision(result, tuple(reasons), extra)


def policy_error(cause: str) -> Decision:
    """The fail-closed decision: deny, with the cause as its only reason."""
    return Decision(DecisionResult.DENY, (f"policy error: {cause}",))


def _short(value: Any) -> str:
    text = json.dumps(value) if value is not None else "missing"
    return text if len(text) <= 80 else text[:77] + "..."
