"""Readable tables for people (``--json`` prints the raw answer instead)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Rows under headers in aligned columns (the last one unpadded), for people."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        padded = [str(c).ljust(w) for c, w in zip(cells[:-1], widths, strict=False)]
        return "  ".join([*padded, str(cells[-1])]).rstrip()

    return "\n".join([line(headers), *(line(r) for r in rows)])


def when(ms: object) -> str:
    """An epoch-milliseconds time as local ``YYYY-MM-DD HH:MM:SS``; ``-`` when absent."""
    if not isinstance(ms, int):
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


def time_left(ms: object) -> str:
    """Time left until an epoch-milliseconds instant, e.g. ``42m``; ``expired`` when past."""
    if not isinstance(ms, int):
        return "-"
    seconds = int(ms / 1000 - time.time())
    if seconds <= 0:
        return "expired"
    if seconds < 120:
        return f"{seconds}s"
    return f"{seconds // 60}m" if seconds < 7200 else f"{seconds // 3600}h"


def approvals_table(items: Sequence[dict[str, Any]]) -> str:
    rows = [
        [
            a.get("id", ""),
            a.get("status", ""),
            f"{a['tool']['name']}@{a['tool']['version']}",
            a.get("requested_by", ""),
            a.get("workspace", ""),
            when(a.get("requested_at_ms")),
            time_left(a.get("expires_at_ms")) if a.get("status") == "pending" else "-",
            "; ".join(a.get("reasons") or []),
        ]
        for a in items
    ]
    headers = ["ID", "STATUS", "TOOL", "REQUESTED BY", "WORKSPACE", "REQUESTED", "LEFT", "REASONS"]
    return table(headers, rows)


def executions_table(items: Sequence[dict[str, Any]]) -> str:
    rows = []
    for e in items:
        result = e.get("result") or {}
        error = result.get("error") or {}
        rows.append(
            [
                e.get("id", ""),
                e.get("run_id", ""),
                e.get("call_id", ""),
                f"{e['tool']['name']}@{e['tool']['version'] or '?'}",
                e.get("status", ""),
                result.get("outcome") or "-",
                error.get("type") or "",
                when(e.get("created_at_ms")),
            ]
        )
    headers = ["ID", "RUN", "CALL", "TOOL", "STATUS", "OUTCOME", "ERROR", "CREATED"]
    return table(headers, rows)
