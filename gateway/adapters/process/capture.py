"""A process's output within its budget: the head and tail of each stream, its size and its
sha256, in bounded memory however much the command writes."""

from __future__ import annotations

import codecs
import hashlib

SCAN = 4096
"""Bytes of a stream's end kept whatever the budget, to tell which limit a run hit."""


class Capture:
    """One stream: its first ``cap`` and last ``max(cap, SCAN)`` bytes, its size and its
    sha256. Memory stays within that however much the command writes."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.keep = max(cap, SCAN)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.digest = hashlib.sha256()

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.digest.update(chunk)
        room = self.cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
        if len(chunk) >= self.keep:
            self.tail[:] = chunk[-self.keep :]
            return
        self.tail += chunk
        if len(self.tail) > self.keep:
            del self.tail[: len(self.tail) - self.keep]

    def last(self) -> str:
        """The stream's last ``SCAN`` bytes or fewer, as text (not for the result)."""
        return _tail_text(bytes(self.tail[-SCAN:]))

    def text(self, limit: int) -> str:
        """The whole stream if it fits in ``limit`` bytes, else its head and tail."""
        if self.total <= limit:
            return bytes(self.head[: self.total]).decode("utf-8", "replace")
        head, tail = limit // 2, limit - limit // 2
        dropped = self.total - head - tail
        return (
            _head_text(bytes(self.head[:head]))
            + f"\n[... {dropped} bytes dropped ...]\n"
            + _tail_text(bytes(self.tail[len(self.tail) - tail :] if tail else b""))
        )


def _head_text(data: bytes) -> str:
    return codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=False)


def _tail_text(data: bytes) -> str:
    start = 0
    while start < min(len(data), 3) and data[start] & 0xC0 == 0x80:
        start += 1  # skip the continuation bytes of a character cut in half
    return data[start:].decode("utf-8", "replace")


def split_budget(budget: int, a: int, b: int) -> tuple[int, int]:
    """Share ``budget`` between two streams of sizes a and b; a small one gives up its rest."""
    first = min(a, max(budget // 2, budget - b))
    return first, min(b, budget - first)
