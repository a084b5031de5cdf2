"""Checking one execution's chain of events, and naming what was done to it.

The stored links (``prev`` → ``hash``) are followed from the genesis value; each row's hash is
recomputed from its columns. What was done shows in how the two disagree:

- **edited**: a row's columns no longer give its hash; or a row was rewritten with a fresh
  hash, and the row after it still links to the old one;
- **deleted**: the chain skips sequence numbers its rows' hashes vouch for (a row's hash
  covers its seq, so renumbering the rest after a deletion shows too);
- **reordered**: following the links visits sequence numbers out of order, or a row's hash
  says it was written at another seq;
- **inserted**: a row that is not on the chain (two rows link to one predecessor, and the
  chain goes on from the other);
- **unchained**: a row without a link (written around the gateway, or by a gateway before
  the audit trail).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from gateway.events.chain import GENESIS, event_hash
from gateway.store.audit import ChainRow

SEARCH = 256
"""How far from its seq a moved row's hash is looked for (what it was written as)."""


@dataclass(frozen=True, slots=True)
class Fault:
    """One thing wrong with the trail: ``what`` is edited, deleted, reordered, inserted,
    unchained or checkpoint."""

    what: str
    execution_id: str | None
    seq: int | None
    detail: str

    def line(self) -> str:
        where = []
        if self.execution_id is not None:
            where.append(f"execution {self.execution_id}")
        if self.seq is not None:
            where.append(f"seq {self.seq}")
        place = " ".join(where)
        return f"{self.what}: {place}: {self.detail}" if place else f"{self.what}: {self.detail}"

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def row_hash(row: ChainRow, seq: int | None = None) -> str:
    """The hash ``row`` should carry (at ``seq``, by default its own)."""
    return event_hash(
        row.prev or "",
        row.execution_id,
        row.seq if seq is None else seq,
        row.id,
        row.type,
        row.version,
        row.at_ms,
        row.data_json,
    )


def written_at(row: ChainRow, top: int) -> int | None:
    """The seq ``row``'s hash was made for: its own if intact, another if it was moved,
    None if its columns were changed."""
    if row_hash(row) == row.hash:
        return row.seq
    for distance in range(1, SEARCH):
        for seq in (row.seq - distance, row.seq + distance):
            if 0 <= seq <= top + SEARCH and row_hash(row, seq) == row.hash:
                return seq
    return None


def _span(first: int, last: int) -> str:
    return f"seq {first}" if first == last else f"seq {first}..{last}"


class _Check:
    """The state of one chain's check (see :func:`check_chain`)."""

    def __init__(self, rows: Sequence[ChainRow]) -> None:
        self.rows = sorted(rows, key=lambda r: r.seq)
        self.xid = self.rows[0].execution_id
        top = self.rows[-1].seq
        self.origin = {r.id: written_at(r, top) for r in self.rows if r.hash is not None}
        self.after: dict[str, list[ChainRow]] = {}
        for row in self.rows:
            if row.hash is not None and row.prev is not None:
                self.after.setdefault(row.prev, []).append(row)
        self.faults: list[Fault] = []
        self.reported: set[str] = set()
        self.visited: set[str] = set()

    def fault(self, what: str, row: ChainRow | None, detail: str, seq: int | None = None) -> None:
        if row is not None:
            self.reported.add(row.id)
        at = row.seq if row is not None else seq
        self.faults.append(Fault(what, self.xid, at, detail))

    def orig(self, row: ChainRow) -> int:
        found = self.origin.get(row.id)
        return row.seq if found is None else found

    def walk(self, start: ChainRow | None) -> ChainRow | None:
        """Follow the links from ``start`` (None: the genesis); the last row reached."""
        current, link = start, GENESIS if start is None else start.hash
        while True:
            nexts = [r for r in self.after.get(link or "", []) if r.id not in self.visited]
            if not nexts:
                return current
            # Two rows link to one predecessor: the chain goes on from the one that has a
            # successor; the other was put in.
            nexts.sort(key=lambda r: (not self.after.get(r.hash or ""), r.seq))
            for extra in nexts[1:]:
                self.visited.add(extra.id)
                self.fault(
                    "inserted", extra, "not on the chain: another event links to its predecessor"
                )
            chosen = nexts[0]
            if current is not None and chosen.seq < current.seq:
                self.fault("reordered", chosen, f"the chain puts it after seq {current.seq}")
            self.visited.add(chosen.id)
            current, link = chosen, chosen.hash

    def gap(self, last: ChainRow | None, resumed: ChainRow) -> None:
        """The links stopped at ``last`` and go on at ``resumed``: name the break."""
        expected = 0 if last is None else self.orig(last) + 1
        written = self.orig(resumed)
        if written > expected:
            self.fault(
                "deleted",
                None,
                f"{_span(expected, written - 1)} missing (the next event, "
                f"seq {resumed.seq}, was written as seq {written})",
                seq=expected,
            )
        elif last is not None:
            self.fault(
                "edited",
                last,
                f"rewritten with a new hash: seq {resumed.seq} links to "
                "a version of it that is gone",
            )
        else:
            self.fault("edited", resumed, "its link to the genesis value was changed")

    def run(self) -> list[Fault]:
        for row in self.rows:
            if row.hash is None or row.prev is None:
                self.visited.add(row.id)
                self.fault("unchained", row, "stored without a hash (written around the gateway?)")
        last = self.walk(None)
        while True:
            left = [r for r in self.rows if r.id not in self.visited]
            if not left:
                break
            resumed = min(left, key=lambda r: (self.orig(r), r.seq))
            self.gap(last, resumed)
            self.visited.add(resumed.id)
            last = self.walk(resumed)
        renumbered = any(f.what in ("deleted", "inserted") for f in self.faults)
        for row in self.rows:
            if row.id in self.reported or row.hash is None:
                continue
            written = self.origin.get(row.id)
            if written is None:
                self.fault("edited", row, "its content does not match its hash")
            elif written != row.seq and not renumbered:
                self.fault("reordered", row, f"its hash says it was written as seq {written}")
        self.faults.sort(key=lambda f: (f.seq if f.seq is not None else -1, f.what))
        return self.faults


def check_chain(rows: Sequence[ChainRow]) -> list[Fault]:
    """Every fault of one execution's chain (``rows``: all its events); none if intact."""
    if not rows:
        return []
    return _Check(rows).run()
