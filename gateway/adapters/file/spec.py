"""What ``adapter: file`` declarations may say: the operations, the probes and the path
arguments every file tool must list (no options of its own). Light on purpose: no adapter.
"""

from __future__ import annotations

from gateway.declarations.spec import AdapterSpec

_READS = frozenset({"none", "read"})
_WRITES = frozenset({"write"})
SPEC = AdapterSpec(
    name="file",
    operations={
        "read": _READS,
        "list": _READS,
        "write": _WRITES,
        "atomic_replace": _WRITES,
        "apply_patch": _WRITES,
        "append": _WRITES,
        "write_many": _WRITES,
        "delete": _WRITES,
    },
    probes={"file_sha256": frozenset({"path"}), "file_exists": frozenset({"path"})},
    path_arguments={"*": frozenset({"path"}), "write_many": frozenset({"files.*.path"})},
)
