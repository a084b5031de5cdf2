"""A compiled fast path for validating and normalising tool arguments, deferring to cerberus.

cerberus builds child validators, error trees and rule queues for every call: 100-800 µs for
a small schema. :func:`compile_schema` turns a cerberus ``input:`` schema into Python
closures that do the same normalisation and checks in a few µs, for the rules whose exact
semantics it models (see ``_RULES``). :class:`FastValidator` runs them first:

* the fast path **accepts** a document only when cerberus would accept it, and then returns
  exactly the document cerberus would (same keys in the same order, same values and types);
* when it rejects a document, or meets anything it is unsure of (a value of a type outside
  JSON, a ``schema`` rule that does not fit the value's kind, an exception), cerberus runs on
  the untouched document and decides, with its own errors;
* a schema using any other rule, or a rule value of a shape not modelled, compiles to no fast
  path at all: every call goes to cerberus.

The semantics modelled are those of :class:`JsonValidator` (``integer``/``float``/``number``
refuse bools, ``regex`` must match the whole string) in cerberus 1.3, with the options the
catalogue uses. In cerberus's order: readonly fields are purged (``purge_readonly``), missing
fields (and ``None`` in a field that is not ``nullable``) get their ``default``, nested
``schema`` rules normalise dicts and list items, and only then is every rule checked on the
normalised values. One deliberate difference that no comparison by value can see: a mutable
``default`` is copied, where cerberus puts the schema's own object in the document.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import cerberus

from gateway.declarations import fastrules
from gateway.declarations.fastrules import SIZED, Unsupported, Unsure
from gateway.declarations.validator import JsonValidator

Check = Callable[[Any], Any]
"""Normalise and check one value: returns the normalised value or raises ``Unsure``."""
MappingCheck = Callable[[dict[Any, Any]], dict[Any, Any]]

# The rules the fast path models; any other rule leaves the whole schema to cerberus.
_RULES = frozenset(
    {
        "type",
        "required",
        "nullable",
        "default",
        "readonly",
        "empty",
        "allowed",
        "forbidden",
        "min",
        "max",
        "minlength",
        "maxlength",
        "regex",
        "schema",
        "allow_unknown",
        "require_all",
        "meta",
        "dependencies",
        "excludes",
    }
)
# Rules about a field's siblings: only modelled for the fields of a dict, not list items.
_MAPPING_ONLY = ("dependencies", "excludes")
_BOOL_RULES = ("required", "nullable", "readonly", "empty", "allow_unknown", "require_all")

# The exact Python types the fast path handles (what JSON decodes to, besides None). A value
# of any other type (a subclass included) goes to cerberus.
_KINDS: tuple[type, ...] = (bool, int, float, str, list, dict)
_ALL_KINDS = frozenset(_KINDS)
_IMMUTABLE = (type(None), bool, int, float, str, bytes)


@dataclass(frozen=True)
class _Scope:
    """Validator settings a dict's fields are checked with (inherited by nested dicts)."""

    allow_unknown: bool
    require_all: bool
    purge_readonly: bool


def compile_schema(
    schema: Mapping[Any, Any],
    *,
    allow_unknown: bool = False,
    require_all: bool = False,
    purge_readonly: bool = False,
) -> MappingCheck:
    """The fast path for ``schema`` (as cerberus expanded it), or :class:`Unsupported`.

    The returned function takes a ``dict`` and returns its normalised copy, or raises (an
    internal exception, or any error from a value it cannot handle) when it does not accept
    the document; it never changes its argument.
    """
    if not str(getattr(cerberus, "__version__", "")).startswith("1.3."):
        raise Unsupported(f"cerberus {getattr(cerberus, '__version__', '?')}: modelled on 1.3")
    for name, value in (("allow_unknown", allow_unknown), ("require_all", require_all)):
        if not isinstance(value, bool):
            raise Unsupported(f"option {name}={value!r}")
    return _compile_mapping(schema, _Scope(allow_unknown, require_all, bool(purge_readonly)), "")


class FastValidator:
    """A :class:`JsonValidator` with a compiled fast path, used like a cerberus validator.

    ``validate(document)`` returns whether the document is valid; then ``document`` is the
    normalised document and ``errors`` cerberus's errors (``{}`` when valid). One instance is
    reused for sequential calls, like a cerberus validator (not safe across threads).
    ``last_fast`` says whether the last call was decided by the fast path, and
    ``errors_truncated`` whether validation stopped after ``JsonValidator.max_errors`` errors.
    """

    def __init__(
        self,
        schema: Mapping[Any, Any],
        *,
        purge_readonly: bool = False,
        allow_unknown: bool = False,
        require_all: bool = False,
    ) -> None:
        # Constructing the cerberus validator checks and expands the schema; the fast path
        # is compiled from that expanded schema.
        self.cerberus = JsonValidator(
            schema,
            purge_readonly=purge_readonly,
            allow_unknown=allow_unknown,
            require_all=require_all,
        )
        self.unsupported: str | None = None
        self._fast: MappingCheck | None
        try:
            self._fast = compile_schema(
                self.cerberus.schema,
                allow_unknown=allow_unknown,
                require_all=require_all,
                purge_readonly=purge_readonly,
            )
        except Unsupported as exc:
            self._fast, self.unsupported = None, str(exc)
        self._screen: MappingScreen | None = None
        if self._fast is not None:  # the screen models what the fast path models
            self._screen = _screen_mapping(self.cerberus.schema, allow_unknown)
        self._options = {
            "purge_readonly": purge_readonly,
            "allow_unknown": allow_unknown,
            "require_all": require_all,
        }
        self._source = schema
        self._document: dict[Any, Any] | None = None
        self._screened: list[Any] = []
        self.last_fast = False
        self.items_screened = 0
        self.errors_truncated = False
        """Values the screen of the last call looked at (a bound on its work)."""

    @property
    def last_screened(self) -> bool:
        """Whether the screen's faults are among the last document's errors (cerberus then
        did not walk all of it): they are then some of those cerberus would report, not all
        of them (not those inside a value over its ``maxlength``; none past the budget)."""
        return bool(self._screened)

    @property
    def has_fast_path(self) -> bool:
        return self._fast is not None

    @property
    def schema(self) -> Any:
        return self.cerberus.schema

    def fresh(self) -> FastValidator:
        """A new validator of the same schema and options (for another thread)."""
        return FastValidator(self._source, **self._options)

    def validate(self, document: Any, *args: Any, **kwargs: Any) -> bool:
        """Validate and normalise ``document``; cerberus's other arguments (``schema``,
        ``update``, ``normalize``) go to cerberus alone.

        A document the fast path does not accept is first screened for faults that are
        certain and cheap to find (unknown fields, a list, string or dict over its
        ``maxlength``). When they use up the error budget, or one is a value over its
        ``maxlength``, they are the answer, without walking the rest: a list of a thousand
        items over a ``maxlength`` of 64 costs no more than one of 65. Otherwise (unknown
        fields alone) cerberus judges the whole document and names every field at fault.
        (Judging the rest with the long value emptied instead let the emptied value speak:
        its list's ``allowed`` named ``''``, not what was sent.)
        """
        fast = self._fast
        self._screened, self.items_screened = [], 0
        if fast is not None and type(document) is dict and not args and not kwargs:
            try:
                self._document = fast(document)
            except Exception:  # Unsure, or anything unexpected: cerberus decides
                pass
            else:
                self.last_fast = True
                return True
            assert self._screen is not None
            found = _Found(self.cerberus.max_errors)
            with contextlib.suppress(_Full):  # as many errors as are reported
                self._screen(document, (), found)
            self.items_screened = found.visited
            if found.truncated or any(
                e.code == cerberus.errors.MAX_LENGTH.code for e in found.errors
            ):
                self.last_fast, self._document, self._screened = False, None, found.errors
                self.errors_truncated = found.truncated
                return False
        self.last_fast = False
        self._document = None
        valid = bool(self.cerberus.validate(document, *args, **kwargs))
        self.errors_truncated = bool(getattr(self.cerberus, "errors_truncated", False))
        return valid

    __call__ = validate

    @property
    def document(self) -> Any:
        if self.last_fast:
            return self._document
        # cerberus puts a schema's mutable default into the document itself; a copy keeps
        # later in-place rewrites (path normalisation) from changing the schema.
        return copy.deepcopy(self.cerberus.document)

    @property
    def errors(self) -> Any:
        if self.last_fast:
            return {}
        if self._screened:
            return cerberus.errors.BasicErrorHandler()(self._screened)
        return self.cerberus.errors


# --- compilation --------------------------------------------------------------------------


def _compile_mapping(schema: Any, scope: _Scope, path: str) -> MappingCheck:
    """Normalise and check a dict against ``schema`` (a mapping of field names to rules).

    The steps of cerberus's ``__normalize_mapping`` and ``validate`` for one dict: purge
    readonly fields, fill defaults, normalise and check each value, refuse unknown fields,
    check required fields, ``dependencies`` and ``excludes``.
    """
    if not isinstance(schema, Mapping):
        raise Unsupported(f"{path or 'schema'}: not a mapping of fields")
    procs: dict[Any, Check] = {}
    purged: set[Any] = set()
    fills: list[tuple[Any, Callable[[], Any]]] = []
    required: list[Any] = []
    posts: list[Callable[[dict[Any, Any]], None]] = []
    excludes: list[tuple[Any, tuple[Any, ...], bool]] = []
    for name, rules in schema.items():
        where = f"{path}.{name}" if path else str(name)
        if not isinstance(rules, Mapping):
            raise Unsupported(f"{where}: rules are not a mapping")
        check = _compile_value(rules, scope, where, item=False)
        if rules.get("readonly"):
            if scope.purge_readonly:
                purged.add(name)
            else:
                procs[name] = _refuse
        else:
            procs[name] = _with_default(check, rules)
        if "default" in rules:
            fills.append((name, _filler(check, rules["default"])))
        if rules.get("required", scope.require_all) is True:
            required.append(name)
        if "dependencies" in rules:
            posts.append(fastrules.dependencies(name, rules["dependencies"], where))
        if "excludes" in rules:
            excluded = fastrules.excluded(rules["excludes"], where)
            excludes.append((name, excluded, bool(rules.get("required", scope.require_all))))

    allow_unknown = scope.allow_unknown
    if excludes:
        posts.append(fastrules.required_with_excludes(required, excludes, frozenset(schema)))
        required = []

    def check_mapping(doc: dict[Any, Any]) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for key, value in doc.items():
            proc = procs.get(key)
            if proc is not None:
                out[key] = proc(value)
            elif key in purged:
                continue
            elif allow_unknown:
                out[key] = value
            else:
                raise Unsure
        for name, fill in fills:
            if name not in out:
                out[name] = fill()
        for name in required:
            if name not in out:
                raise Unsure
        for post in posts:
            post(out)
        return out

    return check_mapping


def _compile_value(rules: Mapping[str, Any], scope: _Scope, where: str, *, item: bool) -> Check:
    """Normalise and check one value against its rules (``default`` is the caller's)."""
    unknown = [rule for rule in rules if rule not in _RULES]
    if unknown:
        raise Unsupported(f"{where}: rule {unknown[0]!r}")
    for rule in _BOOL_RULES:
        if rule in rules and not isinstance(rules[rule], bool):
            raise Unsupported(f"{where}: {rule} is not a boolean")
    if item and (rules.get("readonly") or any(rule in rules for rule in _MAPPING_ONLY)):
        # cerberus purges readonly list items, and looks siblings up among list indices.
        raise Unsupported(f"{where}: readonly, dependencies or excludes on list items")

    nullable = bool(rules.get("nullable", False))
    accepted = _accepted_types(rules.get("type"), where)
    empty_rule: bool | None = rules.get("empty")
    dict_norm, list_norm = _containers(rules, scope, where)
    sized_tests: list[Callable[[Any], bool]] = []  # skipped for an empty value under `empty`
    tests: list[Callable[[Any], bool]] = []
    for rule, value in rules.items():
        if rule == "allowed":
            sized_tests.append(fastrules.allowed(value, where))
        elif rule == "forbidden":
            sized_tests.append(fastrules.forbidden(value, where))
        elif rule == "minlength":
            sized_tests.append(fastrules.minlength(fastrules.length(value, rule, where)))
        elif rule == "maxlength":
            sized_tests.append(fastrules.maxlength(fastrules.length(value, rule, where)))
        elif rule == "regex":
            sized_tests.append(fastrules.regex(value, where))
        elif rule == "min":
            tests.append(fastrules.min_rule(value))
        elif rule == "max":
            tests.append(fastrules.max_rule(value))
    all_tests = tuple(sized_tests + tests)
    empty_tests = tuple(tests)

    def check(value: Any) -> Any:
        if value is None:
            # `nullable` drops every other rule modelled here (dependencies and excludes
            # are checked on the dict).
            if nullable:
                return None
            raise Unsure
        kind = type(value)
        if kind not in accepted:
            raise Unsure
        if kind is dict:
            if dict_norm is not None:
                value = dict_norm(value)
        elif kind is list and list_norm is not None:
            value = list_norm(value)
        if empty_rule is not None and kind in SIZED and not value:
            # `empty` drops allowed, forbidden, minlength, maxlength and regex.
            if not empty_rule:
                raise Unsure
            selected = empty_tests
        else:
            selected = all_tests
        for test in selected:
            if not test(value):
                raise Unsure
        return value

    return check


def _accepted_types(type_rule: Any, where: str) -> frozenset[type]:
    """The exact types among ``_KINDS`` that JsonValidator's ``type`` rule accepts."""
    if type_rule is None:
        return _ALL_KINDS
    names = [type_rule] if isinstance(type_rule, str) else type_rule
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        raise Unsupported(f"{where}: type {type_rule!r}")
    if not names:  # an empty list checks nothing
        return _ALL_KINDS
    accepted: set[type] = set()
    for name in names:
        definition = JsonValidator.types_mapping.get(name)
        if definition is None:
            raise Unsupported(f"{where}: type {name!r}")
        accepted.update(
            kind
            for kind in _KINDS
            if issubclass(kind, definition.included_types)
            and not issubclass(kind, definition.excluded_types)
        )
    return frozenset(accepted)


def _containers(
    rules: Mapping[str, Any], scope: _Scope, where: str
) -> tuple[Check | None, Check | None]:
    """How a dict and a list value are normalised (and their contents checked), if at all.

    cerberus applies ``schema`` by the kind of the value: a dict's fields, or a list's items.
    Which one the schema means is cerberus's own heuristic (every rule set a mapping: fields);
    a value of the other kind goes to cerberus.
    """
    if "schema" not in rules:
        # A dict with allow_unknown gets a copy from cerberus (a child validator normalises
        # it against an empty schema); nothing is checked inside.
        return (dict if "allow_unknown" in rules else None), None
    sub = rules["schema"]
    if not isinstance(sub, Mapping):
        raise Unsupported(f"{where}: schema {sub!r} (a registry name?)")
    if all(isinstance(r, Mapping) for r in sub.values()):
        child = _Scope(
            rules.get("allow_unknown", scope.allow_unknown),
            rules.get("require_all", scope.require_all),
            scope.purge_readonly,
        )
        return _compile_mapping(sub, child, where), _refuse
    # The rules of every list item; a list's items inherit the scope of the list's dict.
    item = _with_default(_compile_value(sub, scope, f"{where}[]", item=True), sub)

    def list_norm(values: list[Any]) -> list[Any]:
        return [item(value) for value in values]

    return _refuse, list_norm


def _with_default(check: Check, rules: Mapping[str, Any]) -> Check:
    """``check``, after a ``None`` got the default if the field is not nullable."""
    if "default" not in rules or rules.get("nullable", False):
        return check
    make = _maker(rules["default"])

    def proc(value: Any) -> Any:
        return check(make() if value is None else value)

    return proc


def _filler(check: Check, default: Any) -> Callable[[], Any]:
    make = _maker(default)
    return lambda: check(make())


def _maker(default: Any) -> Callable[[], Any]:
    if isinstance(default, _IMMUTABLE):
        return lambda: default
    return lambda: copy.deepcopy(default)


def _refuse(value: Any) -> Any:
    raise Unsure


# --- the screen ---------------------------------------------------------------------------
# Run on a document the fast path refused, before cerberus: the faults it reports are ones
# cerberus would report too (an unknown field where unknown fields are not allowed; a value of
# an accepted type longer than its ``maxlength``), found in one walk that skips the items of a
# list already over its bound and stops after ``max_errors``.

MappingScreen = Callable[[dict[Any, Any], tuple[Any, ...], "_Found"], None]
ValueScreen = Callable[[Any, tuple[Any, ...], "_Found"], None]


class _Full(Exception):
    """The screen found as many errors as are reported."""


class _Found:
    __slots__ = ("errors", "limit", "truncated", "visited")

    def __init__(self, limit: int) -> None:
        self.errors: list[Any] = []
        self.limit, self.truncated, self.visited = limit, False, 0

    def add(self, error: Any) -> None:
        if len(self.errors) >= self.limit:
            self.truncated = True
            raise _Full
        self.errors.append(error)


def _screen_mapping(schema: Mapping[Any, Any], allow_unknown: bool) -> MappingScreen:
    fields = {name: _screen_value(rules, allow_unknown) for name, rules in schema.items()}

    def screen(doc: dict[Any, Any], path: tuple[Any, ...], found: _Found) -> None:
        for key, value in doc.items():
            found.visited += 1
            check = fields.get(key)
            if check is not None:
                check(value, (*path, key), found)
            elif not allow_unknown:
                found.add(
                    cerberus.errors.ValidationError(
                        (*path, key), (), cerberus.errors.UNKNOWN_FIELD.code, None, None, value, ()
                    )
                )

    return screen


def _screen_value(rules: Mapping[str, Any], allow_unknown: bool) -> ValueScreen:
    if rules.get("readonly"):  # purged (or refused as readonly): no other rule is reported
        return _skip
    accepted = _accepted_types(rules.get("type"), "")
    bound = rules.get("maxlength")
    fields: MappingScreen | None = None
    items: ValueScreen | None = None
    sub = rules.get("schema")
    if isinstance(sub, Mapping):
        if all(isinstance(r, Mapping) for r in sub.values()):
            fields = _screen_mapping(sub, rules.get("allow_unknown", allow_unknown))
        else:
            items = _screen_value(sub, allow_unknown)

    def screen(value: Any, path: tuple[Any, ...], found: _Found) -> None:
        kind = type(value)
        if kind not in accepted or kind not in SIZED:
            return
        if bound is not None and len(value) > bound:
            found.add(
                cerberus.errors.ValidationError(
                    path,
                    (*path, "maxlength"),
                    cerberus.errors.MAX_LENGTH.code,
                    "maxlength",
                    bound,
                    value,
                    (len(value),),
                )
            )
        elif kind is dict and fields is not None:
            fields(value, path, found)
        elif kind is list and items is not None:
            for index, item in enumerate(value):
                found.visited += 1
                items(item, (*path, index), found)

    return screen


def _skip(value: Any, path: tuple[Any, ...], found: _Found) -> None:
    return None
