"""What the CLI's commands share: reading ``--arg NAME=VALUE`` (and ``--edit``)."""

from __future__ import annotations

import pytest

from gateway.commands.common import UsageError, argument


@pytest.mark.parametrize(
    ("text", "expected"),
    [("path=notes/a.txt", ("path", "notes/a.txt")), ("n=3", ("n", 3)), ("s=", ("s", ""))],
)
def test_an_argument_is_a_name_and_a_value_json_where_it_parses(
    text: str, expected: tuple[str, object]
) -> None:
    assert argument(text) == expected


@pytest.mark.parametrize("text", ["path", "=x", "="])
def test_an_argument_without_a_name_is_refused_here(text: str) -> None:
    """``=x`` was sent as an argument named "" (the gateway then named it unknown)."""
    with pytest.raises(UsageError, match=rf"--arg {text!r}: use NAME=VALUE"):
        argument(text)
