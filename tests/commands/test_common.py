"""What the CLI's commands share: reading ``--arg NAME=VALUE`` (and ``--edit``), the
message when no gateway answers."""

from __future__ import annotations

import pytest

from gateway.cli import main
from gateway.commands.common import UsageError, argument
from gateway.testing import free_port
from tests.helpers import ALICE, REPO


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


@pytest.mark.parametrize(
    "command",
    [
        ["call", "fs.read_file", "--arg", "path=a.txt"],
        ["executions", "list"],
        ["policy", "input", "ex_1"],
    ],
    ids=["call", "executions", "policy-input"],
)
def test_no_gateway_at_the_address_says_how_to_name_another(
    command: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A new user started the gateway with ``TOOLGATE_PORT=8081 make run``; the CLI in their
    second terminal asked 8080 and said only ``Connection refused``, not how to ask 8081."""
    port = free_port()  # nobody listens there
    monkeypatch.setenv("TOOLGATE_PORT", str(port))
    monkeypatch.setenv("TOOLGATE_API_KEY", ALICE)
    code = main(["--config", str(REPO / "toolgate.yaml"), *command])
    assert code == 3
    err = capsys.readouterr().err
    assert err.startswith(f"toolgate: cannot reach the gateway at http://127.0.0.1:{port}: ")
    assert err.endswith(
        " (is it running there? name its URL with --url, or the TOOLGATE_HOST and"
        " TOOLGATE_PORT it was started with)\n"
    )
