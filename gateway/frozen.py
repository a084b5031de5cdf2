"""Frozen records that cost less to build: ``quick_init``.

A ``dataclass(frozen=True, slots=True)`` sets each field in its ``__init__`` through
``object.__setattr__`` (its own ``__setattr__`` refuses every write): a generic attribute
lookup and two argument tuples per field, about half of a microsecond, which a call pays a
few hundred times (each stage's record, each event of its trail). ``quick_init`` gives such a
class an ``__init__`` that sets each slot through that slot's own setter, bound once: the same
parameters, defaults, default factories and ``__post_init__``, and the class stays what it was
(frozen: writes after ``__init__`` still raise ``FrozenInstanceError``). It reads only what
``dataclasses`` publishes (``fields``, ``MISSING``) and the signature of the ``__init__``
dataclass made: plain frozen dataclasses cost about 4 % more instructions per REST call
(``bench/instructions.py --client asgi --scenario rest``: 2.561 M with it, 2.659 M without),
past what a simplification may cost (issue 30).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, TypeVar

T = TypeVar("T")


def quick_init(cls: type[T]) -> type[T]:
    """Replace the ``__init__`` of the frozen, slotted dataclass ``cls`` (use it as the
    outer decorator: ``@quick_init`` above ``@dataclass(frozen=True, slots=True)``)."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__}: quick_init takes a frozen dataclass with slots")
    original = cls.__init__
    signature = inspect.signature(original)
    parameters = list(signature.parameters.items())[1:]
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    named = {field.name for field in fields}
    for name, _ in parameters:
        if name not in named:  # a parameter that is no field: an InitVar
            raise TypeError(f"{cls.__name__}.{name}: quick_init takes no InitVar")
    # Only public names of dataclasses: a field with a default factory has, in the
    # signature dataclass made, a sentinel default that says "not given", which the new
    # __init__ compares against (as dataclass's own does).
    scope: dict[str, Any] = {}
    for name, parameter in parameters:
        if parameter.default is not inspect.Parameter.empty:
            scope[f"_param_{name}"] = parameter.default
    body = []
    for field in fields:
        name = field.name
        scope[f"_set_{name}"] = inspect.getattr_static(cls, name).__set__
        if field.default_factory is not dataclasses.MISSING:
            scope[f"_factory_{name}"] = field.default_factory
            if field.init:
                value = f"_factory_{name}() if {name} is _param_{name} else {name}"
            else:
                value = f"_factory_{name}()"
        elif not field.init:
            if field.default is dataclasses.MISSING:
                continue  # left unset, as dataclass leaves it
            scope[f"_default_{name}"] = field.default
            value = f"_default_{name}"
        else:
            value = name
        body.append(f"_set_{name}(self, {value})")
    head = ["self"]  # the parameters in dataclass's order (keyword-only ones last)
    for name, parameter in parameters:
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and "*" not in head:
            head.append("*")
        if parameter.default is inspect.Parameter.empty:
            head.append(name)
        else:
            head.append(f"{name}=_param_{name}")
    if hasattr(cls, "__post_init__"):
        body.append("self.__post_init__()")
    source = f"def __init__({', '.join(head)}):\n    " + "\n    ".join(body or ["pass"])
    exec(source, scope)  # the way dataclasses makes its own __init__
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = dict(original.__annotations__)
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
