"""The malloc arenas of a process that limited them, counted by glibc itself (malloc_info).

Each check runs in a fresh interpreter: the limit holds for the process, and only arenas made
after it count."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway import allocator
from gateway.cli import main
from tests.helpers import REPO

pytestmark = pytest.mark.skipif(allocator._glibc() is None, reason="glibc's malloc only")

# Threads that allocate at once, each holding what it allocated until all have: glibc gives
# each new thread an arena of its own while there are fewer than the limit.
ARENAS_AFTER_THREADS = """
import ctypes, sys, threading
from gateway import allocator
if sys.argv[1] == "limit":
    assert allocator.limit_arenas(2)
barrier = threading.Barrier(12)
def work():
    held = [bytearray(4096) for _ in range(64)]
    barrier.wait()
threads = [threading.Thread(target=work) for _ in range(12)]
for t in threads: t.start()
for t in threads: t.join()
libc = ctypes.CDLL(None)
libc.open_memstream.restype = ctypes.c_void_p
libc.open_memstream.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
buf, size = ctypes.c_void_p(), ctypes.c_size_t()
stream = libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
libc.malloc_info(0, stream)
libc.fclose(stream)
print(ctypes.string_at(buf, size.value).decode().count("<heap nr="))
"""


def arenas_after_threads(mode: str, **env: str) -> int:
    base = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    proc = subprocess.run(
        [sys.executable, "-c", ARENAS_AFTER_THREADS, mode],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**base, "PYTHONPATH": str(REPO), **env},
    )
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout)


@pytest.mark.slow  # starts a process itself
def test_limited_arenas_stay_at_the_limit_however_many_threads_allocate() -> None:
    assert arenas_after_threads("limit") <= allocator.ARENAS
    assert arenas_after_threads("free") > allocator.ARENAS  # the check can fail


def test_an_operators_malloc_arena_max_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert allocator.limit_arenas(2) is False


# 20 MB in chunks below the mmap threshold, each pinned by a small chunk above it so that
# free() cannot give the pages back from the heap's top; then freed.
RSS_AROUND_TRIM = """
import sys
from gateway import allocator
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
held, pins = [], []
for _ in range(200):
    held.append(bytearray(100_000))
    pins.append(bytearray(1000))
del held
before = rss()
trimmed = allocator.trim()
print(trimmed, before - rss())
"""


@pytest.mark.slow  # starts a process itself
def test_trim_gives_back_freed_memory_the_heap_could_not() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", RSS_AROUND_TRIM],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 0, proc.stderr
    trimmed, given_back = proc.stdout.split()
    assert trimmed == "True" and int(given_back) > 10_000_000


def test_serve_limits_the_arenas_before_anything_else(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(allocator, "limit_arenas", lambda: calls.append(1) or True)
    # --workers 0 is refused right after the settings are read: nothing starts.
    assert main(["--config", str(project / "toolgate.yaml"), "serve", "--workers", "0"]) == 2
    assert calls == [1] and "--workers must be at least 1" in capsys.readouterr().err
