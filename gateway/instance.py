"""Who this gateway process is, so recovery can tell a crashed owner from a live one."""

from __future__ import annotations

import os
import socket

import psutil

HOST = socket.gethostname()


def _identity(pid: int) -> str:
    started = int(psutil.Process(pid).create_time() * 1000)
    return f"{HOST}:{pid}:{started}"


INSTANCE_ID = _identity(os.getpid())
"""``host:pid:start_ms`` of this process (pids are reused; the start time is not)."""


def owner_is_gone(owner: str | None) -> bool | None:
    """True when ``owner`` ran on this host and that process no longer exists; None when
    this host cannot tell (another host, or no owner recorded)."""
    if not owner:
        return None
    host, _, rest = owner.partition(":")
    if host != HOST:
        return None
    pid_text, _, _started = rest.partition(":")
    try:
        return _identity(int(pid_text)) != owner
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return True
