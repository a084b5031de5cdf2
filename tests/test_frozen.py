"""gateway/frozen.py: ``quick_init`` builds the same frozen records as dataclass's own
``__init__`` (parameters, defaults, factories, ``__post_init__``), and they stay frozen."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field

import pytest

from gateway.adapters.base import AdapterCall, AdapterOutcome, Evidence
from gateway.frozen import quick_init
from gateway.pipeline.records import Call, Settled, Trail
from gateway.workspace import ResolvedPath


@dataclass(frozen=True, slots=True)
class Plain:
    a: int
    b: list[int] = field(default_factory=list)
    c: int | None = field(default=None, init=False)
    d: int = field(default=3, kw_only=True)
    e: str = "e"

    def __post_init__(self) -> None:
        object.__setattr__(self, "c", self.a + 1)


@quick_init
@dataclass(frozen=True, slots=True)
class Quick:
    a: int
    b: list[int] = field(default_factory=list)
    c: int | None = field(default=None, init=False)
    d: int = field(default=3, kw_only=True)
    e: str = "e"

    def __post_init__(self) -> None:
        object.__setattr__(self, "c", self.a + 1)


def as_tuple(value: Plain | Quick) -> tuple[object, ...]:
    return dataclasses.astuple(value)


def test_the_same_signature_and_values_as_dataclass_makes() -> None:
    assert str(inspect.signature(Quick)) == str(inspect.signature(Plain))
    for args, kwargs in [((1,), {}), ((1, [2]), {"d": 4}), ((1,), {"e": "x", "b": [5]})]:
        assert as_tuple(Quick(*args, **kwargs)) == as_tuple(Plain(*args, **kwargs))  # type: ignore[arg-type]
    first, second = Quick(1), Quick(1)
    assert first.b is not second.b  # a fresh default each time, as the factory makes it
    assert first == second and hash(Trail("ex_1", (), 0)) == hash(Trail("ex_1", (), 0))
    changed = dataclasses.replace(first, a=7)
    assert (changed.a, changed.c) == (7, 8)  # init=False: made again by __post_init__


def test_missing_and_unknown_arguments_fail_as_before() -> None:
    with pytest.raises(TypeError):
        Quick()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Quick(1, [2], "e", 3)  # type: ignore[call-arg]  # d is keyword-only
    with pytest.raises(TypeError):
        Quick(1, f=2)  # type: ignore[call-arg]


@pytest.mark.parametrize("record", [Quick(1), Trail("ex_1", (), 0), Evidence("file", "a")])
def test_the_records_stay_frozen(record: object) -> None:
    name = dataclasses.fields(record)[0].name  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(record, name, None)


def test_the_hot_records_use_it() -> None:
    for cls in (Call, Settled, Trail, AdapterCall, AdapterOutcome, ResolvedPath):
        assert cls.__init__.__code__.co_filename == "<string>"
        assert "_set_" in " ".join(cls.__init__.__code__.co_names), cls


def test_only_frozen_slotted_dataclasses() -> None:
    @dataclass(slots=True)
    class Mutable:
        a: int

    @dataclass(frozen=True)
    class NoSlots:
        a: int

    for cls in (Mutable, NoSlots, int):
        with pytest.raises(TypeError):
            quick_init(cls)
