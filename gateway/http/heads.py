"""The request headers a door reads, found in one pass over the ASGI list.

Starlette's ``Request.headers`` scans the list again for each name (and raises and catches
a ``KeyError`` for each one absent); a door reads a handful of names on every request, so
each door names what it reads once (``Wanted``) and ``Heads.of`` reads them all in one pass,
as Starlette would find them: each name's first value (``Headers.get``), and every value of
the names asked for so (``Headers.getlist``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


class Wanted:
    """The header names a door reads (lower case, as an ASGI server sends them): each
    one's first value, and for ``every`` each value (made once per door)."""

    __slots__ = ("every", "first")

    def __init__(self, first: Iterable[str], every: Iterable[str] = ()) -> None:
        self.first = {name.encode("latin-1"): name for name in first}
        self.every = {name.encode("latin-1"): name for name in every}


@dataclass(slots=True)
class Heads:
    """The headers of ``Wanted`` a request carries."""

    first: dict[str, str]
    """Each name's first value, as Starlette's ``Headers.get`` finds it."""
    every: dict[str, list[str]]
    """Every value of each name ``Wanted.every`` asked for, in order."""
    repeated: set[str]
    """The names of ``Wanted.first`` that came more than once."""
    certain: bool
    """False when a wanted name came in other than lower case (which an ASGI server does not
    send; Starlette would still find it), or ``Content-Length`` is not digits."""

    @classmethod
    def of(cls, raw: Sequence[tuple[bytes, bytes]], wanted: Wanted) -> Heads:
        first: dict[str, str] = {}
        every: dict[str, list[str]] = {}
        repeated: set[str] = set()
        certain = True
        names, all_of = wanted.first, wanted.every
        for key, value in raw:
            name = names.get(key)
            if name is not None:
                if name not in first:
                    first[name] = value.decode("latin-1")
                else:
                    repeated.add(name)
            elif (many := all_of.get(key)) is not None:
                every.setdefault(many, []).append(value.decode("latin-1"))
            elif not key.islower() and (key.lower() in names or key.lower() in all_of):
                certain = False
        length = first.get("content-length")
        if length is not None and not length.isdigit():
            certain = False
        return cls(first, every, repeated, certain)
