"""A secret file made once and shared: the approval key, the audit signing key.

Gateways that start at once on one directory (replicas on a shared volume, each pid 1 in its
container) must agree on one key: each writes its candidate to a temporary file of a unique
name beside the target, with owner-only permissions, and links it into place; the first link
wins and every other process reads that one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def publish_once(path: Path, data: bytes) -> bool:
    """``data`` at ``path`` (mode 0600) unless a file is there already; whether it was this
    call that published it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.link(name, path)
    except FileExistsError:
        return False
    finally:
        os.unlink(name)
    return True
