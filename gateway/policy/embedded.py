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

Decision cache. A decision is a function of the input, the data and the modules, which are fixed
for the life of a backend (a change of the sources means a new backend, with an empty cache),
unless the policy calls a non-deterministic builtin. At construction ``gateway.policy.reads``
scans the modules for the paths of ``input`` they can read (``tool.name``, all of ``paths``,
...); each decision then evaluates only the projection of the document onto those paths, and
the JSON of that projection is the key of a bounded LRU cache (``cache_size`` entries, per
backend, shared by its threads). Per-call values the policy does not read (``request.call_id``,
``arguments``, ``deadline_ms_left``) therefore neither reach the engine nor defeat the cache.
Where the scan cannot bound what is read (``input`` read whole or by a computed key, ``with``,
a call that is not known to be deterministic: ``time.now_ns``, ``print``, ...) there is no
projection and no cache: every decision evaluates the whole document, and ``cache_refusal``
says why. Only evaluations that return a value are cached (never an engine error); a cached
decision with ``extra`` members is returned as a copy, one without (every ``allow`` of the
shipped policy) is shared: it is frozen through and through (its ``extra`` an immutable empty
mapping).

Listing (``listed``, for MCP tools/list): ``data.toolgate.listed`` evaluated on a listing input
document, never cached; None when the sources define no such rule (known at construction), and
an error or any answer but a boolean is not listed, with the cause for the caller to log.

Fail closed: an undefined or malformed decision, an evaluation error, an engine panic, or an
input that is not JSON gives ``deny`` with ``policy error: <cause>`` as its only reason. The
whole document must be JSON, not only the projection (``json_problem`` checks the rest by type,
without encoding it, so a large ``arguments.content`` costs nothing). What the policy does not
read never reaches the engine, so it can no longer fail there (regorus refuses a number beyond
its range, such as a 400-digit integer, anywhere in its input).
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import threading
import weakref
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from gateway import jsontext
from gateway.errors import ConfigError
from gateway.policy.cache import DecisionCache
from gateway.policy.loader import (
    DECISION_RULE,
    LISTING_RULE,
    EngineError,
    PolicySources,
    defines,
    engine_call,
    new_engine,
    syntax_tree,
)
from gateway.policy.reads import InputReads, Tree, input_reads, path_tree, project
from gateway.types import JSON, CacheObserver, Decision, DecisionResult, Listing

UNDEFINED = "<undefined>"
"""What regorus returns, as JSON, for an undefined rule (pass it to parse_decision)."""
_RESULTS = {r.value: r for r in DecisionResult}
CACHE_SIZE = 2048
"""Decisions each backend keeps (least recently used dropped first); 0: no cache."""

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

    def __init__(
        self, sources: PolicySources, *, rule: str = DECISION_RULE, cache_size: int = CACHE_SIZE
    ) -> None:
        """Build an engine on this thread now, so that a fault shows at start-up.

        Raises ConfigError if regorus cannot load the sources.
        """
        self._sources = sources
        self._data_json = sources.data_json()  # every thread's engine gets the same data
        self._rule = rule
        self._token = next(_TOKENS)
        self._closed = False
        weakref.finalize(self, _RETIRED.add, self._token)
        try:
            engine = self._engine()
        except EngineError as exc:
            raise ConfigError(f"policy: regorus cannot load the sources: {exc}") from exc
        try:
            self.lists = defines(engine, LISTING_RULE)
            """Whether the sources define the listing rule (else ``listed`` answers None)."""
        except EngineError as exc:
            raise ConfigError(f"policy: cannot read the sources' rules: {exc}") from exc
        self._tree: Tree | None = None
        self._cache: DecisionCache | None = None
        self._on_cache: CacheObserver | None = None
        self.cache_refusal: str | None = "the cache is disabled (cache_size=0)"
        """Why decisions are not cached; None when they are."""
        if cache_size > 0:
            reads = _input_reads(engine)
            self.cache_refusal = reads.refusal
            if reads.refusal is None:
                self._tree = path_tree(reads.paths)
                self._cache = DecisionCache(cache_size)

    @property
    def sources(self) -> PolicySources:
        """What this backend evaluates (the bundle route serves them)."""
        return self._sources

    def observe_cache(self, hook: CacheObserver | None) -> None:
        """``hook(hit)`` on each cache lookup (none while the cache is off)."""
        self._on_cache = hook

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
            if self._tree is None:
                input_json = jsontext.strict(document)
            elif (problem := json_problem(document)) is not None:  # all of it must be JSON
                return policy_error(f"the input document is not JSON: {problem}")
            else:
                input_json = jsontext.strict(project(document, self._tree))
        except (TypeError, ValueError, RecursionError) as exc:
            return policy_error(f"the input document is not JSON: {exc}")
        cache = self._cache
        if cache is not None:
            cached = cache.get(input_json)
            if (hook := self._on_cache) is not None:
                hook(cached is not None)
            if cached is not None:
                return cached if not cached.extra else _copy(cached)
        try:
            engine = self._engine()
            engine_call(engine.set_input_json, input_json)
            value = json.loads(engine_call(engine.eval_rule_as_json, self._rule))
        except EngineError as exc:
            return policy_error(str(exc))
        except ValueError as exc:
            return policy_error(f"the engine returned something other than JSON: {exc}")
        decision = parse_decision(value)
        if cache is None:
            return decision
        if not decision.extra:  # nothing mutable left: the cached decision itself is returned
            decision = Decision(decision.result, decision.reasons, _NO_EXTRA)
        cache.put(input_json, decision)
        return decision if not decision.extra else _copy(decision)

    async def listed(self, documents: Sequence[Mapping[str, JSON]]) -> list[Listing] | None:
        """The listing rule on each listing input document, one after the other on the event
        loop's thread (as ``decide``: in process, nothing to wait for); None when the sources
        do not define it. Never cached: a listing asks once per tool, and a new backend comes
        with each change of the sources."""
        if not self.lists:
            return None
        return [self._listed(document) for document in documents]

    def _listed(self, document: Mapping[str, JSON]) -> Listing:
        if self._closed:
            return Listing(False, "the policy backend is closed")
        try:
            input_json = jsontext.strict(document)
        except (TypeError, ValueError, RecursionError) as exc:
            return Listing(False, f"the input document is not JSON: {exc}")
        try:
            engine = self._engine()
            engine_call(engine.set_input_json, input_json)
            value = json.loads(engine_call(engine.eval_rule_as_json, LISTING_RULE))
        except EngineError as exc:
            return Listing(False, str(exc))
        except ValueError as exc:
            return Listing(False, f"the engine returned something other than JSON: {exc}")
        return parse_listing(value)

    async def aclose(self) -> None:
        """Refuse further decisions and drop the engines (each on its own thread)."""
        self._closed = True
        _RETIRED.add(self._token)
        _thread_engines()
        if self._cache is not None:
            self._cache.clear()

    def _engine(self) -> Any:
        slots = _thread_engines()
        engine = slots.get(self._token)
        if engine is None:
            engine = slots[self._token] = new_engine(self._sources.modules, self._data_json)
        return engine


def _input_reads(engine: Any) -> InputReads:
    """What the modules loaded in ``engine`` can read of ``input``."""
    try:
        return input_reads(syntax_tree(engine))
    except Exception as exc:  # an unexpected syntax tree: no cache rather than no gateway
        return InputReads((), f"cannot scan the modules: {type(exc).__name__}: {exc}")


_LEAVES = frozenset({str, int, bool, type(None)})


def json_problem(value: Any) -> str | None:
    """Why ``json.dumps(value, allow_nan=False)`` would fail (its message), or None.

    Checks the types without encoding: the time is that of the number of values, not of their
    size (a write's ``arguments.content`` may be megabytes that the policy never reads).
    """
    if type(value) in _LEAVES:
        return None
    if _certainly_json(value, 0):
        return None
    if isinstance(value, dict | list | tuple):
        return _container_problem(value, set())
    return _scalar_problem(value)


_CERTAIN_DEPTH = 64


def _certainly_json(value: Any, depth: int) -> bool:
    """True when ``value`` is certainly JSON: dicts with str keys, lists, and str, int, bool,
    None or finite floats, at most _CERTAIN_DEPTH deep (so a cycle ends it). False means only
    "not sure": json_problem then looks again, the exact way. About twice as fast as that
    (no cycle bookkeeping), on what the gateway actually passes. Depth first, with a stack
    of its own rather than a call per container (a policy input has a dozen)."""
    stack = [(value, depth)]
    while stack:
        value, depth = stack.pop()
        if depth > _CERTAIN_DEPTH:
            return False
        items: Any
        if type(value) is dict:
            for key in value:
                if type(key) is not str:
                    return False
            items = value.values()
        elif type(value) is list:
            items = value
        else:
            return False
        for item in items:
            kind = type(item)
            if kind is str or kind is int or kind is bool or item is None:
                continue
            if kind is float:
                if not math.isfinite(item):
                    return False
            elif kind is dict or kind is list:
                stack.append((item, depth + 1))
            else:
                return False
    return True


def _container_problem(
    value: dict[Any, Any] | list[Any] | tuple[Any, ...], seen: set[int]
) -> str | None:
    if id(value) in seen:
        return "Circular reference detected"
    seen.add(id(value))
    if isinstance(value, dict):
        for key in value:
            if type(key) not in _LEAVES and (problem := _scalar_problem(key, key=True)):
                return problem
        items: Any = value.values()
    else:
        items = value
    for item in items:
        if type(item) in _LEAVES:
            continue
        if isinstance(item, dict | list | tuple):
            problem = _container_problem(item, seen)
        else:
            problem = _scalar_problem(item)
        if problem is not None:
            return problem
    seen.discard(id(value))  # the same value may appear again elsewhere, just not inside itself
    return None


def _scalar_problem(value: Any, *, key: bool = False) -> str | None:
    if isinstance(value, float):
        return None if math.isfinite(value) else "Out of range float values are not JSON compliant"
    if isinstance(value, str | int) or value is None:
        return None
    if key:
        return f"keys must be str, int, float, bool or None, not {type(value).__name__}"
    return f"Object of type {type(value).__name__} is not JSON serializable"


_NO_EXTRA: Mapping[str, JSON] = MappingProxyType({})


def _copy(decision: Decision) -> Decision:
    """A copy that shares nothing mutable with the cached decision (only needed when it has
    ``extra``: a decision without is cached with an immutable empty one, and shared)."""
    extra = copy.deepcopy(dict(decision.extra)) if decision.extra else {}
    return Decision(decision.result, decision.reasons, extra)


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


def parse_listing(value: Any) -> Listing:
    """Check the listing rule's value (as JSON carries it, ``UNDEFINED`` when undefined): only
    ``true`` lists; anything but a boolean is a problem, and not listed."""
    if value is True or value is False:
        return Listing(value)
    if value == UNDEFINED:
        return Listing(False, f"{LISTING_RULE} is undefined")
    return Listing(False, f"{LISTING_RULE} is not a boolean: {_short(value)}")


def policy_error(cause: str) -> Decision:
    """The fail-closed decision: deny, with the cause as its only reason."""
    return Decision(DecisionResult.DENY, (f"policy error: {cause}",))


def _short(value: Any) -> str:
    text = json.dumps(value) if value is not None else "missing"
    return text if len(text) <= 80 else text[:77] + "..."
