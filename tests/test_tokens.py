from __future__ import annotations

import time

import pytest

from gateway.approvals.tokens import TokenClaims, check_binding, sign, verify
from gateway.errors import PolicyDenied

KEY = b"k" * 32


def claims(**kw: object) -> TokenClaims:
    base = dict(
        approval_id="ap_1",
        tool="t",
        version="1.0.0",
        arguments_sha256="a",
        actor="alice",
        workspace="demo",
        expires_ms=int(time.time() * 1000) + 60_000,
    )
    base.update(kw)
    return TokenClaims(**base)  # type: ignore[arg-type]


def test_round_trip_and_binding() -> None:
    got = verify(sign(claims(), KEY), KEY)
    assert got == claims(expires_ms=got.expires_ms)
    check_binding(
        got, tool="t", version="1.0.0", arguments_sha256="a", actor="alice", workspace="demo"
    )
    for field, value in [
        ("tool", "u"),
        ("version", "2.0.0"),
        ("arguments_sha256", "b"),
        ("actor", "bob"),
        ("workspace", "ops"),
    ]:
        actual = dict(
            tool="t", version="1.0.0", arguments_sha256="a", actor="alice", workspace="demo"
        )
        actual[field] = value
        with pytest.raises(PolicyDenied):
            check_binding(got, **actual)


@pytest.mark.parametrize("token", ["", "nodot", "a.b", "!!!.???"])
def test_garbage_is_refused(token: str) -> None:
    with pytest.raises(PolicyDenied):
        verify(token, KEY)


def test_other_key_and_expiry_are_refused() -> None:
    with pytest.raises(PolicyDenied, match="signature"):
        verify(sign(claims(), KEY), b"x" * 32)
    with pytest.raises(PolicyDenied, match="expired"):
        verify(sign(claims(expires_ms=1), KEY), KEY)
