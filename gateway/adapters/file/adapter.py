"""The file adapter: read, list, atomically write, patch and delete files in a workspace.

Every path is confined to the workspace again right before it is touched (see
``gateway.workspace.confine``). Writes are atomic: a temp file in the same directory,
fsync, ``os.replace``, fsync of the directory. Only regular files are read or written,
read in bounded chunks that look at the call's deadline and cancel signal in between
(``gateway.adapters.shared.fileio``); OS errors become stable codes there (``os_error``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import anyio

from gateway.adapters.base import AdapterCall, AdapterOutcome, Evidence
from gateway.adapters.base import SideEffectReport as Effect
from gateway.adapters.file.patch import apply_unified_diff, unified_diff
from gateway.adapters.shared.fileio import (
    UNWATCHED,
    DeadlinePassed,
    Head,
    Stopped,
    Watch,
    atomic_write,
    file_sha256,
    head_of,
    open_regular,
    os_error,
    regular_or_missing,
    sha256_bytes,
    whole_file,
)
from gateway.declarations.catalogue import Catalogue
from gateway.errors import ConfigError, ExecutionError, ToolgateError, ValidationError
from gateway.fsync import fsync
from gateway.settings import Settings
from gateway.types import JSON, Outcome
from gateway.workspace import ResolvedPath, confine

MAX_LIST_ENTRIES = 10_000
INLINE_MAX_BYTES = 64 * 1024
"""Reading a regular file up to this size (a read, a sha256 probe) runs on the event loop:
a hop to a worker thread costs more CPU (about 0.1 ms) than such a read. Larger files (read
there in bounded chunks), anything that is not a regular file (refused there, at once) and
every write (they fsync) go to a worker thread."""


def small_file_bytes(path: Path | str) -> bytes | None:
    """The content of ``path`` when it is a regular file of at most ``INLINE_MAX_BYTES``;
    None otherwise, or on any error (the caller then takes the general path, which reports
    it). Opened without blocking and without following a symlink, and checked on the open
    descriptor: a FIFO or device swapped in after the path was resolved is never read here."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > INLINE_MAX_BYTES:
            return None
        data = b""
        while chunk := os.read(fd, INLINE_MAX_BYTES + 1 - len(data)):
            data += chunk
            if len(data) > INLINE_MAX_BYTES:
                return None  # it grew since fstat: a worker thread reads it in chunks
        return data
    except OSError:
        return None
    finally:
        os.close(fd)


def create(settings: Settings, config: Mapping[str, Any], catalogue: Catalogue) -> FileAdapter:
    """The file adapter takes no configuration of its own."""
    if config:
        raise ConfigError(f"adapters.file: the file adapter has no settings ({sorted(config)})")
    return FileAdapter()


class FileAdapter:
    """Real files under the workspace root."""

    name: ClassVar[str] = "file"

    def execute_now(self, call: AdapterCall) -> AdapterOutcome | None:
        """A read of a regular file of at most ``INLINE_MAX_BYTES``, at once (the path
        confined again first, as every operation does); None for anything else."""
        if call.tool.operation != "read":
            return None
        target = _target(call)
        raw = small_file_bytes(target.location)
        if raw is None:
            return None
        return _read_outcome(target, Head(raw[: call.output_budget], len(raw), sha256_bytes(raw)))

    async def execute(self, call: AdapterCall) -> AdapterOutcome:
        op = _OPERATIONS[call.tool.operation]
        if op is _read and (done := self.execute_now(call)) is not None:
            return done
        try:
            return await anyio.to_thread.run_sync(op, call)
        except DeadlinePassed:
            raise TimeoutError from None  # the pipeline's sign for a timeout
        except Stopped:
            error = ExecutionError(
                "the call was cancelled before it changed anything", code="cancelled"
            )
            return AdapterOutcome(
                Outcome.CANCELLED, error=error, side_effect=Effect(False, False, "stopped")
            )

    async def probe(self, name: str, params: Mapping[str, str], call: AdapterCall) -> JSON:
        target = confine(call.workspace, params["path"], "probe path")
        if name == "file_exists":
            return _exists(target)  # one stat, like each step of confine's realpath
        raw = small_file_bytes(target.location)
        if raw is not None:
            return sha256_bytes(raw)
        return await anyio.to_thread.run_sync(
            file_sha256, target.absolute, UNWATCHED, ValidationError, target.relative
        )

    async def preview(self, call: AdapterCall) -> JSON:
        """What a write would change, for the approver: a diff, or what would be deleted."""
        return await anyio.to_thread.run_sync(_preview, call)

    async def aclose(self) -> None:
        return None


def _exists(target: ResolvedPath) -> bool:
    try:
        os.stat(target.absolute)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return False  # as Path.exists: a symlink loop leads nowhere
        raise os_error(exc, f"cannot look at {target.relative}", ValidationError) from exc
    return True


def _watch(call: AdapterCall) -> Watch:
    return Watch(call.deadline, call.cancelled)


def _preview(call: AdapterCall) -> JSON:
    op = call.tool.operation
    if op == "write_many":
        return {"writes": [p.relative for p in call.paths.values()]}
    target = _target(call)
    if op in ("read", "list"):
        return None
    if op == "delete":
        head = head_of(target.absolute, 0, UNWATCHED, target.relative)
        return {
            "path": target.relative,
            "exists": head is not None,
            "size": head.size if head else 0,
            "sha256": head.sha256 if head else None,
        }
    current = whole_file(target.absolute, UNWATCHED, target.relative)
    before = (current or b"").decode("utf-8", "replace")
    if op == "apply_patch":
        after = apply_unified_diff(before, str(call.arguments["patch"]))
    elif op == "append":
        after = before + str(call.arguments["content"])
    else:
        after = str(call.arguments["content"])
    diff = unified_diff(before, after, target.relative)
    return {
        "path": target.relative,
        "exists": current is not None,
        "diff": diff[:16384],
        "diff_truncated": len(diff) > 16384,
    }


def _target(call: AdapterCall) -> ResolvedPath:
    resolved = call.paths["path"]
    # Re-confine now: a symlink may have been swapped in since validation.
    return confine(call.workspace, resolved.relative, resolved.argument)


def _read(call: AdapterCall) -> AdapterOutcome:
    """At most the output budget is kept; the whole file is hashed, chunk by chunk."""
    target = _target(call)
    head = head_of(target.absolute, call.output_budget, _watch(call), target.relative)
    if head is None:
        raise ExecutionError(f"{target.relative} does not exist", code="file_not_found")
    return _read_outcome(target, head)


def _read_outcome(target: ResolvedPath, head: Head) -> AdapterOutcome:
    truncated = len(head.data) < head.size
    content, encoding = _decode(head.data, truncated)
    data = {
        "path": target.relative,
        "content": content,
        "encoding": encoding,
        "size": head.size,
        "sha256": head.sha256,
    }
    return AdapterOutcome(
        Outcome.SUCCEEDED,
        data=data,
        side_effect=Effect(False, False, f"read {head.size} bytes of {target.relative}"),
        evidence=(Evidence("file_hash", target.relative, head.sha256),),
        truncated=truncated,
    )


def _decode(body: bytes, truncated: bool) -> tuple[str, str]:
    """(content, encoding): UTF-8 text, or hex for binary. A cut that splits the last
    character keeps the text whole up to it instead of turning it all into hex."""
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError as exc:
        if truncated and exc.reason == "unexpected end of data":
            return body[: exc.start].decode("utf-8"), "utf-8"
        return body.hex(), "hex"


def _list(call: AdapterCall) -> AdapterOutcome:
    """Entries in sorted order (a directory's entries right after it), walked one directory
    at a time and stopped at the budget: a huge tree is never gathered whole."""
    target = _target(call)
    try:
        is_dir = stat.S_ISDIR(os.stat(target.absolute).st_mode)
    except OSError as exc:
        raise os_error(exc, f"cannot list {target.relative}") from exc
    if not is_dir:
        raise ExecutionError(f"{target.relative} is not a directory", code="not_a_directory")
    recursive = bool(call.arguments.get("recursive", False))
    entries: list[dict[str, Any]] = []
    truncated = False
    budget = call.output_budget
    skip = len(str(call.workspace.root)) + 1
    try:
        for entry in _walk(str(target.absolute), recursive, _watch(call)):
            rel = entry.path[skip:]
            budget -= len(rel) + 40
            if budget < 0 or len(entries) >= MAX_LIST_ENTRIES:
                truncated = True
                break
            entries.append({"path": rel, "type": _kind(entry), "size": _size(entry)})
    except OSError as exc:
        raise os_error(exc, f"cannot list {target.relative}") from exc
    return AdapterOutcome(
        Outcome.SUCCEEDED,
        data={"path": target.relative, "entries": entries, "count": len(entries)},
        side_effect=Effect(False, False, f"listed {len(entries)} entries of {target.relative}"),
        truncated=truncated,
    )


def _walk(top: str, recursive: bool, watch: Watch) -> Iterator[os.DirEntry[str]]:
    """Depth first, each directory's entries sorted by name (the order of sorting the full
    paths), symlinks not followed; an unreadable subdirectory is skipped."""
    stack = [iter(_entries(top, watch))]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            continue
        yield entry
        if recursive and entry.is_dir(follow_symlinks=False):
            with contextlib.suppress(PermissionError):
                stack.append(iter(_entries(entry.path, watch)))


def _entries(directory: str, watch: Watch) -> list[os.DirEntry[str]]:
    watch.check()
    with os.scandir(directory) as it:
        return sorted(it, key=lambda e: e.name)


def _kind(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return "symlink"
    if entry.is_dir(follow_symlinks=False):
        return "dir"
    return "file" if entry.is_file(follow_symlinks=False) else "other"


def _size(entry: os.DirEntry[str]) -> int | None:
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def _write_checked(
    call: AdapterCall, target: ResolvedPath, data: bytes, verb: str, watch: Watch
) -> Effect:
    """Write ``data`` over ``target`` atomically; nothing is changed when the target is not
    a regular file, or when the call is cancelled before the replace."""
    try:
        _make_parent(call, target)
        regular_or_missing(target.absolute, target.relative)  # a FIFO is refused, not replaced
        watch.check()
        atomic_write(target.absolute, data)
    except OSError as exc:
        raise os_error(exc, f"cannot write {target.relative}") from exc
    return Effect(True, True, f"{verb} {target.relative} ({len(data)} bytes)")


def _make_parent(call: AdapterCall, target: ResolvedPath) -> None:
    parent = target.absolute.parent
    if parent.exists():
        return
    if not call.arguments.get("create_dirs", True):
        raise ExecutionError(
            f"the directory of {target.relative} does not exist", code="file_not_found"
        )
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise os_error(exc, f"cannot create the directory of {target.relative}") from exc
    confine(call.workspace, target.relative, target.argument)


def _write(call: AdapterCall) -> AdapterOutcome:
    target = _target(call)
    watch = _watch(call)
    data = str(call.arguments["content"]).encode("utf-8")
    before = file_sha256(target.absolute, watch, ExecutionError, target.relative)
    effect = _write_checked(call, target, data, "wrote", watch)
    after = sha256_bytes(data)
    return AdapterOutcome(
        Outcome.SUCCEEDED,
        data={"path": target.relative, "sha256": after, "size": len(data), "created": not before},
        side_effect=effect,
        evidence=(Evidence("file_hash", target.relative, after, {"before_sha256": before}),),
    )


def _append(call: AdapterCall) -> AdapterOutcome:
    """Append text to a file (created if missing) with one write and an fsync.

    Not atomic like a replace, and not reconcilable after a crash: declare it with care.
    """
    target = _target(call)
    watch = _watch(call)
    data = str(call.arguments["content"]).encode("utf-8")
    try:
        if not target.absolute.parent.exists():
            _write_checked(call, target, b"", "created", watch)
        watch.check()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        fd = open_regular(target.absolute, flags, target.relative, create_mode=0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise os_error(exc, f"cannot append to {target.relative}") from exc
    after = file_sha256(target.absolute, watch.after_commit(), ExecutionError, target.relative)
    return AdapterOutcome(
        Outcome.SUCCEEDED,
        data={"path": target.relative, "appended": len(data), "sha256": after},
        side_effect=Effect(True, True, f"appended {len(data)} bytes to {target.relative}"),
        evidence=(Evidence("file_hash", target.relative, after),),
    )


def _write_many(call: AdapterCall) -> AdapterOutcome:
    """Write several files, each atomically; report which committed and which did not.

    Not one transaction across files (the filesystem has none): on a failure the outcome is
    ``partial`` with both lists, so the caller retries only what did not commit. A cancel
    stops before the next file; the files not written are listed as failed.
    """
    committed: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    evidence: list[Evidence] = []
    watch = _watch(call)
    stopped = False
    for i, item in enumerate(call.arguments["files"]):
        where = f"files.{i}.path"
        resolved = call.paths[where]
        if stopped:
            failed.append({"path": resolved.relative, "error": "not written: cancelled"})
            continue
        data = str(item["content"]).encode("utf-8")
        try:
            target = confine(call.workspace, resolved.relative, where)
            _write_checked(call, target, data, "wrote", watch)
            # read back: what is really there
            after = file_sha256(target.absolute, watch.after_commit(), ExecutionError)
        except ToolgateError as exc:
            failed.append({"path": resolved.relative, "error": exc.message})
            continue
        except DeadlinePassed:
            raise TimeoutError from None  # the pipeline's sign for a timeout
        except Stopped:
            if not committed:
                raise
            stopped = True
            failed.append({"path": resolved.relative, "error": "not written: cancelled"})
            continue
        committed.append({"path": target.relative, "sha256": after, "size": len(data)})
        evidence.append(Evidence("file_hash", target.relative, after))
    return AdapterOutcome(
        _batch_outcome(committed, failed),
        data={"committed": committed, "failed": failed},
        side_effect=Effect(
            bool(committed or failed),
            bool(committed),
            f"wrote {len(committed)} of {len(committed) + len(failed)} files"
            + ("; retry with only the failed ones" if failed and committed else ""),
        ),
        evidence=tuple(evidence),
        error=None
        if not failed
        else ExecutionError(
            f"{len(failed)} of {len(committed) + len(failed)} files were not written: "
            + "; ".join(f"{f['path']}: {f['error']}" for f in failed[:5]),
            code="batch_incomplete",
            retryable=True,
        ),
    )


def _batch_outcome(committed: list[Any], failed: list[Any]) -> Outcome:
    if not failed:
        return Outcome.SUCCEEDED
    return Outcome.PARTIAL if committed else Outcome.FAILED


def _apply_patch(call: AdapterCall) -> AdapterOutcome:
    target = _target(call)
    watch = _watch(call)
    original_bytes = whole_file(target.absolute, watch, target.relative)
    try:
        original = (original_bytes or b"").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationError(f"{target.relative} is not UTF-8 text", code="not_text") from exc
    patched = apply_unified_diff(original, str(call.arguments["patch"]))
    data = patched.encode("utf-8")
    before = sha256_bytes(original_bytes) if original_bytes is not None else None
    effect = _write_checked(call, target, data, "patched", watch)
    after = sha256_bytes(data)
    diff = unified_diff(original, patched, target.relative)
    return AdapterOutcome(
        Outcome.SUCCEEDED,
        data={"path": target.relative, "sha256": after, "size": len(data)},
        side_effect=effect,
        evidence=(
            Evidence("file_hash", target.relative, after, {"before_sha256": before}),
            Evidence("diff", target.relative, sha256_bytes(diff.encode()), {"diff": diff}),
        ),
    )


def _delete(call: AdapterCall) -> AdapterOutcome:
    target = _target(call)
    watch = _watch(call)
    before = file_sha256(target.absolute, watch, ExecutionError, target.relative)
    if before is None:
        raise ExecutionError(f"{target.relative} does not exist", code="file_not_found")
    watch.check()
    try:
        target.absolute.unlink()
        fsync(target.absolute.parent)
    except OSError as exc:
        raise os_error(exc, f"cannot delete {target.relative}") from exc
    return AdapterOutcome(
        Outcome.SUCCEEDED,
        data={"path": target.relative, "deleted": True},
        side_effect=Effect(True, True, f"deleted {target.relative}"),
        evidence=(Evidence("file_hash", target.relative, None, {"before_sha256": before}),),
    )


_OPERATIONS: dict[str, Callable[[AdapterCall], AdapterOutcome]] = {
    "read": _read,
    "list": _list,
    "write": _write,
    "atomic_replace": _write,
    "apply_patch": _apply_patch,
    "append": _append,
    "write_many": _write_many,
    "delete": _delete,
}
