"""``fsync`` by path: a file's data, or a directory's entries after a rename, create or
delete in it, flushed to disk (the last step of an atomic replace: temporary file, ``fsync``,
``os.replace``, ``fsync`` of the directory)."""

from __future__ import annotations

import os
from pathlib import Path


def fsync(path: Path) -> None:
    """Flush ``path`` (a file or a directory) to disk; OSError as the system gives it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
