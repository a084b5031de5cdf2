"""What the policy modules can read of ``input``: the key of the embedded backend's decision cache.

A Rego evaluation is a function of the input, the data and the modules, except through a
non-deterministic builtin (``time.now_ns``, ``rand.intn``, ``http.send``, ...). The data and the
modules are fixed for the life of a backend, so two inputs that agree on every part of ``input``
the modules can read get the same decision. This module finds those parts statically, from the
syntax tree of every policy module (regorus ``get_ast_as_json``), and refuses, with the cause,
whenever it cannot bound them. It is sound by construction rather than clever:

- A reference whose root is the variable ``input`` reads the path of its leading fixed keys
  (``.name`` or ``["name"]``) and everything below it: ``input.tool.name`` reads
  ``tool.name``, ``input.paths[_].relative`` reads all of ``paths``, ``import input.tool``
  reads all of ``tool``. The index expressions that follow are scanned like everything else.
- ``object.get(input, <key or array of keys>, default)``, with literal keys, reads the path of
  its leading string keys, as a reference would.
- Any other occurrence of the variable ``input`` (``input[k]`` with a computed ``k``, ``input``
  passed to a function, bound to a variable, compared, walked, marshalled, replaced with
  ``with input as ...``) refuses, as does a reference that reads ``input`` as a whole.
- Every call must be a builtin known to be deterministic (``DETERMINISTIC_BUILTINS``) or a
  function defined in the modules, by its bare name in its own package or its full
  ``data.``-path; anything else refuses (an unknown builtin, ``print``, a call through an import
  alias). Functions and rules defined in the modules are scanned with everything else.
- ``with`` anywhere refuses (it can replace a builtin by another).

Every module of the engine is scanned (test modules are not loaded into the backend's engines).
The projection (``project``) copies the document along those paths: the value at the end of a
path whole, a value that is not an object where a path continues whole (the policy sees it as it
is), and a missing key missing. A policy that reads only those paths cannot tell the projection
from the document.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.policy.loader import ref_path, rules_in_ast
from gateway.yamlsrc import closest

Path = tuple[str, ...]

DETERMINISTIC_BUILTINS = frozenset(
    name
    for names in (
        "abs all any cast_array cast_boolean cast_null cast_object cast_set cast_string ceil",
        "concat contains count endswith floor format_int indexof indexof_n intersection is_array",
        "is_boolean is_null is_number is_object is_set is_string lower max min product re_match",
        "replace round set_diff sort split sprintf startswith substring sum to_number trim",
        "trim_left trim_prefix trim_right trim_space trim_suffix type_name union upper walk",
        "array.concat array.reverse array.slice",
        "base64.decode base64.encode base64.is_valid",
        "base64url.decode base64url.encode base64url.encode_no_pad",
        "bits.and bits.lsh bits.negate bits.or bits.rsh bits.xor",
        "crypto.hmac.equal crypto.hmac.md5 crypto.hmac.sha1 crypto.hmac.sha256 crypto.hmac.sha512",
        "crypto.md5 crypto.sha1 crypto.sha256",
        "glob.match glob.quote_meta",
        "graph.reachable graph.reachable_paths",
        "hex.decode hex.encode",
        "json.filter json.is_valid json.marshal json.marshal_with_options json.patch json.remove",
        "json.unmarshal",
        "numbers.range numbers.range_step",
        "object.filter object.get object.keys object.remove object.subset object.union",
        "object.union_n",
        "regex.find_all_string_submatch_n regex.find_n regex.globs_match regex.is_valid",
        "regex.match regex.replace regex.split regex.template_match",
        "semver.compare semver.is_valid",
        "strings.any_prefix_match strings.any_suffix_match strings.count strings.replace_n",
        "strings.reverse",
        "time.add_date time.clock time.date time.diff time.format time.parse_duration_ns",
        "time.parse_ns time.parse_rfc3339_ns time.weekday",
        "units.parse units.parse_bytes",
        "urlquery.decode urlquery.decode_object urlquery.encode urlquery.encode_object",
        "uuid.parse",
        "yaml.is_valid yaml.marshal yaml.unmarshal",
    )
    for name in names.split()
)
"""Builtins whose value depends on their arguments only. Deliberately absent, so that a policy
that calls them is not cached: ``time.now_ns`` (read the time of the call from
``input.request.time_ms`` instead; the ``time.*`` functions of a given time are listed above:
their ``"Local"`` zone is the process's, fixed for the life of a backend and its cache),
``rand.intn``, ``uuid.rfc4122``, ``http.send``, ``opa.runtime``,
``net.lookup_ip_addr``, ``io.jwt.*`` (``decode_verify`` reads the clock, ``encode_sign`` may use
randomness), ``crypto.x509.*`` (validity against the clock), and ``print``/``trace`` (their
output would be skipped on a cached decision)."""

_INPUT = "input"
_STRING_KINDS = ("String", "RawString")


@dataclass(frozen=True)
class InputReads:
    """The paths of ``input`` the modules can read, or why that is not known."""

    paths: tuple[Path, ...]
    """Sorted, without a path below another; meaningless when ``refusal`` is set."""
    refusal: str | None
    """Why decisions must not be cached (``file:line: ...``); None when they may be."""


def input_reads(modules: Sequence[Mapping[str, Any]]) -> InputReads:
    """Scan the modules of a regorus syntax tree (``json.loads(engine.get_ast_as_json())``)."""
    scan = _Scan(modules)
    for module in modules:
        scan.module(module)
    if scan.refusals:
        return InputReads((), scan.refusals[0])
    return InputReads(_minimal(scan.paths), None)


Tree = dict[str, "Tree | None"]
"""Paths as nested keys; None: the whole value from here down."""


def path_tree(paths: Sequence[Path]) -> Tree:
    """The paths as a tree for ``project``; a path that ends at a node takes it whole."""
    tree: Tree = {}
    for path in _minimal(paths):
        node = tree
        for key in path[:-1]:
            child = node.setdefault(key, {})
            assert child is not None  # _minimal drops paths below another
            node = child
        node[path[-1]] = None
    return tree


def project(document: Mapping[str, Any], tree: Tree) -> dict[str, Any]:
    """The parts of ``document`` along the paths of ``tree`` (see the module docstring)."""
    out: dict[str, Any] = {}
    for key, below in tree.items():
        if key in document:
            value = document[key]
            out[key] = value if below is None or type(value) is not dict else project(value, below)
    return out


# --- scanning -------------------------------------------------------------------------------------


def _minimal(paths: Sequence[Path]) -> tuple[Path, ...]:
    """Sorted and deduplicated, without the paths that lie below another one."""
    kept: list[Path] = []
    for path in sorted(set(paths)):
        if not (kept and path[: len(kept[-1])] == kept[-1]):
            kept.append(path)
    return tuple(kept)


@dataclass
class _Scan:
    modules: Sequence[Mapping[str, Any]]
    paths: list[Path] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    functions: set[str] = field(init=False)
    object_get_is_builtin: bool = field(init=False)
    file: str = ""
    package: str = ""

    def __post_init__(self) -> None:
        self.functions = {r.path for r in rules_in_ast(self.modules) if r.function}
        # `object.get` could name a function of the modules through an import or a rule head.
        self.object_get_is_builtin = not any(
            p.endswith(".object.get") for p in self.functions
        ) and not any(_import_names(m) & {"object"} for m in self.modules)

    def module(self, module: Mapping[str, Any]) -> None:
        self.file = str(module["source"]["file"])
        ast = module["ast"]
        self.package = ".".join(ref_path(ast["package"]["refr"]))
        self.walk([value for key, value in ast.items() if key != "package"])  # imports, rules

    def refuse(self, node: Mapping[str, Any], why: str) -> None:
        line = node.get("span", {}).get("line", "?") if isinstance(node, Mapping) else "?"
        self.refusals.append(f"{self.file}:{line}: {why}")

    def walk(self, node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                self.walk(item)
            return
        if not isinstance(node, dict):
            return
        if len(node) == 1:
            kind, body = next(iter(node.items()))
            if isinstance(body, dict):
                if kind in ("RefDot", "RefBrack", "Var"):
                    self.reference(node)
                    return
                if kind == "Call":
                    self.call(body)
                    return
        if node.get("with_mods"):
            self.refuse(node, "`with` can replace a builtin or a rule; decisions are not cached")
        for value in node.values():
            self.walk(value)

    def reference(self, node: dict[str, Any]) -> None:
        root, steps = _unwind(node)
        kind, body = next(iter(root.items()))
        if kind == "Var" and body.get("value") == _INPUT:
            path = list(_fixed_prefix(steps))
            if not path:
                self.refuse(body, "reads `input` as a whole or by a computed key")
            else:
                self.paths.append(tuple(path))
        elif kind != "Var":
            self.walk(root)  # e.g. a call: f(x).y
        for step, value in steps:
            if step == "index":
                self.walk(value)

    def call(self, body: dict[str, Any]) -> None:
        name = _dotted(body["fcn"])
        params = body.get("params") or []
        if name is None:
            self.refuse(body, "calls a function through a computed reference")
        elif not self.known(name):
            self.refuse(body, f"calls {name}, which is not known to be deterministic")
        if (
            name == "object.get"
            and self.object_get_is_builtin
            and len(params) == 3
            and _is_input(params[0])
        ):
            path = list(_literal_keys(params[1]))
            if not path:
                self.refuse(body, "reads `input` as a whole or by a computed key")
            else:
                self.paths.append(tuple(path))
            params = params[1:]
        self.walk(params)

    def known(self, name: str) -> bool:
        if name.startswith("data."):
            return name in self.functions
        if name in DETERMINISTIC_BUILTINS:
            return True
        return "." not in name and f"data.{self.package}.{name}" in self.functions


def _unwind(node: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """A reference (nested ``RefDot``/``RefBrack``) as its root node and its steps from the
    root outwards: ``("field", name)`` or ``("index", node)``."""
    steps: list[tuple[str, Any]] = []
    root = node
    while True:
        kind, body = next(iter(root.items()))
        if kind == "RefDot":
            steps.append(("field", body["field"][-1]))
        elif kind == "RefBrack":
            steps.append(("index", body["index"]))
        else:
            break
        root = body["refr"]
    steps.reverse()
    return root, steps


def _fixed_prefix(steps: list[tuple[str, Any]]) -> Iterator[str]:
    for step, value in steps:
        if step == "field" and isinstance(value, str):
            yield value
        elif step == "index" and _string(value) is not None:
            yield str(_string(value))
        else:
            return


def _literal_keys(node: Any) -> Iterator[str]:
    """The leading string keys of ``object.get``'s key argument (a string or an array)."""
    single = _string(node)
    if single is not None:
        yield single
        return
    kind, body = next(iter(node.items())) if isinstance(node, dict) and len(node) == 1 else ("", {})
    if kind != "Array":
        return
    for item in body.get("items") or []:
        key = _string(item)
        if key is None:
            return
        yield key


def _string(node: Any) -> str | None:
    if isinstance(node, dict) and len(node) == 1:
        kind, body = next(iter(node.items()))
        if kind in _STRING_KINDS and isinstance(body, dict) and isinstance(body.get("value"), str):
            return str(body["value"])
    return None


def _is_input(node: Any) -> bool:
    return isinstance(node, dict) and node.get("Var", {}).get("value") == _INPUT


def _dotted(node: Any) -> str | None:
    """``a.b.c`` of a function reference made of a variable and fixed fields, else None."""
    if not (isinstance(node, dict) and len(node) == 1):
        return None
    kind, body = next(iter(node.items()))
    if kind == "Var":
        return str(body["value"])
    if kind == "RefDot":
        head = _dotted(body["refr"])
        return None if head is None else f"{head}.{body['field'][-1]}"
    return None


def _import_names(module: Mapping[str, Any]) -> set[str]:
    """The names the imports of a module bind: the alias, or the last key of the path."""
    names: set[str] = set()
    text = str(module.get("source", {}).get("contents", ""))
    for imp in module["ast"].get("imports") or []:
        alias = imp.get("as")
        if isinstance(alias, dict) and "start" in alias:
            start, end = alias["start"], alias["end"]
            names.add(text.encode("utf-8")[start:end].decode("utf-8", "replace"))  # byte offsets
            names.add(text[start:end])  # in case they count characters
        else:
            names.add(ref_path(imp["refr"])[-1])
    return names


# --- what the modules read of the policy data -----------------------------------------------------


@dataclass(frozen=True)
class DataRead:
    """A reference to ``data`` with the leading fixed keys it names (``file:line`` of it)."""

    file: str
    line: int
    path: Path
    """The fixed keys after ``data``: ``("toolgate", "risk_rules")`` for
    ``data.toolgate.risk_rules[r]``."""


def data_reads(modules: Sequence[Mapping[str, Any]]) -> list[DataRead]:
    """Every reference rooted at ``data`` in the modules of a syntax tree, in file order."""
    found: list[DataRead] = []
    for module in modules:
        _data_walk(module["ast"].get("rules"), str(module["source"]["file"]), found)
    return found


def _data_walk(node: Any, file: str, found: list[DataRead]) -> None:
    if isinstance(node, list):
        for item in node:
            _data_walk(item, file, found)
        return
    if not isinstance(node, dict):
        return
    if len(node) == 1:
        kind, body = next(iter(node.items()))
        if kind in ("RefDot", "RefBrack") and isinstance(body, dict):
            root, steps = _unwind(node)
            kind, body = next(iter(root.items()))
            if kind == "Var" and body.get("value") == "data":
                path = tuple(_fixed_prefix(steps))
                line = int(body.get("span", {}).get("line", 0))
                if path:
                    found.append(DataRead(file, line, path))
            else:
                _data_walk(root, file, found)
            for step, value in steps:
                if step == "index":
                    _data_walk(value, file, found)
            return
    for value in node.values():
        _data_walk(value, file, found)


def missing_data(
    reads: Sequence[DataRead], data: Mapping[str, Any], root: str, rule_paths: set[str]
) -> list[str]:
    """A warning for every read of ``data.<root>.…`` whose keys are not in ``data`` (the merged
    policy data) and that no rule or package of the modules defines: a misspelt key silently
    disables the rule that reads it. ``rule_paths`` are the modules' rule and package paths
    (``data.toolgate.decision``)."""
    warnings: list[str] = []
    for read in reads:
        if len(read.path) < 2 or read.path[0] != root:
            continue
        if any(
            ".".join(("data", *read.path[:n])) in rule_paths for n in range(2, len(read.path) + 1)
        ):
            continue
        value: Any = data
        for depth, key in enumerate(read.path[1:], start=1):
            if not isinstance(value, Mapping):
                break  # a list or a scalar: indexing it is the rule's business
            if key not in value:
                where = ".".join(read.path[1:depth]) or "the top level"
                near = closest(key, sorted(str(k) for k in value))
                guess = f" (did you mean '{near}'?)" if near is not None else ""
                warnings.append(
                    f"{read.file}:{read.line}: data.{'.'.join(read.path)}: no key '{key}' at "
                    f"{where} of the policy data (policies/*.yaml){guess}; a misspelling? the "
                    "rule never sees a value there"
                )
                break
            value = value[key]
    return warnings
