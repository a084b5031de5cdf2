"""Helpers shared by the policy tests: a realistic policy input and its variations, and the
``toolgate`` command run on this tree."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

BASE_INPUT: dict[str, Any] = {
    "tool": {
        "name": "fs.write_file",
        "version": "1.2.0",
        "risk": "medium",
        "side_effect": "write",
        "reversible": False,
        "adapter": "file",
        "tags": ["fs"],
    },
    "arguments": {"path": "notes/a.txt", "content": "hi"},
    "arguments_sha256": "9b1e1b2a",
    "paths": [{"argument": "path", "relative": "notes/a.txt", "inside_workspace": True}],
    "actor": {"user_id": "alice", "agent_id": "coder", "roles": ["agent"]},
    "workspace": {"id": "demo", "root": "/srv/toolgate/var/workspaces/demo"},
    "request": {
        "run_id": "r1",
        "turn_id": "t1",
        "call_id": "c1",
        "deadline_ms_left": 9000,
        "idempotency_key_present": True,
        "time_ms": 1764579600000,
    },
    "approval": {"present": False, "approved_by": None},
    "usage": {},
}


def make_input(**sections: dict[str, Any] | list[Any]) -> dict[str, Any]:
    """BASE_INPUT with the given top-level sections updated (dicts merge one level deep)."""
    doc = copy.deepcopy(BASE_INPUT)
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            doc[key].update(value)
        else:
            doc[key] = value
    return doc


WritePolicy = Callable[..., tuple[Path, Path]]


def toolgate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``toolgate *args`` in ``cwd`` with this tree's gateway and no ``TOOLGATE_CONFIG``."""
    env = {**os.environ, "RUST_LIB_BACKTRACE": "0", "PYTHONPATH": str(REPO)}
    env.pop("TOOLGATE_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
