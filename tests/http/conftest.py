"""Fixtures of the identity tests: a stand-in identity provider, its JWKS on loopback, and a
real gateway process that takes both API keys and the provider's tokens."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.testing import gateway
from tests.helpers import starts_processes
from tests.http.helpers import IdentityGateway, Issuer, JwksServer, identity_project


@pytest.fixture
def issuer() -> Issuer:
    made = Issuer()
    made.add_key("k1")
    return made


@pytest.fixture
def jwks_server(issuer: Issuer) -> Iterator[JwksServer]:
    with JwksServer(issuer).running() as server:
        yield server


@pytest.fixture(scope="module")
@starts_processes
def identity_gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IdentityGateway]:
    root = tmp_path_factory.mktemp("identity")
    issuer = Issuer()
    issuer.add_key("k1")
    with JwksServer(issuer).running() as jwks:
        config = identity_project(root, f"sqlite:///{root}/toolgate.db", jwks.url)
        with gateway(config) as url:
            yield IdentityGateway(url, config, issuer, jwks)
