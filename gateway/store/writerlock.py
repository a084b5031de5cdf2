"""SQLite's one writer across processes, queued by the kernel instead of polled.

SQLite lets one connection write at a time. A connection that finds the write lock taken
waits in its busy handler, which sleeps and tries again (1, 2, 5, 10 ... 100 ms): under a
steady load from two processes on one database (``serve --workers N``, replicas on one
host), the sleeper mostly loses the race to the process that just committed, its writes take
hundreds of milliseconds, and each of them costs a thread hop and a transaction of its own
instead of a place in a group commit.

So the gateway's processes on one database file take an advisory lock (``flock``) on a file
beside it, ``<database>-writer``, around each write transaction. A process that finds it
taken waits in the kernel (one thread per process, :meth:`WriterLock.acquire`), which wakes
it when the holder releases: no sleeps, no polling, and the writes it queued meanwhile commit
together. Uncontended, it costs two system calls per group commit.

Every holder opens the file itself (a lock belongs to an open file, so two holders in one
process exclude each other as two processes do). A database in memory, or a lock file that
cannot be opened (a read-only directory), leaves only SQLite's own lock: writers still
exclude each other, by the busy handler.
"""

from __future__ import annotations

import fcntl
import logging
import os

log = logging.getLogger("toolgate.store")

SUFFIX = "-writer"


class WriterLock:
    """The exclusive lock on ``<database>-writer``: one holder at a time, across processes."""

    def __init__(self, database: str | None) -> None:
        self._fd: int | None = None
        if database and database != ":memory:":
            try:
                self._fd = os.open(database + SUFFIX, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                log.warning("no writer lock beside the database (%s): writers will poll", exc)

    def try_acquire(self) -> bool:
        """Take the lock if it is free (or already ours); False if another holder has it."""
        return self._flock(fcntl.LOCK_EX | fcntl.LOCK_NB)

    def acquire(self) -> None:
        """Wait until the lock is ours (blocks the calling thread: never the event loop's)."""
        self._flock(fcntl.LOCK_EX)

    def release(self) -> None:
        self._flock(fcntl.LOCK_UN)

    def _flock(self, operation: int) -> bool:
        fd = self._fd
        if fd is None:
            return True
        try:
            fcntl.flock(fd, operation)
        except BlockingIOError:
            return False
        except OSError as exc:  # not expected of a local file: go on with SQLite's lock alone
            log.warning("the writer lock failed (%s): writers will poll", exc)
            self.close()
        return True

    def close(self) -> None:
        """Close the file (which releases the lock if held)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
