"""Workspaces and the one place that confines a caller's path to a workspace root.

Every path an agent sends is relative to the workspace root. ``confine`` rejects absolute
paths, NUL bytes, ``..`` escapes and symlinks that lead out of the root, after resolving
every symlink that exists. Adapters call it again right before touching the file, so a
symlink swapped in after validation is still caught.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from gateway.errors import ValidationError

MAX_PATH_LENGTH = 4096


@dataclass(frozen=True, slots=True)
class Workspace:
    id: str
    root: Path
    """Absolute, symlink-free root directory."""

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "root": str(self.root)}


@dataclass(frozen=True, slots=True)
class ResolvedPath:
    argument: str
    relative: str
    """Normalised, POSIX-style, relative to the root ("." for the root itself)."""
    absolute: Path

    def to_json(self) -> dict[str, object]:
        return {"argument": self.argument, "relative": self.relative, "inside_workspace": True}


def confine(workspace: Workspace, raw: object, argument: str = "path") -> ResolvedPath:
    """Resolve ``raw`` inside ``workspace`` or raise ValidationError (code ``path_escape``)."""
    if not isinstance(raw, str):
        raise ValidationError(f"argument '{argument}' must be a path string", code="invalid_path")
    if "\x00" in raw:
        raise ValidationError(f"argument '{argument}' contains a NUL byte", code="invalid_path")
    if len(raw) > MAX_PATH_LENGTH:
        raise ValidationError(f"argument '{argument}' is too long", code="invalid_path")
    if raw.startswith(("/", "\\")) or (len(raw) > 1 and raw[1] == ":"):
        raise ValidationError(
            f"argument '{argument}' is absolute ({raw!r}); paths are relative to the "
            "workspace root",
            code="path_escape",
        )
    parts = PurePosixPath(raw.replace("\\", "/")).parts
    if ".." in parts:
        raise ValidationError(
            f"argument '{argument}' ({raw!r}) uses '..'; paths must stay inside the workspace",
            code="path_escape",
        )
    candidate = workspace.root.joinpath(*parts) if parts else workspace.root
    resolved = Path(os.path.realpath(candidate))
    if resolved != workspace.root and workspace.root not in resolved.parents:
        raise ValidationError(
            f"argument '{argument}' ({raw!r}) leads outside the workspace through a symlink",
            code="path_escape",
        )
    relative = resolved.relative_to(workspace.root).as_posix()
    return ResolvedPath(argument, relative or ".", resolved)
