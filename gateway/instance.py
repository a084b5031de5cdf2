"""Who this gateway process is, so recovery can tell a crashed owner from a live one.

``INSTANCE_ID`` (``host:pid:start_ms``) names the process: executions it runs carry it as
their owner. ``NODE`` names where its pids mean something: the kernel's boot id and the pid
namespace (two containers on one machine, each with its own pid 1, are two nodes). Recovery
checks or signals a dead replica's pids only when that replica ran on this node.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import psutil

HOST = socket.gethostname()
NODE_ENV = "TOOLGATE_NODE_ID"
"""Overrides the node (a value unique per machine and pid namespace); see configuration.md."""


def _identity(pid: int) -> str:
    started = int(psutil.Process(pid).create_time() * 1000)
    return f"{HOST}:{pid}:{started}"


def _node() -> str:
    """The boot id and the pid namespace of this process (the host name where the kernel
    does not say)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return HOST


PID = os.getpid()
INSTANCE_ID = _identity(PID)
"""``host:pid:start_ms`` of this process (pids are reused; the start time is not)."""
STARTED_MS = int(INSTANCE_ID.rpartition(":")[2])
NODE = os.environ.get(NODE_ENV) or _node()


def process_is_gone(owner: str) -> bool:
    """True when the process ``owner`` names (``host:pid:start_ms``, on this node) no longer
    exists: its pid is free or belongs to a process started at another time."""
    pid_text = owner.split(":")[-2] if owner.count(":") >= 2 else ""
    try:
        return _identity(int(pid_text)).partition(":")[2] != owner.partition(":")[2]
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return True


def owner_is_gone(owner: str | None) -> bool | None:
    """True when ``owner`` ran on this host and that process no longer exists; None when
    this host cannot tell (another host, or no owner recorded). The rule for an owner with
    no replica row (see ``gateway.runtime.recovery``)."""
    if not owner:
        return None
    host, _, _rest = owner.partition(":")
    if host != HOST:
        return None
    return process_is_gone(owner)
