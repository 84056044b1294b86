"""Which key signs and which keys are trusted: the one place Ratchet resolves signing and verification keys.

Signing (the control plane: Dagster assets and sensors, ``ratchet admin``, ``ratchet init``) --
:func:`signing_key` reads, in order: an explicit key file (``--signing-key-file``, a resource's ``key_file``),
``RATCHET_SIGNING_KEY`` (``@FILE`` or the key itself, PEM or base64), then ``$RATCHET_HOME/keys/signing.key``;
with ``create=True`` (the embedded default) it makes that file when nothing is configured.

Trust by configuration (gateways, auditors) -- :func:`root_public_keys`: ``signing.pub`` in the home, else the
signing key's public half. What is trusted *now* follows from the control DB's signed key history
(``ratchet_core.key_history``: :func:`~ratchet_core.key_history.trusted_keys`, the keyring), which builds on this
module; rotating a key re-signs the current manifest too (``ratchet_assets.release.key_rotation``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ratchet_stats.keys import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
    generate_private_key,
    load_private_key,
    load_private_key_file,
    load_public_key,
    public_key_pem,
    save_private_key,
)

if TYPE_CHECKING:
    from ratchet_core.settings import Settings

log = logging.getLogger(__name__)

_NO_KEY = "run `ratchet init` or set RATCHET_SIGNING_KEY"


class KeyTrustError(ValueError):
    """No usable key, or a key the control DB does not trust; the message says what to do next."""


# ---------------------------------------------------------------------------------------------------------------
# Resolution from the settings.


@dataclass(frozen=True)
class SigningKeySource:
    """Where the signing key came from: ``file`` (a path) or ``setting`` (RATCHET_SIGNING_KEY holds the key)."""

    kind: str
    path: Path | None = None

    def describe(self) -> str:
        return str(self.path) if self.path is not None else "RATCHET_SIGNING_KEY"


def signing_key_source(settings: Settings, key_file: str | Path | None = None) -> SigningKeySource:
    """Where :func:`signing_key` reads from (without reading it)."""
    if key_file:
        return SigningKeySource("file", Path(key_file).expanduser())
    spec = settings.signing_key.strip()
    if spec.startswith("@"):
        return SigningKeySource("file", Path(spec[1:]).expanduser())
    if spec:
        return SigningKeySource("setting")
    return SigningKeySource("file", settings.signing_key_path)


def signing_key(
    settings: Settings, key_file: str | Path | None = None, *, create: bool = False
) -> Ed25519PrivateKey:
    """The control plane's Ed25519 private key (order in the module docstring).

    ``create``: when the resolved file does not exist, make a new key there (0600) and log it -- the embedded
    default's first run. Otherwise a missing key is a :class:`KeyTrustError` that says how to make one.
    """
    source = signing_key_source(settings, key_file)
    if source.kind == "setting":
        try:
            return load_private_key(settings.signing_key)
        except ValueError as exc:
            raise KeyTrustError(f"RATCHET_SIGNING_KEY: {exc}") from None
    path = source.path
    assert path is not None
    if path.exists():
        try:
            return load_private_key_file(path)
        except ValueError as exc:
            raise KeyTrustError(str(exc)) from None
    if not create:
        raise KeyTrustError(f"no signing key at {path}: {_NO_KEY}")
    key = generate_private_key()
    save_private_key(key, path)
    public = public_key_path(settings)
    if path == settings.signing_key_path and not public.exists():
        # what `ratchet init` writes beside it: the `--key` an auditor verifies what this key signs with
        public.write_text(public_key_pem(key.public_key()))
    log.warning("created a new signing key at %s (embedded default); keep it: signatures depend on it", path)
    return key


def public_key_path(settings: Settings) -> Path:
    """``$RATCHET_HOME/keys/signing.pub``: the public key ``ratchet init`` writes for gateways and auditors."""
    return settings.signing_key_path.with_name("signing.pub")


def keyring_path(settings: Settings) -> Path:
    """``$RATCHET_HOME/keys/keyring.pem``: every key the history ever trusted (written by key rotation)."""
    return settings.signing_key_path.with_name("keyring.pem")


def root_public_keys(settings: Settings) -> list[Ed25519PublicKey]:
    """The keys a gateway trusts by configuration: ``signing.pub`` in the home, else the signing key's public half.

    Empty (and a warning that never echoes key material) when neither is readable: every manifest is then rejected.
    """
    pub = public_key_path(settings)
    try:
        if pub.exists():
            return [load_public_key(pub.read_bytes())]
        return [signing_key(settings).public_key()]
    except (ValueError, OSError) as exc:
        reason = "no key configured" if "no signing key" in str(exc) else type(exc).__name__
        log.warning("cannot derive the manifest public key (%s); every manifest will be rejected", reason)
        return []


def as_key_list(public_keys: Any) -> list[Any]:
    """``None`` -> ``[]``, one key -> ``[key]``, a list or tuple -> a list."""
    if public_keys is None:
        return []
    if isinstance(public_keys, list | tuple):
        return list(public_keys)
    return [public_keys]
