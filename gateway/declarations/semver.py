"""Just enough semantic versioning: parse ``X.Y.Z[-pre]`` and match npm-style ranges.

Ranges: exact ``1.2.0``; ``^1``, ``^1.2``, ``^1.2.3``; ``~1.2``; ``1``, ``1.2``, ``1.x``;
comparators ``>=1.0.0 <2.0.0`` (space = and); ``||`` alternatives; ``*`` or empty = any.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from functools import total_ordering

_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?$")
_PARTIAL = re.compile(r"^(\d+|x|\*)(?:\.(\d+|x|\*))?(?:\.(\d+|x|\*))?(?:-([0-9A-Za-z.-]+))?$")


@total_ordering
class Version:
    """An immutable, ordered semantic version."""

    __slots__ = ("_text", "major", "minor", "patch", "pre")

    def __init__(self, major: int, minor: int, patch: int, pre: str = "") -> None:
        self.major, self.minor, self.patch, self.pre = major, minor, patch, pre
        # Written once: a call names its tool's version in several records and events.
        self._text = f"{major}.{minor}.{patch}" + (f"-{pre}" if pre else "")

    @classmethod
    def parse(cls, text: str) -> Version:
        match = _VERSION.match(str(text).strip())
        if not match:
            raise ValueError(f"{text!r} is not a version like 1.2.0")
        return cls(int(match[1]), int(match[2]), int(match[3]), match[4] or "")

    def _key(self) -> tuple[int, int, int, int, str]:
        return (self.major, self.minor, self.patch, 0 if self.pre else 1, self.pre)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Version) and self._key() == other._key()

    def __lt__(self, other: Version) -> bool:
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        return self._text

    __repr__ = __str__


Predicate = Callable[[Version], bool]


def parse_range(text: str) -> Predicate:
    """Compile a range; raises ValueError with a readable reason."""
    text = (text or "").strip()
    if text in ("", "*", "latest"):
        return lambda v: not v.pre
    alternatives = [_conjunction(part.split()) for part in text.split("||")]
    return lambda v: any(alt(v) for alt in alternatives)


def _conjunction(tokens: list[str]) -> Predicate:
    if not tokens:
        raise ValueError("empty range alternative")
    preds = [_comparator(token) for token in tokens]
    return lambda v: all(p(v) for p in preds)


_COMPARE: dict[str, Callable[[Version, Version], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
}


def _comparator(token: str) -> Predicate:
    op = next((op for op in _COMPARE if token.startswith(op)), None)
    if op is not None:
        bound, compare = _full(token[len(op) :]), _COMPARE[op]
        return lambda v: compare(v, bound)
    if token.startswith("^"):
        return _caret(token[1:])
    if token.startswith("~"):
        return _tilde(token[1:])
    return _partial(token.lstrip("="))


def _full(text: str) -> Version:
    match = _PARTIAL.match(text)
    if not match or any(g in ("x", "*") for g in match.groups()[:3] if g):
        raise ValueError(f"{text!r} is not a version")
    major, minor, patch = (int(g) if g else 0 for g in match.groups()[:3])
    return Version(major, minor, patch, match[4] or "")


def _numbers(text: str) -> tuple[list[int], str]:
    match = _PARTIAL.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a version or range (examples: 1.2.0, ^1, ~1.2)")
    nums: list[int] = []
    for group in match.groups()[:3]:
        if group is None or group in ("x", "*"):
            break
        nums.append(int(group))
    return nums, match[4] or ""


def _partial(text: str) -> Predicate:
    nums, pre = _numbers(text)
    if len(nums) == 3:
        exact = _version(nums, pre)
        return lambda v: v == exact
    return lambda v: not v.pre and [v.major, v.minor, v.patch][: len(nums)] == nums


def _caret(text: str) -> Predicate:
    nums, pre = _numbers(text)
    low = _version(nums, pre)
    if not nums:
        return lambda v: not v.pre
    if nums[0] > 0 or len(nums) == 1:
        high = Version(nums[0] + 1, 0, 0)
    elif len(nums) == 2 or nums[1] > 0:
        high = Version(0, nums[1] + 1, 0)
    else:
        high = Version(0, 0, nums[2] + 1)
    return lambda v: low <= v < high and (not v.pre or bool(pre))


def _tilde(text: str) -> Predicate:
    nums, pre = _numbers(text)
    low = _version(nums, pre)
    high = Version(nums[0] + 1, 0, 0) if len(nums) == 1 else Version(nums[0], nums[1] + 1, 0)
    return lambda v: low <= v < high and (not v.pre or bool(pre))


def _version(nums: list[int], pre: str) -> Version:
    padded = [*nums, 0, 0, 0]
    return Version(padded[0], padded[1], padded[2], pre)
