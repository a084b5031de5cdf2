"""Workspaces and the one place that confines a caller's path to a workspace root.

Every path an agent sends is relative to the workspace root. ``confine`` rejects absolute
paths, NUL bytes, ``..`` escapes and symlinks that lead out of the root, after resolving
every symlink that exists. Adapters call it again right before touching the file, so a
symlink swapped in after validation is still caught.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from gateway.errors import ValidationError
from gateway.frozen import quick_init

MAX_PATH_LENGTH = 4096


@quick_init
@dataclass(frozen=True, slots=True)
class Workspace:
    id: str
    root: Path
    """Absolute, symlink-free root directory."""
    identity: tuple[int, int] | None = None
    """(st_dev, st_ino) of the root when it was declared (``Workspace.declare``): while the
    root's path still names that directory, ``confine`` checks only the components below it."""
    protected: tuple[str, ...] = ()
    """The policy's ``protected_paths`` (policies/workspaces.yaml): what tools that write may
    not touch here. The Rego refuses such a call; a process tool's view makes them read-only
    (``protected_entry`` is the same match)."""

    @classmethod
    def declare(cls, id: str, root: Path, protected: tuple[str, ...] = ()) -> Workspace:
        """The workspace rooted at ``root`` (resolved here), remembering which directory it is."""
        resolved = root.resolve()
        st = resolved.stat()
        return cls(id, resolved, (st.st_dev, st.st_ino), tuple(protected))

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "root": str(self.root)}


@quick_init
@dataclass(frozen=True, slots=True)
class ResolvedPath:
    argument: str
    relative: str
    """Normalised, POSIX-style, relative to the root ("." for the root itself)."""
    root: Path = field(repr=False)
    _absolute: Path | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def absolute(self) -> Path:
        """``root / relative``, made when first asked for: most paths confined before policy
        never reach an adapter (which confines again), and a Path costs a few microseconds."""
        found = self._absolute
        if found is None:
            found = self.root.joinpath(self.relative)
            object.__setattr__(self, "_absolute", found)
        return found

    @property
    def location(self) -> str:
        """``str(self.absolute)`` without making a Path (what a plain ``os`` call takes)."""
        root = str(self.root)
        if self.relative == ".":
            return root
        return f"{root}{self.relative}" if root.endswith("/") else f"{root}/{self.relative}"

    def to_json(self) -> dict[str, object]:
        return {"argument": self.argument, "relative": self.relative, "inside_workspace": True}


def protected_entry(relative: str, protected: tuple[str, ...]) -> str | None:
    """The entry of ``protected`` that ``relative`` (workspace-relative, ``/``-separated)
    falls under, or None. An entry matches as whole path components anywhere in the path:
    ``.git/`` protects ``.git``, ``.git/config`` and ``vendor/lib/.git/HEAD``, not ``my.git``
    (the rule of rego/toolgate.rego, ``protected_paths``)."""
    wrapped = f"/{relative}/"
    for entry in protected:
        if f"/{entry.strip('/')}/" in wrapped:
            return entry
    return None


def protected_in(workspace: Workspace) -> list[str]:
    """The absolute paths in ``workspace`` that match its protected paths, as they exist now
    (symlinks are not followed; nothing below a match is listed). One ``scandir`` per
    directory of the workspace."""
    if not workspace.protected:
        return []
    found: list[str] = []
    pending = [(str(workspace.root), "")]
    while pending:
        directory, relative = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue  # gone or unreadable: nothing to protect there
        for entry in entries:
            sub = f"{relative}/{entry.name}" if relative else entry.name
            if entry.is_symlink():
                continue
            if protected_entry(sub, workspace.protected) is not None:
                found.append(entry.path)
            elif entry.is_dir(follow_symlinks=False):
                pending.append((entry.path, sub))
    return sorted(found)


def confine(workspace: Workspace, raw: object, argument: str = "path") -> ResolvedPath:
    """Resolve ``raw`` inside ``workspace`` or raise ValidationError (code ``path_escape``)."""
    if not isinstance(raw, str):
        raise ValidationError(f"argument '{argument}' must be a path string", code="invalid_path")
    if "\x00" in raw:
        raise ValidationError(f"argument '{argument}' contains a NUL byte", code="invalid_path")
    if len(raw) > MAX_PATH_LENGTH:
        raise ValidationError(f"argument '{argument}' is too long", code="invalid_path")
    # The parts PurePosixPath would give (empty and "." segments dropped), on strings: the
    # pathlib version of this function cost twice as much, and it runs several times a call.
    parts = [p for p in raw.replace("\\", "/").split("/") if p and p != "."]
    # A drive ("C:", "C:x") is judged on the first part, not the raw text: "./C:x" must be
    # refused like "C:x", or its confined form ("C:x") would be refused when the adapter
    # confines it again, after policy and approval passed it.
    if raw.startswith(("/", "\\")) or (parts and len(parts[0]) > 1 and parts[0][1] == ":"):
        raise ValidationError(
            f"argument '{argument}' is absolute ({raw!r}); paths are relative to the "
            "workspace root",
            code="path_escape",
        )
    if ".." in parts:
        raise ValidationError(
            f"argument '{argument}' ({raw!r}) uses '..'; paths must stay inside the workspace",
            code="path_escape",
        )
    root = str(workspace.root)
    inside = root if root.endswith("/") else root + "/"
    target = inside + "/".join(parts) if parts else root
    if workspace.identity is not None and _names_directory(root, workspace.identity):
        resolved = _realpath(target, len(inside) - 1)  # the root is what it was: check below it
    else:
        resolved = _realpath(target)
    if resolved == root:
        relative = "."
    elif resolved.startswith(inside):
        relative = resolved[len(inside) :]
    else:
        raise ValidationError(
            f"argument '{argument}' ({raw!r}) leads outside the workspace through a symlink",
            code="path_escape",
        )
    return ResolvedPath(argument, relative, workspace.root)


def _names_directory(path: str, identity: tuple[int, int]) -> bool:
    """Whether ``path`` is, itself and not through a symlink, the directory ``identity``."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and (st.st_dev, st.st_ino) == identity


def _realpath(path: str, start: int = 0) -> str:
    """``os.path.realpath(path)`` for an absolute path with no empty, ``.`` or ``..``
    segment (what ``confine`` builds). Like realpath, it ``lstat``s every prefix of the
    path (from the one ending at the ``/`` at index ``start``: the caller vouches for the
    prefixes before it); when none is a symlink, the path is its own real path, and this
    skips realpath's string work per segment (most of its cost). At the first symlink it
    hands the whole path to realpath.

    ``confine`` passes the end of the workspace root when the root's path still names the
    directory declared: its ancestors (five or six ``lstat`` calls, most of the cost of a
    short path) are then not checked one by one; if one has become a symlink, it leads to
    that same directory."""
    end = start
    while end >= 0:
        end = path.find("/", end + 1)
        prefix = path if end < 0 else path[:end]
        try:
            if stat.S_ISLNK(os.lstat(prefix).st_mode):
                return os.path.realpath(path)
        except OSError:
            pass  # missing (or unreadable): not a symlink, as realpath sees it
    return path
