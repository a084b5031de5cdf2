"""``toolgate policy promote``: the shadow (candidate) policy's files become the enforcing
ones (docs/policies.md#promoting-the-candidate).

The candidate is loaded and checked first (a fault changes nothing). Then each of the two
enforcing directories is replaced whole: the candidate's directory is copied beside it
(files fsynced), and the copy and the enforcing directory are exchanged by one
``renameat2(RENAME_EXCHANGE)``, atomic: a reader sees the old directory or the new one,
never a mix or none (where the kernel cannot exchange, two renames, with an instant of no
directory, which a reload would refuse, keeping the running policy). The old files are then
removed. A reload of the gateway follows (the command's, or ``SIGHUP``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
from pathlib import Path

from gateway.errors import ConfigError
from gateway.fsync import fsync
from gateway.policy.loader import PolicySources, load_policy_sources

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def promote(candidate: tuple[Path, Path], enforcing: tuple[Path, Path]) -> PolicySources:
    """Copy ``candidate`` (rego, data) over ``enforcing`` (rego, data), each directory
    exchanged atomically; the candidate's sources. ConfigError (nothing changed) when the
    candidate does not load, or a directory is both."""
    sources = load_policy_sources(*candidate)
    for source, target in zip(candidate, enforcing, strict=True):
        if source.resolve() == target.resolve():
            raise ConfigError(f"the candidate's {source} is the enforcing directory itself")
    for source, target in zip(candidate, enforcing, strict=True):
        _replace_dir(source, target)
    return sources


def _replace_dir(source: Path, target: Path) -> None:
    staged = target.with_name(f".{target.name}.promote-{os.getpid()}")
    shutil.rmtree(staged, ignore_errors=True)
    shutil.copytree(source, staged)
    _fsync_tree(staged)
    if target.exists():
        _exchange(staged, target)
        shutil.rmtree(staged)  # now the old files
    else:
        os.rename(staged, target)
    fsync(target.parent)


def _exchange(a: Path, b: Path) -> None:
    """Swap two directories in one step (Linux ``renameat2``), else by two renames."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is not None:
        done = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
        if done == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise OSError(code, os.strerror(code), str(b))
    aside = b.with_name(f".{b.name}.old-{os.getpid()}")
    os.rename(b, aside)
    os.rename(a, b)
    os.rename(aside, a)


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            fsync(path)
    fsync(root)
