"""A secret file made once: racing processes agree on the first one published."""

from __future__ import annotations

import multiprocessing
import stat
from pathlib import Path

from gateway.keyfile import publish_once


def _publish(path: str, data: bytes) -> bool:
    return publish_once(Path(path), data)


def test_the_first_file_published_is_kept_and_nothing_is_left_beside_it(tmp_path: Path) -> None:
    target = tmp_path / "keys" / "approval.key"
    assert publish_once(target, b"first")
    assert not publish_once(target, b"second")
    assert target.read_bytes() == b"first"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in target.parent.iterdir()] == ["approval.key"]


def test_processes_racing_agree_on_one_key(tmp_path: Path) -> None:
    target = tmp_path / "audit.key"
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        won = pool.starmap(_publish, [(str(target), f"key-{i}".encode()) for i in range(8)])
    assert won.count(True) == 1
    assert target.read_bytes() == f"key-{won.index(True)}".encode()
    assert [p.name for p in tmp_path.iterdir()] == ["audit.key"]
