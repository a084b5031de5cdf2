"""gateway/fsync.py: fsync by path, of a file or a directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.fsync import fsync


def test_a_file_and_its_directory_are_flushed(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x")
    fsync(path)
    fsync(tmp_path)
    assert path.read_bytes() == b"x"


def test_a_missing_path_is_the_systems_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        fsync(tmp_path / "missing")
