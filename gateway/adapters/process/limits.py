"""A tool's declared limits: what the launcher is told to apply, and which one a run hit.

``confinement`` turns ``limits``, ``user``, ``group`` and ``network`` into the launcher's
``sandbox.Confinement`` (users looked up now; refused when this gateway cannot honour them).
``exceeded`` names the limit that ended a run, from what can be told reliably:

- ``cpu_seconds``: the root died of SIGXCPU (the soft limit), or of SIGKILL after the CPU
  time last seen reached the limit (the hard limit, one second later, for a program that
  ignores SIGXCPU);
- ``file_size``: the root died of SIGXFSZ;
- otherwise, for a failed run only, the error text the C library gives the errno each limit
  causes, in the last few KiB of stderr: ``File too large`` (EFBIG: a program that ignores
  SIGXFSZ, as Python does), ``Too many open files`` (EMFILE), ``Cannot allocate memory``
  (ENOMEM) or ``MemoryError`` for ``memory``, ``Resource temporarily unavailable`` (EAGAIN
  from ``fork``) for ``processes``. Only declared limits are named, and the error says how it
  was told (``detected_by``: ``signal``, ``cpu_time`` or ``stderr``).
"""

from __future__ import annotations

import grp
import os
import pwd
import signal
from dataclasses import dataclass

from gateway.adapters.process.sandbox import RLIMITS, Confinement
from gateway.adapters.process.spec import LimitOptions, ProcessOptions
from gateway.errors import ExecutionError

CODE = "confinement_unavailable"
"""The error code of a confinement this gateway cannot apply (nothing started)."""
_STDERR_SIGNS = (
    ("file_size", ("File too large",)),
    ("open_files", ("Too many open files",)),
    ("memory", ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")),
    ("processes", ("Resource temporarily unavailable",)),
)


@dataclass(frozen=True, slots=True)
class LimitHit:
    limit: str
    value: int
    detected_by: str
    """``signal``, ``cpu_time`` or ``stderr``."""

    def describe(self) -> str:
        return f"its {self.limit} limit ({_show(self.limit, self.value)})"


def _show(name: str, value: int) -> str:
    if name == "cpu_seconds":
        return f"{value} s"
    if name in ("memory", "file_size"):
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value % size == 0:
                return f"{value // size} {unit}"
        return f"{value} bytes"
    return str(value)


def confinement(options: ProcessOptions, ref: str) -> Confinement:
    """The launcher's instructions for ``options``; ExecutionError when this gateway cannot
    apply them (another user without root; a process count that would not bind root)."""
    limits = options.limits
    uid, gid = _ids(options, ref)
    root_child = (uid if uid is not None else os.geteuid()) == 0
    if limits.processes is not None and root_child:
        raise ExecutionError(
            f"{ref} declares limits.processes, which the kernel does not enforce for root: "
            "declare a user for it to run as, or run the gateway as another user",
            code=CODE,
        )
    rlimits = [
        (RLIMITS[name], value, value + 1 if name == "cpu_seconds" else value)
        for name, value in limits.rlimits().items()
    ]
    return Confinement(
        rlimits,
        no_new_privs=limits.no_new_privs,
        uid=uid,
        gid=gid,
        no_network=options.network == "none",
    )


def _ids(options: ProcessOptions, ref: str) -> tuple[int | None, int | None]:
    if options.user is None and options.group is None:
        return None, None
    if os.geteuid() != 0:
        raise ExecutionError(
            f"{ref} runs as user {options.user or '(same)'} / group {options.group or '(same)'},"
            " which needs a gateway running as root; this one is not",
            code=CODE,
        )
    try:
        uid = gid = None
        if options.user is not None:
            entry = _user(options.user)
            uid, gid = entry.pw_uid, entry.pw_gid
        if options.group is not None:
            group = options.group
            gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
    except KeyError as exc:
        raise ExecutionError(
            f"the user or group {ref} runs as no longer exists on this machine", code=CODE
        ) from exc
    return uid, gid


def _user(name: str) -> pwd.struct_passwd:
    if name.isdigit():
        try:
            return pwd.getpwuid(int(name))
        except KeyError:  # a uid without an entry: its group is the same number
            return pwd.struct_passwd((name, "x", int(name), int(name), "", "/", ""))
    return pwd.getpwnam(name)


def exceeded(
    limits: LimitOptions, returncode: int, cpu_seen: float, stderr_tail: str, failed: bool
) -> LimitHit | None:
    """The declared limit that ended the run, or None (see the module docstring)."""
    declared = limits.rlimits()
    cpu = declared.get("cpu_seconds")
    if cpu is not None and returncode == -signal.SIGXCPU:
        return LimitHit("cpu_seconds", cpu, "signal")
    if cpu is not None and returncode == -signal.SIGKILL and cpu_seen >= cpu:
        return LimitHit("cpu_seconds", cpu, "cpu_time")
    if "file_size" in declared and returncode == -signal.SIGXFSZ:
        return LimitHit("file_size", declared["file_size"], "signal")
    if not failed:
        return None
    for name, signs in _STDERR_SIGNS:
        if name in declared and any(sign in stderr_tail for sign in signs):
            return LimitHit(name, declared[name], "stderr")
    return None
