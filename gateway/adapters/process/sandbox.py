"""A private filesystem view for process-adapter children: the gateway's secrets hidden.

A child the process adapter starts runs as the gateway's OS user, so without this it could
read ``var/approval.key``, the database and ``toolgate.yaml`` (the key hashes). The adapter
starts the gateway's interpreter on this file (``python -I -S sandbox.py ... -- argv``): a
fresh single-threaded process, which enters a mount namespace of its own and then execs the
command in place (same pid, same start time: the tree's identity holds). In that namespace

- every hidden directory (the gateway's ``var_dir``) is covered by an empty, read-only tmpfs;
- the call's workspace, when it lies inside a hidden directory (the default
  ``var/workspaces/<id>``), is bound back at its own path, writable;
- every hidden file (the configuration file, a SQLite database outside ``var_dir``) is
  covered by an empty file of mode 000 on a read-only mount: reading it fails with EACCES;
- the working directory is entered again through the new mounts (the inherited one would
  lead back under them with ``..``).

The child cannot undo the mounts: a non-root gateway enters a user namespace that maps only
its own uid, so the child (not uid 0 there) keeps no capability after ``exec``; a root
gateway makes the mounts first and then enters a user namespace, which locks them (``umount``
fails) and drops the capabilities that would read a mode-000 file. Either way the child ends
in a user namespace of its own: a process outside it (the gateway, another call's child, a
browser) cannot be opened through ``/proc/<pid>/root``, ``fd/`` or ``environ`` (that needs
CAP_SYS_PTRACE over the target's namespace).

Whether the launcher reached ``exec`` is reported on a status pipe (``--status FD``, closed
on exec; a failure writes its reason there), as ``subprocess`` does for its own children.
This file imports only the standard library, and little of it: it runs once per call.
"""

from __future__ import annotations

import ctypes
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing and collections.abc cost a launch milliseconds
    from collections.abc import Iterable, Mapping

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE = 1
CAP_DAC_READ_SEARCH = 2
TMPFS_OPTIONS = b"size=64k,nr_inodes=1024,mode=0755"
DECOY = ".toolgate-hidden"
"""The empty mode-000 file, in the first hidden directory's tmpfs, bound over hidden files."""
_TMPFS_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC

_libc = ctypes.CDLL(None, use_errno=True)
_CHAR = ctypes.c_char_p
_ULONG = ctypes.c_ulong
try:
    _mount = _libc.mount
    _mount.argtypes = (_CHAR, _CHAR, _CHAR, _ULONG, _CHAR)
    _unshare = _libc.unshare
    _unshare.argtypes = (ctypes.c_int,)
    _prctl = _libc.prctl
    _prctl.argtypes = (ctypes.c_int, _ULONG, _ULONG, _ULONG, _ULONG)
    AVAILABLE = True
except AttributeError:  # not Linux: probe() says so
    AVAILABLE = False


class IsolationError(OSError):
    """The kernel refused a step of the isolation (its errno and the step in the message)."""


class View:
    """What one child must not see, and what it must keep. All paths absolute and real."""

    __slots__ = ("cwd", "hidden_dirs", "hidden_files", "keep")

    def __init__(
        self,
        hidden_dirs: tuple[str, ...],
        hidden_files: tuple[str, ...],
        keep: tuple[str, ...],
        cwd: str,
    ) -> None:
        self.hidden_dirs = hidden_dirs
        self.hidden_files = hidden_files
        self.keep = keep
        """Directories that stay visible and writable at their own path (the workspace)."""
        self.cwd = cwd

    def launcher(self, python: str, status_fd: int, env: Mapping[str, str]) -> list[str]:
        """The argv prefix that runs a command in this view (the command follows it)."""
        argv = [python, "-I", "-S", "-B", __file__, "--status", str(status_fd), "--cwd", self.cwd]
        argv += [a for d in self.hidden_dirs for a in ("--dir", d)]
        argv += [a for f in self.hidden_files for a in ("--file", f)]
        argv += [a for k in self.keep for a in ("--keep", k)]
        # Python sets LC_CTYPE when it coerces a C locale (PEP 538): give the command the
        # value the gateway meant, or none.
        lc_ctype = env.get("LC_CTYPE")
        argv += ["--lc-ctype", lc_ctype] if lc_ctype is not None else ["--no-lc-ctype"]
        return [*argv, "--"]


def view(
    hidden_dirs: Iterable[str], hidden_files: Iterable[str], keep: Iterable[str], cwd: str
) -> View:
    """A ``View`` with paths made real, nested hidden directories folded into their parent
    and missing ones dropped (what does not exist has nothing to hide)."""
    dirs: list[str] = []
    for path in sorted({os.path.realpath(p) for p in hidden_dirs if os.path.isdir(p)}):
        if not any(_inside(path, d) for d in dirs):
            dirs.append(path)
    files = sorted({os.path.realpath(p) for p in hidden_files if os.path.isfile(p)})
    kept = tuple(sorted({os.path.realpath(p) for p in keep}))
    return View(tuple(dirs), tuple(files), kept, os.path.realpath(cwd))


def _inside(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _check(result: int, step: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise IsolationError(errno, f"{step}: {os.strerror(errno)}")


def _do_mount(
    source: bytes | None, target: str, fstype: bytes | None, flags: int, data: bytes | None
) -> None:
    _check(_mount(source, os.fsencode(target), fstype, flags, data), f"mount {target}")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _new_user_namespace(uid: int, gid: int) -> None:
    """Enter a user namespace (and a mount namespace) mapping only ``uid`` and ``gid``."""
    _check(_unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare(CLONE_NEWUSER|CLONE_NEWNS)")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")


def enter(v: View) -> None:
    """Make this process's filesystem view ``v`` (called in the child, before exec)."""
    uid, gid = os.geteuid(), os.getegid()
    if uid == 0:
        _check(_unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    else:
        _new_user_namespace(uid, gid)
    _do_mount(None, "/", None, MS_REC | MS_PRIVATE, None)  # nothing leaks back to the host
    _hide(v)
    if uid == 0:
        # Root keeps its capabilities across exec: lock the mounts (a user namespace of
        # its own makes them unmountable) and drop, from the bounding set the new
        # namespace starts with, what would read a mode-000 file.
        _new_user_namespace(uid, gid)
        for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
            _check(_prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), "prctl(PR_CAPBSET_DROP)")
    os.chdir(v.cwd)


def _hide(v: View) -> None:
    kept = {k: os.open(k, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) for k in v.keep}
    try:
        decoy = None
        for directory in v.hidden_dirs:
            _do_mount(b"tmpfs", directory, b"tmpfs", _TMPFS_FLAGS, TMPFS_OPTIONS)
            if decoy is None:
                decoy = os.path.join(directory, DECOY)
                os.close(os.open(decoy, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0))
            for keep, fd in kept.items():
                if _inside(keep, directory) and keep != directory:
                    os.makedirs(keep, mode=0o755, exist_ok=True)
                    source = f"/proc/self/fd/{fd}".encode()
                    _do_mount(source, keep, None, MS_BIND | MS_REC, None)
        for path in v.hidden_files:
            if decoy is None:
                raise IsolationError(0, f"no hidden directory to hold the decoy for {path}")
            if os.path.exists(path):  # not under a hidden directory already
                _do_mount(os.fsencode(decoy), path, None, MS_BIND, None)
                _do_mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY, None)
        for directory in v.hidden_dirs:
            flags = MS_REMOUNT | MS_RDONLY | _TMPFS_FLAGS
            _do_mount(None, directory, None, flags, TMPFS_OPTIONS)
    finally:
        for fd in kept.values():
            os.close(fd)


def probe(python: str, hidden_dir: str) -> str | None:
    """None when this kernel lets a child enter a view hiding ``hidden_dir``; else why not."""
    if not AVAILABLE:
        return "mount namespaces need Linux"
    import subprocess  # the launcher itself never needs it

    v = view([hidden_dir], [], [], "/")
    read, write = os.pipe()
    try:
        argv = [*v.launcher(python, write, {}), "/bin/sh", "-c", ":"]
        done = subprocess.run(argv, pass_fds=(write,), env={}, capture_output=True, check=False)
    except OSError as exc:
        return f"cannot start {python}: {exc}"
    finally:
        os.close(write)
    with os.fdopen(read, "rb") as status:
        failed = failure(status.read())
    if failed is not None:
        return failed[1]
    return None if done.returncode == 0 else f"a test child exited with {done.returncode}"


def _parse(args: list[str]) -> tuple[View, int, str | None, list[str]]:
    """``--status FD --cwd C [--dir D]... [--file F]... [--keep K]... --lc-ctype V|--no-lc-ctype
    -- argv...`` (built by ``View.launcher``)."""
    lists: dict[str, list[str]] = {"--dir": [], "--file": [], "--keep": []}
    single: dict[str, str] = {}
    lc_ctype: str | None = None
    i = 0
    while args[i] != "--":
        flag = args[i]
        if flag == "--no-lc-ctype":
            i += 1
            continue
        if flag in lists:
            lists[flag].append(args[i + 1])
        elif flag == "--lc-ctype":
            lc_ctype = args[i + 1]
        else:
            single[flag] = args[i + 1]
        i += 2
    v = View(tuple(lists["--dir"]), tuple(lists["--file"]), tuple(lists["--keep"]), single["--cwd"])
    return v, int(single["--status"]), lc_ctype, args[i + 1 :]


def main(args: list[str]) -> None:
    """Enter the view, then exec the command in place; report a failure on the status fd."""
    v, status, lc_ctype, argv = _parse(args)
    os.set_inheritable(status, False)  # closed by a successful exec: that is the report
    env = dict(os.environ)
    env.pop("LC_CTYPE", None)
    if lc_ctype is not None:
        env["LC_CTYPE"] = lc_ctype
    try:
        enter(v)
    except OSError as exc:
        _fail(status, "isolation", str(exc))
    try:
        os.execve(argv[0], argv, env)
    except OSError as exc:
        _fail(status, "exec", exc.strerror or type(exc).__name__)


def _fail(status: int, stage: str, reason: str) -> None:
    os.write(status, f"{stage}\t{reason}".encode("utf-8", "replace"))
    os._exit(127)


def failure(report: bytes) -> tuple[str, str] | None:
    """The (stage, reason) a launcher wrote on its status fd; None for an empty report
    (the command was exec'd). stage is ``isolation`` or ``exec``."""
    if not report:
        return None
    stage, _, reason = report.decode("utf-8", "replace").partition("\t")
    return stage, reason


if __name__ == "__main__":
    main(sys.argv[1:])
