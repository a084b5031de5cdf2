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

The same launcher applies a tool's ``Confinement`` (without a view too, when isolation is
off): a network namespace of its own (``network: none``), a switch to another user and
group (a root gateway only), ``setrlimit`` limits and ``PR_SET_NO_NEW_PRIVS``, in that
order, last thing before ``exec``, so the limits bind the command and not the setup. It also
gives SIGPIPE and SIGXFSZ back their default action: the launcher's interpreter ignores
both, and an ignored signal stays ignored across ``exec``.

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
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
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


RLIMITS = {"cpu_seconds": "CPU", "memory": "AS", "file_size": "FSIZE"}
RLIMITS.update(open_files="NOFILE", processes="NPROC")
"""Declaration names → the ``RLIMIT_*`` each sets."""


class Confinement:
    """What the launcher applies besides the view: limits, privileges, user, network."""

    __slots__ = ("gid", "no_network", "no_new_privs", "rlimits", "uid")

    def __init__(
        self,
        rlimits: Iterable[tuple[str, int, int]] = (),
        *,
        no_new_privs: bool = False,
        uid: int | None = None,
        gid: int | None = None,
        no_network: bool = False,
    ) -> None:
        self.rlimits = tuple(rlimits)
        """(RLIMIT name without its prefix, soft, hard): ``("CPU", 2, 3)``."""
        self.no_new_privs = no_new_privs
        self.uid, self.gid = uid, gid
        self.no_network = no_network

    @property
    def empty(self) -> bool:
        """Nothing to apply: a command needs no launcher for this."""
        nothing = not self.rlimits and not self.no_new_privs and not self.no_network
        return nothing and self.uid is None and self.gid is None

    def args(self) -> list[str]:
        argv = [a for n, soft, hard in self.rlimits for a in ("--rlimit", f"{n}:{soft}:{hard}")]
        argv += ["--no-new-privs"] if self.no_new_privs else []
        argv += ["--no-network"] if self.no_network else []
        argv += ["--uid", str(self.uid)] if self.uid is not None else []
        argv += ["--gid", str(self.gid)] if self.gid is not None else []
        return argv


NOTHING = Confinement()


def launcher(
    python: str,
    status_fd: int,
    env: Mapping[str, str],
    view: View | None = None,
    confinement: Confinement = NOTHING,
) -> list[str]:
    """The argv prefix that runs a command in ``view`` (or the gateway's own, for None) with
    ``confinement`` (the command follows it)."""
    argv = [python, "-I", "-S", "-B", __file__, "--status", str(status_fd)]
    argv += view.args() if view is not None else []
    argv += confinement.args()
    # Python sets LC_CTYPE when it coerces a C locale (PEP 538): give the command the
    # value the gateway meant, or none.
    lc_ctype = env.get("LC_CTYPE")
    argv += ["--lc-ctype", lc_ctype] if lc_ctype is not None else ["--no-lc-ctype"]
    return [*argv, "--"]


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

    def launcher(
        self,
        python: str,
        status_fd: int,
        env: Mapping[str, str],
        confinement: Confinement = NOTHING,
    ) -> list[str]:
        """The argv prefix that runs a command in this view (the command follows it)."""
        return launcher(python, status_fd, env, self, confinement)

    def args(self) -> list[str]:
        argv = ["--cwd", self.cwd]
        argv += [a for d in self.hidden_dirs for a in ("--dir", d)]
        argv += [a for f in self.hidden_files for a in ("--file", f)]
        argv += [a for k in self.keep for a in ("--keep", k)]
        return argv


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


def _new_user_namespace(uid: int, gid: int, also: int = CLONE_NEWNS) -> None:
    """Enter a user namespace (and the namespaces ``also`` names) mapping only ``uid`` and
    ``gid``."""
    _check(_unshare(CLONE_NEWUSER | also), f"unshare({_flags(CLONE_NEWUSER | also)})")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")


def _flags(flags: int) -> str:
    names = {CLONE_NEWUSER: "CLONE_NEWUSER", CLONE_NEWNS: "CLONE_NEWNS"}
    names[CLONE_NEWNET] = "CLONE_NEWNET"
    return "|".join(name for bit, name in names.items() if flags & bit)


def _unshare_as_root(flags: int) -> None:
    _check(_unshare(flags), f"unshare({_flags(flags)})")


def enter(v: View, c: Confinement = NOTHING) -> None:
    """Make this process's filesystem view ``v`` (called in the child, before exec), in a
    network namespace of its own if ``c`` says so, as ``c``'s user if it names one."""
    uid, gid = os.geteuid(), os.getegid()
    net = CLONE_NEWNET if c.no_network else 0
    if uid != 0 and (c.uid is not None or c.gid is not None):
        raise IsolationError(1, "running as another user or group needs a root gateway")
    if uid == 0:
        _unshare_as_root(CLONE_NEWNS | net)
    else:
        _new_user_namespace(uid, gid, CLONE_NEWNS | net)
    _do_mount(None, "/", None, MS_REC | MS_PRIVATE, None)  # nothing leaks back to the host
    _hide(v)
    if uid == 0 and (c.uid is not None or c.gid is not None):
        _switch_user(c, dumpable=True)
    if os.geteuid() == 0:
        # Root keeps its capabilities across exec: lock the mounts (a user namespace of
        # its own makes them unmountable) and drop, from the bounding set the new
        # namespace starts with, what would read a mode-000 file.
        _new_user_namespace(0, os.getegid())
        for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
            _check(_prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), "prctl(PR_CAPBSET_DROP)")
    elif uid == 0:
        # Another user keeps no capability at all; its own user namespace still locks the
        # mounts and keeps other processes' /proc entries out of reach.
        _new_user_namespace(os.geteuid(), os.getegid(), 0)
    os.chdir(v.cwd)


def confine(c: Confinement) -> None:
    """Without a view: a network namespace and another user, as ``c`` says."""
    uid = os.geteuid()
    if c.no_network:
        if uid == 0:
            _unshare_as_root(CLONE_NEWNET)
        else:
            _new_user_namespace(uid, os.getegid(), CLONE_NEWNET)
    if c.uid is not None or c.gid is not None:
        _switch_user(c, dumpable=False)


def _switch_user(c: Confinement, dumpable: bool) -> None:
    if os.geteuid() != 0:
        raise IsolationError(1, "running as another user or group needs a root gateway")
    gid = c.gid if c.gid is not None else os.getegid()
    os.setgroups([gid])  # none of the gateway's supplementary groups
    os.setgid(gid)
    if c.uid is not None:
        os.setuid(c.uid)
    if dumpable:  # a changed uid makes /proc/self root's: the uid_map could not be written
        _check(_prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")


def limit(c: Confinement) -> None:
    """The rlimits (never above the hard limit in force) and no_new_privs: the last steps."""
    import resource  # imported already by main(), before another user could not read it

    for name, soft, hard in c.rlimits:
        which = getattr(resource, "RLIMIT_" + name)
        _, ceiling = resource.getrlimit(which)
        if ceiling != resource.RLIM_INFINITY:
            hard = min(hard, ceiling)
        try:
            resource.setrlimit(which, (min(soft, hard), hard))
        except (ValueError, OSError) as exc:
            raise IsolationError(0, f"setrlimit(RLIMIT_{name}): {exc}") from exc
    if c.no_new_privs:
        _check(_prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


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


def probe(python: str, hidden_dir: str | None, confinement: Confinement = NOTHING) -> str | None:
    """None when this kernel lets a child enter a view hiding ``hidden_dir`` (no view for
    None) with ``confinement``; else why not."""
    if not AVAILABLE:
        return "namespaces need Linux"
    import subprocess  # the launcher itself never needs it

    v = view([hidden_dir], [], [], "/") if hidden_dir is not None else None
    read, write = os.pipe()
    try:
        argv = [*launcher(python, write, {}, v, confinement), "/bin/sh", "-c", ":"]
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


_SWITCHES = ("--no-lc-ctype", "--no-new-privs", "--no-network")


def _parse(args: list[str]) -> tuple[View | None, Confinement, int, str | None, list[str]]:
    """``--status FD [--cwd C [--dir D]... [--file F]... [--keep K]...] [--rlimit N:S:H]...
    [--no-new-privs] [--no-network] [--uid U] [--gid G] --lc-ctype V|--no-lc-ctype -- argv...``
    (built by ``launcher``); without ``--cwd`` there is no view."""
    lists: dict[str, list[str]] = {"--dir": [], "--file": [], "--keep": [], "--rlimit": []}
    single: dict[str, str] = {}
    switches: set[str] = set()
    lc_ctype: str | None = None
    i = 0
    while args[i] != "--":
        flag = args[i]
        if flag in _SWITCHES:
            switches.add(flag)
            i += 1
            continue
        if flag in lists:
            lists[flag].append(args[i + 1])
        elif flag == "--lc-ctype":
            lc_ctype = args[i + 1]
        else:
            single[flag] = args[i + 1]
        i += 2
    v = None
    if "--cwd" in single:
        dirs, files, keep = (tuple(lists[k]) for k in ("--dir", "--file", "--keep"))
        v = View(dirs, files, keep, single["--cwd"])
    rlimits = []
    for spec in lists["--rlimit"]:
        name, soft, hard = spec.split(":")
        rlimits.append((name, int(soft), int(hard)))
    uid, gid = single.get("--uid"), single.get("--gid")
    c = Confinement(
        rlimits,
        no_new_privs="--no-new-privs" in switches,
        uid=int(uid) if uid is not None else None,
        gid=int(gid) if gid is not None else None,
        no_network="--no-network" in switches,
    )
    return v, c, int(single["--status"]), lc_ctype, args[i + 1 :]


def main(args: list[str]) -> None:
    """Enter the view and apply the confinement, then exec the command in place; report a
    failure on the status fd."""
    import resource  # noqa: F401  (for limit(): read now, while the files can be read)
    import signal

    v, c, status, lc_ctype, argv = _parse(args)
    os.set_inheritable(status, False)  # closed by a successful exec: that is the report
    env = dict(os.environ)
    env.pop("LC_CTYPE", None)
    if lc_ctype is not None:
        env["LC_CTYPE"] = lc_ctype
    try:
        if v is not None:
            enter(v, c)
        else:
            confine(c)
        limit(c)
    except Exception as exc:
        _fail(status, "isolation", str(exc) or type(exc).__name__)
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
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
