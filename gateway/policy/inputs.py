"""The policy input as the ``policy.decided`` event records it (docs/policies.md).

The input holds the call's normalised arguments, which may be large (a file's content) or many.
The event keeps everything else whole and a bounded copy of ``arguments``: strings longer than
``MAX_STRING`` characters are cut (with a marker naming the full length), lists and objects
longer than ``MAX_ITEMS`` lose their tail (with a marker), and values nested deeper than
``MAX_DEPTH`` are replaced by a marker. ``arguments_sha256`` in the input is the hash of the
full arguments; the full arguments are in the execution record. The arguments are recorded
because the execution already stores them for the same readers; a tool whose arguments carry
secrets should take them from the gateway's configuration instead (docs/tools.md), or list
them in ``policy_input_mask``: each dotted path there (``arguments.password``) is recorded as
``MASK`` (through lists too: ``paths.relative`` masks every path's ``relative``). A replay
(``toolgate policy replay``) sees the mask, not the value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

MAX_STRING = 1024
MAX_ITEMS = 100
MAX_DEPTH = 16
MASK = "***"


def recorded_input(
    document: Mapping[str, Any], mask: Sequence[str] = ()
) -> tuple[dict[str, Any], bool]:
    """The document with its ``arguments`` bounded and the ``mask`` paths masked, and whether
    anything was cut."""
    out = dict(document)
    cut: list[bool] = []
    if "arguments" in out:
        out["arguments"] = _bounded(out["arguments"], 0, cut)
    for path in mask:
        out = _masked(out, path.split("."))
    return out, bool(cut)


def _masked(value: Any, path: list[str]) -> Any:
    """``value`` with what lies at ``path`` replaced by MASK; a copy where it changes."""
    if isinstance(value, list):
        return [_masked(item, path) for item in value]
    if not isinstance(value, dict) or path[0] not in value:
        return value
    out = dict(value)
    out[path[0]] = MASK if len(path) == 1 else _masked(value[path[0]], path[1:])
    return out


def _bounded(value: Any, depth: int, cut: list[bool]) -> Any:
    if isinstance(value, str):
        if len(value) <= MAX_STRING:
            return value
        cut.append(True)
        return f"{value[:MAX_STRING]}…[cut: {len(value)} characters]"
    if not isinstance(value, dict | list):
        return value
    if depth >= MAX_DEPTH:
        cut.append(True)
        return f"…[cut: nested deeper than {MAX_DEPTH}]"
    if isinstance(value, list):
        items = [_bounded(item, depth + 1, cut) for item in value[:MAX_ITEMS]]
        if len(value) > MAX_ITEMS:
            cut.append(True)
            items.append(f"…[cut: {len(value)} items]")
        return items
    bounded: dict[str, Any] = {}
    for n, (key, item) in enumerate(value.items()):
        if n == MAX_ITEMS:
            cut.append(True)
            bounded["…"] = f"[cut: {len(value)} keys]"
            break
        bounded[key] = _bounded(item, depth + 1, cut)
    return bounded
