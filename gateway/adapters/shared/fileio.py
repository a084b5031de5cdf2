"""File I/O any adapter may use: bounded, interruptible reads and hashing (the file adapter,
the file probes, the process adapter's outputs) and atomic writes (browser artifacts too).

Three rules, each the answer to a way a workspace file could stall or exhaust the gateway:

* **Regular files only.** A FIFO blocks ``open`` until a writer comes; a device such as
  ``/dev/zero`` never ends; a socket cannot be opened at all. The path is ``lstat``-ed and
  refused before it is opened, then opened with ``O_NONBLOCK | O_NOFOLLOW`` and the *opened
  descriptor* checked with ``fstat``, so a FIFO swapped in between the two is refused too,
  never blocked on.
* **Bounded memory.** Content is read only up to what the caller keeps (the output budget,
  or ``MAX_WHOLE_FILE`` for a patch); the rest of a file is hashed in ``CHUNK`` pieces
  through one reused buffer.
* **Interruptible.** Between chunks a ``Watch`` looks at the call's cancel signal, its
  deadline and the cancel scope of the task waiting on the worker thread.

``os_error`` is the one place OS errors become stable codes (``raise ... from exc``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.from_thread

from gateway.errors import CallError, ExecutionError, ValidationError
from gateway.fsync import fsync

CHUNK = 1 << 20
"""Bytes read (and hashed) between two looks at the watch."""
MAX_WHOLE_FILE = 16 << 20
"""The largest file read whole into memory: the file a patch applies to, a preview's diff."""
_OPEN_FLAGS = os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


class Stopped(Exception):
    """The call's cancel signal was seen before its side effect: nothing was changed."""


class DeadlinePassed(Exception):
    """The call's deadline passed. Not ``TimeoutError``: that is an ``OSError``, which the
    handlers around file operations would take for a failed read."""


@dataclass(frozen=True, slots=True)
class Watch:
    """What a worker thread looks at between chunks: the call's cancel signal (``Stopped``),
    its deadline (``DeadlinePassed``) and the waiting task's cancel scope (the deadline scope,
    the cut-off after a cancel's grace: anyio's cancellation exception)."""

    deadline: float | None = None
    cancelled: anyio.Event | None = None

    def check(self) -> None:
        if self.cancelled is not None and self.cancelled.is_set():
            raise Stopped
        if self.deadline is not None and time.time() >= self.deadline:
            raise DeadlinePassed
        with contextlib.suppress(anyio.NoEventLoopError):  # not on an anyio worker thread
            anyio.from_thread.check_cancelled()

    def after_commit(self) -> Watch:
        """The watch for work after the side effect: a cancel no longer stops it."""
        return Watch(self.deadline)


UNWATCHED = Watch()


@dataclass(frozen=True, slots=True)
class _Kind:
    code: str
    reason: str
    retryable: bool = False


_BUSY = _Kind(code="file_busy", reason="busy, try again", retryable=True)
_NO_SPACE = _Kind(code="no_space", reason="no space left on the device", retryable=True)
_DENIED = _Kind(code="permission_denied", reason="permission denied")
_FILES = _Kind(code="too_many_open_files", reason="too many open files", retryable=True)
_OS_ERRORS: dict[int, _Kind] = {
    errno.ENOENT: _Kind(code="file_not_found", reason="no such file or directory"),
    errno.ENOTDIR: _Kind(code="not_a_directory", reason="a part of the path is not a directory"),
    errno.EISDIR: _Kind(code="not_a_file", reason="it is a directory"),
    errno.ELOOP: _Kind(
        code="symlink_loop", reason="too many levels of symbolic links (a symlink loop)"
    ),
    errno.ENAMETOOLONG: _Kind(code="name_too_long", reason="a file name in the path is too long"),
    errno.EACCES: _DENIED,
    errno.EPERM: _DENIED,
    errno.EROFS: _Kind(code="read_only_filesystem", reason="the file system is read-only"),
    errno.ENOSPC: _NO_SPACE,
    errno.EDQUOT: _NO_SPACE,
    errno.EFBIG: _Kind(code="file_too_large", reason="the file would be too large"),
    errno.EEXIST: _Kind(code="file_exists", reason="a file is in the way"),
    errno.ENOTEMPTY: _Kind(code="directory_not_empty", reason="the directory is not empty"),
    errno.ENXIO: _Kind(code="not_a_regular_file", reason="it is not a regular file"),
    errno.ENODEV: _Kind(code="not_a_regular_file", reason="it is not a regular file"),
    errno.EBUSY: _BUSY,
    errno.ETXTBSY: _BUSY,
    errno.EAGAIN: _BUSY,
    errno.EINTR: _BUSY,
    errno.EMFILE: _FILES,
    errno.ENFILE: _FILES,
    errno.EIO: _Kind(code="io_error", reason="an I/O error (the device failed)"),
}


def os_error(exc: OSError, what: str, error: type[CallError] = ExecutionError) -> CallError:
    """``exc`` as a stable code: ``what`` says what was tried (``cannot read a.txt``)."""
    kind = _OS_ERRORS.get(exc.errno or 0)
    if kind is None:
        reason = os.strerror(exc.errno) if exc.errno else type(exc).__name__
        return error(f"{what}: {reason}", code="file_error")
    return error(f"{what}: {kind.reason}", code=kind.code, retryable=kind.retryable)


def refuse_special(mode: int, shown: str, error: type[CallError] = ExecutionError) -> None:
    """Raise unless ``mode`` is a regular file's."""
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise error(f"{shown} is a directory, not a file", code="not_a_file")
    raise error(
        f"{shown} is a {_kind_of(mode)}, not a regular file; the file adapter reads and writes "
        "only regular files",
        code="not_a_regular_file",
    )


def _kind_of(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


def regular_or_missing(path: Path, shown: str, error: type[CallError] = ExecutionError) -> bool:
    """True for a regular file, False when nothing is there; refuses anything else without
    opening it. Raises ``OSError`` as the OS does for the path itself."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(mode):
        # confine resolved every symlink it could: one still here loops (or was swapped in)
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
    refuse_special(mode, shown, error)
    return True


def open_regular(
    path: Path,
    flags: int,
    shown: str,
    error: type[CallError] = ExecutionError,
    create_mode: int = 0o666,
) -> int:
    """A descriptor on the regular file ``path``; refused (``not_a_regular_file``,
    ``not_a_file``) before it is opened when the path names anything else, and again on
    the opened descriptor. Raises ``OSError`` as the OS does (``FileNotFoundError``...)."""
    if not regular_or_missing(path, shown, error) and not flags & os.O_CREAT:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
    fd = os.open(path, flags | _OPEN_FLAGS, create_mode)
    try:
        refuse_special(os.fstat(fd).st_mode, shown, error)
    except BaseException:
        os.close(fd)
        raise
    return fd


@dataclass(frozen=True, slots=True)
class Head:
    """The first bytes of a file, and the size and sha256 of all of it."""

    data: bytes
    size: int
    sha256: str


def read_head(fd: int, limit: int, watch: Watch) -> Head:
    """Read ``fd`` to its end, keeping at most ``limit`` bytes and hashing everything."""
    digest = hashlib.sha256()
    head = bytearray()
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    size = 0
    while True:
        watch.check()
        n = os.readv(fd, [buffer])
        if not n:
            break
        digest.update(view[:n])
        size += n
        if len(head) < limit:
            head += view[: min(n, limit - len(head))]
    view.release()
    return Head(bytes(head), size, digest.hexdigest())


def head_of(
    path: Path,
    limit: int,
    watch: Watch,
    shown: str,
    error: type[CallError] = ExecutionError,
) -> Head | None:
    """``read_head`` of the regular file ``path``; None when nothing is there."""
    try:
        fd = open_regular(path, os.O_RDONLY, shown, error)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise os_error(exc, f"cannot open {shown}", error) from exc
    try:
        return read_head(fd, limit, watch)
    except OSError as exc:
        raise os_error(exc, f"cannot read {shown}", error) from exc
    finally:
        os.close(fd)


def file_sha256(
    path: Path,
    watch: Watch = UNWATCHED,
    error: type[CallError] = ValidationError,
    shown: str | None = None,
) -> str | None:
    """The sha256 of a regular file, streamed; None when nothing is there."""
    head = head_of(path, 0, watch, shown or path.name, error)
    return None if head is None else head.sha256


def whole_file(path: Path, watch: Watch, shown: str) -> bytes | None:
    """The content of the regular file ``path``, or None when nothing is there; refused
    (``file_too_large``) past ``MAX_WHOLE_FILE`` bytes without reading further."""
    try:
        fd = open_regular(path, os.O_RDONLY, shown)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise os_error(exc, f"cannot open {shown}") from exc
    try:
        size = os.fstat(fd).st_size
        if size > MAX_WHOLE_FILE:
            raise too_large(shown, size)
        data = bytearray()
        while len(data) <= MAX_WHOLE_FILE:
            watch.check()
            chunk = os.read(fd, min(CHUNK, MAX_WHOLE_FILE + 1 - len(data)))
            if not chunk:
                return bytes(data)
            data += chunk
        raise too_large(shown, len(data))  # it grew after fstat
    except OSError as exc:
        raise os_error(exc, f"cannot read {shown}") from exc
    finally:
        os.close(fd)


def too_large(shown: str, size: int) -> ExecutionError:
    return ExecutionError(
        f"{shown} has {size} bytes or more; the file adapter holds at most {MAX_WHOLE_FILE} "
        "bytes of a file it must read whole (a patch, a preview)",
        code="file_too_large",
    )


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a reader sees the old or the new file, never half."""
    mode = None
    with contextlib.suppress(FileNotFoundError):
        mode = stat.S_IMODE(path.stat().st_mode)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tg-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode if mode is not None else NEW_FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync(path.parent)


def _default_mode() -> int:
    """0o666 less the process umask: what open() would have given a new file."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


NEW_FILE_MODE = _default_mode()  # read once: os.umask is process-wide, not thread-safe
