"""The cerberus validator the gateway validates arguments with: JSON's types (no bool as an
integer), a regex matching the whole string, and an error budget shared by the child
validators, so that validation stops after ``max_errors`` errors (bounded work per request)."""

from __future__ import annotations

import re
from typing import Any

import cerberus
from cerberus import TypeDefinition
from cerberus import errors as cerberus_errors

MAX_ERRORS = 20
_LOGIC_RULES = frozenset({"anyof", "allof", "oneof", "noneof"})


class _ErrorsExhausted(Exception):
    """More than the budget of errors: validation stops."""


class _ErrorBudget:
    """The errors of one validation, across the validators cerberus makes for its parts."""

    __slots__ = ("errors", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.errors: list[Any] = []

    def spend(self, errors: Any) -> None:
        for error in errors:
            if error.is_group_error and not error.is_logic_error:
                continue  # wraps the errors of a part, counted when they were made
            # (an anyof/oneof... error counts once: its branches' errors are not counted)
            if len(self.errors) >= self.limit:
                raise _ErrorsExhausted
            self.errors.append(error)


class JsonValidator(cerberus.Validator):
    """A cerberus validator whose types and regexes mean what they mean in JSON Schema.

    ``integer`` and ``float`` reject booleans, and ``regex`` must match the whole string.
    """

    types_mapping = {
        **cerberus.Validator.types_mapping,
        "integer": TypeDefinition("integer", (int,), (bool,)),
        "float": TypeDefinition("float", (float, int), (bool,)),
    }

    errors_truncated = False
    error_list: list[Any] = []
    """The errors of the last validation, each with its whole document path (no group
    errors: they wrap the errors of a part, which are here themselves)."""
    max_errors = MAX_ERRORS
    """Validation stops at the error after this many (``errors_truncated`` then says so).
    cerberus sorts its error lists on every error, so n errors cost O(n²): a document with
    40,000 unknown keys held a CPU for minutes before this bound."""

    def validate(
        self, document: Any, schema: Any = None, update: bool = False, normalize: bool = True
    ) -> bool:
        if self.is_child:
            return bool(super().validate(document, schema, update, normalize))
        budget = _ErrorBudget(self.max_errors)
        self._config["error_budget"] = budget  # children copy the config: one shared budget
        self.errors_truncated = False
        self.error_list = budget.errors
        try:
            return bool(super().validate(document, schema, update, normalize))
        except _ErrorsExhausted:
            # The first errors, each with its whole document path: the error handler nests
            # them as cerberus would have.
            self._errors = cerberus_errors.ErrorList(budget.errors)
            self.errors_truncated = True
            return False

    __call__ = validate

    def _error(self, *args: Any) -> None:
        if len(args) == 1:  # every form of _error ends here with a list of errors
            budget = self._config.get("error_budget")
            if budget is not None:
                budget.spend(args[0])
        super()._error(*args)

    def _get_child_validator(
        self, document_crumb: Any = None, schema_crumb: Any = None, **kwargs: Any
    ) -> Any:
        # The errors of an anyof/allof/oneof/noneof branch are dropped when another branch
        # passes: they must not use up the budget of the document.
        crumb = schema_crumb if isinstance(schema_crumb, tuple) else ()
        if len(crumb) == 3 and crumb[1] in _LOGIC_RULES:
            kwargs["error_budget"] = None
        return super()._get_child_validator(document_crumb, schema_crumb, **kwargs)

    def _validate_regex(self, pattern: str, field: str, value: Any) -> None:
        """{'type': 'string'}"""  # cerberus reads this docstring as the rule's own schema
        if isinstance(value, str) and re.fullmatch(pattern, value) is None:
            self._error(field, cerberus_errors.REGEX_MISMATCH)
