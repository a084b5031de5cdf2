"""The decision log: one line per policy decision, in the shape of OPA's decision-log events
(https://www.openpolicyagent.org/docs/management-decision-logs), so that what reads OPA's
logs reads Toolgate's (docs/operations.md#the-decision-log).

Each event is one JSON object: ``decision_id``, ``path``, ``input`` (with the configured
fields erased), ``result``, ``timestamp``, ``labels``, ``bundles`` (the policy revision; also
as the older ``revision``), ``metrics`` (the evaluation time), ``erased`` (the paths taken
out), and ``toolgate`` (what the decision was for: ``kind`` ``execution`` with the execution,
run and call; or ``kind`` ``plan``, a dry run, with its run and call and no execution).

A shadow policy's difference (docs/policies.md#shadow-policies) is an event of its own, path
``toolgate/shadow``: ``result`` is the enforced decision (with its reasons), ``shadow`` the
candidate's (``result``, ``revision`` and ``difference``, the kind: ``allow_to_deny``, ...).
"""

from __future__ import annotations

import copy
import json
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from gateway.settings import make_directory

DECISION_PATH = "toolgate/decision"
SHADOW_PATH = "toolgate/shadow"


class DecisionLog:
    """Writes events to ``target`` (``-``: standard output; else a file, appended to)."""

    def __init__(
        self,
        target: str | Path,
        revision: str,
        mask: Sequence[str] = (),
        labels: Mapping[str, str] | None = None,
    ) -> None:
        self.revision = revision
        self.mask = tuple(_pointer(path) for path in mask)
        self.labels = dict(labels or {})
        self._lock = threading.Lock()
        self._owned: TextIO | None = None
        if str(target) == "-":
            self._out: TextIO = sys.stdout
        else:
            path = Path(target)
            make_directory(path.parent, "decision_log.path")
            self._owned = self._out = path.open("a", encoding="utf-8")

    def write(
        self,
        document: Mapping[str, Any],
        result: Mapping[str, Any],
        seconds: float,
        ids: Mapping[str, str],
        revision: str | None = None,
    ) -> None:
        """The event of one decision (``revision``: the policy revision that made it, when it
        is not the one the log was opened with: a reload changed it)."""
        metrics = {"timer_rego_query_eval_ns": int(seconds * 1e9)}
        self._write(self._event(revision or self.revision, document, result, ids, metrics))

    def write_shadow(
        self,
        document: Mapping[str, Any],
        enforced: Mapping[str, Any],
        candidate: Mapping[str, Any],
        difference: str,
        ids: Mapping[str, str],
        revisions: tuple[str, str],
    ) -> None:
        """The event of a difference between the enforced decision (of revision
        ``revisions[0]``) and the shadow policy's (of ``revisions[1]``)."""
        event = self._event(revisions[0], document, enforced, ids)
        event["path"] = SHADOW_PATH
        event["shadow"] = {
            "result": dict(candidate),
            "revision": revisions[1],
            "difference": difference,
        }
        self._write(event)

    def _event(
        self,
        revision: str,
        document: Mapping[str, Any],
        result: Mapping[str, Any],
        ids: Mapping[str, str],
        metrics: dict[str, int] | None = None,
    ) -> dict[str, Any]:
        """An event of policy ``revision`` as both kinds have it, its ``input`` masked."""
        event: dict[str, Any] = {
            "decision_id": str(uuid.uuid4()),
            "path": DECISION_PATH,
            "input": copy.deepcopy(dict(document)),
            "result": dict(result),
            "timestamp": _rfc3339_ns(time.time_ns()),
            "labels": self.labels,
            "bundles": {"toolgate": {"revision": revision}},
            "revision": revision,
        }
        if metrics is not None:
            event["metrics"] = metrics
        event["toolgate"] = dict(ids)
        erased = [path for path in self.mask if _erase(event, path)]
        if erased:
            event["erased"] = ["/" + "/".join(path) for path in erased]
        return event

    def _write(self, event: dict[str, Any]) -> None:
        line = json.dumps(event, default=str)
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()

    def close(self) -> None:
        if self._owned is not None:
            self._owned.close()


def _pointer(path: str) -> tuple[str, ...]:
    """``/input/arguments/content`` (OPA's mask form; ``input/...`` too) as its parts."""
    parts = tuple(p for p in path.strip().strip("/").split("/") if p)
    if not parts or parts[0] != "input":
        raise ValueError(
            f"a decision-log mask names a field of the input: /input/..., not {path!r}"
        )
    return parts


def _erase(event: dict[str, Any], path: tuple[str, ...]) -> bool:
    node: Any = event
    for part in path[:-1]:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    if isinstance(node, dict) and path[-1] in node:
        del node[path[-1]]
        return True
    return False


def _rfc3339_ns(ns: int) -> str:
    seconds, rest = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{rest:09d}Z"
