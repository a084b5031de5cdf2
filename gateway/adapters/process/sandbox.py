"""A private filesystem view for process-adapter children: the gateway's secrets hidden,
everything but the call's workspace read-only.

A child the process adapter starts runs as the gateway's OS user, so without this it could
read ``var/approval.key``, the database and ``toolgate.yaml`` (the key hashes), and write
anywhere that user may. The adapter starts the gateway's interpreter on this file
(``python -I -S sandbox.py ... -- argv``): a fresh single-threaded process, which enters a
mount namespace of its own and then execs the command in place (same pid, same start time:
the tree's identity holds). In that namespace, in this order,

- ``/tmp`` and ``/dev/shm`` are fresh, empty tmpfs of the child's own (nothing shared with
  the host's or another call's);
- every hidden directory (the gateway's ``var_dir``) is covered by an empty tmpfs;
- every hidden file (the configuration file, a SQLite database outside ``var_dir``) is
  covered by an empty file of mode 000: reading it fails with EACCES (a hidden path that
  lies under a private tmpfs is made again there, so it looks the same wherever it lives);
- the call's workspace is bound at its own path (also when it lies under a cover);
- every ``readonly`` path (the workspace's protected paths, found by the adapter) is bound
  onto itself, and every ``writable`` path (a declaration's extra directories, the declared
  test report) at its own path;
- every mount is made read-only (``mount_setattr``, recursively from ``/``), and then made
  writable again, one mount each (its sub-mounts stay read-only): ``/proc`` (the launcher
  itself writes its uid maps there), the private tmpfs, the workspace and the writable paths;
- the working directory is entered again through the new mounts (the inherited one would
  lead back under them with ``..``).

The child cannot undo the mounts: a non-root gateway enters a user namespace that maps only
its own uid, so the child (not uid 0 there) keeps no capability after ``exec``; a root
gateway makes the mounts first and then enters a user namespace, which locks them (``umount``
and clearing read-only fail) and drops the capabilities that would read a mode-000 file.
Either way the child ends in a user namespace of its own: a process outside it (the gateway,
another call's child, a browser) cannot be opened through ``/proc/<pid>/root``, ``fd/`` or
``environ`` (that needs CAP_SYS_PTRACE over the target's namespace).

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
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
CAP_DAC_OVERRIDE = 1
CAP_DAC_READ_SEARCH = 2
TMPFS_OPTIONS = b"size=64k,nr_inodes=1024,mode=0755"
PRIVATE_OPTIONS = b"mode=1777"
PRIVATE_DIRS = ("/tmp", "/dev/shm")
"""Shared scratch directories: each child gets empty ones of its own (a writable tmpfs)."""
DECOY = ".toolgate-hidden"
"""The empty mode-000 file, in the first cover's tmpfs, bound over hidden files."""
_TMPFS_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (Linux 5.12)
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 1

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
    _syscall = _libc.syscall
    _syscall.restype = ctypes.c_long
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
    """What one child must not see, and where it may write. All paths absolute and real."""

    __slots__ = ("cwd", "hidden_dirs", "hidden_files", "readonly", "workspace", "writable")

    def __init__(
        self,
        hidden_dirs: tuple[str, ...],
        hidden_files: tuple[str, ...],
        workspace: str | None,
        cwd: str,
        readonly: tuple[str, ...] = (),
        writable: tuple[str, ...] = (),
    ) -> None:
        self.hidden_dirs = hidden_dirs
        self.hidden_files = hidden_files
        self.workspace = workspace
        """Visible and writable at its own path (None: nothing is writable but /tmp)."""
        self.cwd = cwd
        self.readonly = readonly
        """Paths in the workspace that stay read-only (its protected paths)."""
        self.writable = writable
        """More paths (directories or files) writable at their own path, bound last."""

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
        argv += ["--workspace", self.workspace] if self.workspace is not None else []
        argv += [a for d in self.hidden_dirs for a in ("--dir", d)]
        argv += [a for f in self.hidden_files for a in ("--file", f)]
        argv += [a for r in self.readonly for a in ("--readonly", r)]
        argv += [a for w in self.writable for a in ("--writable", w)]
        return argv


def view(
    hidden_dirs: Iterable[str],
    hidden_files: Iterable[str],
    workspace: str | None,
    cwd: str,
    readonly: Iterable[str] = (),
    writable: Iterable[str] = (),
) -> View:
    """A ``View`` with paths made real, nested hidden directories folded into their parent
    and missing ones dropped (what does not exist has nothing to hide)."""
    dirs: list[str] = []
    for path in sorted({os.path.realpath(p) for p in hidden_dirs if os.path.isdir(p)}):
        if not any(inside(path, d) for d in dirs):
            dirs.append(path)
    files = sorted({os.path.realpath(p) for p in hidden_files if os.path.isfile(p)})
    root = os.path.realpath(workspace) if workspace is not None else None
    return View(
        tuple(dirs),
        tuple(files),
        root,
        os.path.realpath(cwd),
        tuple(sorted({os.path.realpath(p) for p in readonly})),
        tuple(sorted({os.path.realpath(p) for p in writable})),
    )


def inside(path: str, parent: str) -> bool:
    """Whether ``path`` is ``parent`` or lies under it (both absolute and real)."""
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _check(result: int, step: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise IsolationError(errno, f"{step}: {os.strerror(errno)}")


def _do_mount(
    source: bytes | None, target: str, fstype: bytes | None, flags: int, data: bytes | None
) -> None:
    _check(_mount(source, os.fsencode(target), fstype, flags, data), f"mount {target}")


class _MountAttr(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("set", "clr", "propagation", "userns")]


def _readonly(path: str, readonly: bool, recursive: bool = False) -> None:
    """Set (or clear) read-only on the mount at ``path`` (and every mount below it)."""
    flags = AT_RECURSIVE if recursive else 0
    attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0) if readonly else _MountAttr(0, MOUNT_ATTR_RDONLY)
    result = _syscall(
        ctypes.c_long(SYS_MOUNT_SETATTR),
        ctypes.c_int(AT_FDCWD),
        ctypes.c_char_p(os.fsencode(path)),
        ctypes.c_uint(flags),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    step = "read-only" if readonly else "writable"
    _check(0 if result == 0 else -1, f"mount_setattr({path}, {step})")


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


def enter(v: View, c: Confinement = NOTHING, keep: Iterable[str] = ()) -> None:
    """Make this process's filesystem view ``v`` (called in the child, before exec), in a
    network namespace of its own if ``c`` says so, as ``c``'s user if it names one; the
    directories ``keep`` (what the command runs on) stay visible, read-only, also where a
    private tmpfs would hide them."""
    uid, gid = os.geteuid(), os.getegid()
    net = CLONE_NEWNET if c.no_network else 0
    if uid != 0 and (c.uid is not None or c.gid is not None):
        raise IsolationError(1, "running as another user or group needs a root gateway")
    if uid == 0:
        _unshare_as_root(CLONE_NEWNS | net)
    else:
        _new_user_namespace(uid, gid, CLONE_NEWNS | net)
    _do_mount(None, "/", None, MS_REC | MS_PRIVATE, None)  # nothing leaks back to the host
    _hide(v, keep)
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


def _hide(v: View, keep: Iterable[str] = ()) -> None:
    binds = [v.workspace] if v.workspace is not None else []
    binds += [w for w in v.writable if w not in binds]
    private = [
        p
        for p in dict.fromkeys(os.path.realpath(d) for d in PRIVATE_DIRS)
        if os.path.isdir(p) and not any(inside(p, d) for d in v.hidden_dirs)
    ]
    # What the command runs on (the interpreter's prefix, the program's directory) but a
    # private tmpfs would hide: bound back read-only, before the covers go on top of it.
    kept = [
        k
        for k in dict.fromkeys(os.path.realpath(p) for p in keep)
        if os.path.isdir(k) and any(inside(k, p) and k != p for p in private)
    ]
    # Opened before anything covers them: a path under a cover is bound back from here.
    sources = {p: os.open(p, os.O_PATH | os.O_CLOEXEC) for p in dict.fromkeys(binds + kept)}
    try:
        for path in private:
            _do_mount(b"tmpfs", path, b"tmpfs", MS_NOSUID | MS_NODEV, PRIVATE_OPTIONS)
        for path in kept:
            _bind(sources[path], path, private)
        decoy = None
        for directory in v.hidden_dirs:
            if not _mount_point(directory, private, directory=True):
                continue
            _do_mount(b"tmpfs", directory, b"tmpfs", _TMPFS_FLAGS, TMPFS_OPTIONS)
            if decoy is None:
                decoy = os.path.join(directory, DECOY)
        if decoy is None and private:
            decoy = os.path.join(private[0], DECOY)
        if decoy is not None:
            os.close(os.open(decoy, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0))
        for path in v.hidden_files:
            if any(inside(path, d) for d in v.hidden_dirs):
                continue  # under an empty cover already
            if not _mount_point(path, private, directory=False):
                continue
            if decoy is None:
                raise IsolationError(0, f"no cover to hold the decoy for {path}")
            _do_mount(os.fsencode(decoy), path, None, MS_BIND, None)
        covers = [*private, *v.hidden_dirs]
        if v.workspace is not None:
            _bind(sources[v.workspace], v.workspace, covers)
        for path in v.readonly:
            _bind_onto_itself(path)
        for path in v.writable:
            if path != v.workspace:
                _bind(sources[path], path, covers)
        _readonly("/", True, recursive=True)
        for path in ["/proc", *private, *binds]:
            if path != "/proc" or os.path.isdir(path):
                _readonly(path, False)
    finally:
        for fd in sources.values():
            os.close(fd)


def _mount_point(path: str, covers: list[str], directory: bool) -> bool:
    """Whether ``path`` is there to mount on, made inside a cover (a tmpfs of this
    namespace) if it lies under one; never elsewhere: that would create it on the host."""
    if os.path.lexists(path):
        return True
    if not any(inside(path, c) for c in covers):
        return False
    if directory:
        os.makedirs(path, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0))
    return True


def _bind(source: int, target: str, covers: list[str]) -> None:
    """Bind the path open as ``source`` at ``target``, its mount point made in a cover if
    it lies under one."""
    magic = f"/proc/self/fd/{source}"
    if not _mount_point(target, covers, directory=os.path.isdir(magic)):
        raise IsolationError(2, f"{target} is gone")
    _do_mount(magic.encode(), target, None, MS_BIND | MS_REC, None)


def _bind_onto_itself(path: str) -> None:
    """A mount of its own for ``path`` (not a symlink), to stay read-only; gone: nothing."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if os.fstat(fd).st_mode & 0o170000 == 0o120000:
            return  # a symlink now: it leads elsewhere, which the view already decides
        magic = f"/proc/self/fd/{fd}"
        _do_mount(magic.encode(), magic, None, MS_BIND | MS_REC, None)
    finally:
        os.close(fd)


def probe(python: str, hidden_dir: str | None, confinement: Confinement = NOTHING) -> str | None:
    """None when this kernel lets a child enter a view hiding ``hidden_dir`` (no view for
    None) with ``confinement``; else why not."""
    if not AVAILABLE:
        return "namespaces need Linux"
    import subprocess  # the launcher itself never needs it

    v = view([hidden_dir], [], None, "/") if hidden_dir is not None else None
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
    """``--status FD [--cwd C [--workspace W] [--dir D]... [--file F]... [--readonly R]...
    [--writable P]...] [--rlimit N:S:H]...
    [--no-new-privs] [--no-network] [--uid U] [--gid G] --lc-ctype V|--no-lc-ctype -- argv...``
    (built by ``launcher``); without ``--cwd`` there is no view."""
    lists: dict[str, list[str]] = {
        flag: [] for flag in ("--dir", "--file", "--readonly", "--writable", "--rlimit")
    }
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
        dirs, files, readonly, writable = (
            tuple(lists[k]) for k in ("--dir", "--file", "--readonly", "--writable")
        )
        workspace = single.get("--workspace")
        v = View(dirs, files, workspace, single["--cwd"], readonly, writable)
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
            enter(v, c, _runs_on(argv[0]))
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


def _runs_on(program: str) -> tuple[str, ...]:
    """What a command runs on and must still see where a private tmpfs would hide it: this
    interpreter's prefixes, and the program's prefix (``<prefix>/bin/<program>``: a virtual
    environment's ``pyvenv.cfg`` and packages) or its directory."""
    where = os.path.dirname(program)
    prefix = os.path.dirname(where) if os.path.basename(where) == "bin" else where
    return (sys.prefix, sys.base_prefix, sys.exec_prefix, prefix)


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
