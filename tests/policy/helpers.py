"""Helpers shared by the policy tests: a realistic policy input and its variations, and the
``toolgate`` command run on this tree."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gateway.testing import SAMPLE_POLICY_INPUT as BASE_INPUT

REPO = Path(__file__).resolve().parents[2]


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


def toolgate(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``toolgate *args`` in ``cwd`` with this tree's gateway, no ``TOOLGATE_*`` variable of
    this process and ``env`` (a serve that does not stop within 120 s fails here)."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}
    env = {**inherited, "RUST_LIB_BACKTRACE": "0", "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
