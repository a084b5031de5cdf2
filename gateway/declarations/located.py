"""Faults that a model validator finds across keys, each reported at its own key.

A ``ValueError`` raised in a model's ``@model_validator`` is reported at the model itself
(for a tool's top-level keys: the whole document, line 1) and stops at the first fault.
Collect them in ``Faults`` instead: ``raise_any`` raises one pydantic ValidationError with
every fault at its ``loc``, which pydantic nests under the model's own position, so the
loader's line index (``gateway.yamlsrc``) names the line of each key.
"""

from __future__ import annotations

from typing import Any

from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

Loc = tuple[str | int, ...]


class Faults:
    """A list of ``(loc, message)``, raised all at once."""

    def __init__(self) -> None:
        self._details: list[InitErrorDetails] = []

    def add(self, loc: Loc, message: str, value: Any = None) -> None:
        # The message goes in ctx: a template's braces in it are not format fields.
        error = PydanticCustomError("value_error", "{message}", {"message": message})
        self._details.append(InitErrorDetails(type=error, loc=loc, input=value))

    def __bool__(self) -> bool:
        return bool(self._details)

    def raise_any(self, title: str) -> None:
        """Raise every fault added so far (nothing when there is none)."""
        if self._details:
            raise ValidationError.from_exception_data(title, self._details)
