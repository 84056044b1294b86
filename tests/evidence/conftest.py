"""Fixtures for the evidence tests (canonical JSON, keys, DSSE, Merkle, certificates, committed training sets,
keygen/verify CLI)."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


@pytest.fixture(scope="session")
def signing_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture(scope="session")
def other_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture(scope="session")
def public_b64(signing_key: Ed25519PrivateKey) -> str:
    from ratchet_stats.keys import public_key_b64

    return public_key_b64(signing_key.public_key())
