"""gateway/mcp/sdk_private.py uses what the MCP SDK does not publish, read against one
version of it: another version fails here until each use is checked against it."""

from __future__ import annotations

from gateway.mcp import sdk_private


def test_the_installed_sdk_is_the_one_its_private_uses_were_written_for() -> None:
    installed = sdk_private.installed()
    assert installed == sdk_private.WRITTEN_FOR, (
        f"mcp {installed} is installed, but gateway/mcp/sdk_private.py was written for "
        f"{sdk_private.WRITTEN_FOR}: check each private use it lists against the new SDK's "
        "source (and tests/mcp/test_stateless.py, which compares the two paths), then set "
        "WRITTEN_FOR"
    )


def test_the_private_uses_live_in_one_module() -> None:
    from pathlib import Path

    import gateway

    root = Path(gateway.__file__).parent
    private = ("_admit_session", "_discard_session", "self._task_group", "mcp.server._otel")
    found = sorted(
        str(path.relative_to(root.parent))
        for path in root.rglob("*.py")
        if any(name in path.read_text(encoding="utf-8") for name in private)
    )
    assert found == ["gateway/mcp/sdk_private.py"]
