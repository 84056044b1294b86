"""Ed25519 signing keys: generate, load, serialise, and name them by key id.

Two text forms are accepted everywhere a key is read:

- PEM: PKCS#8 ``PRIVATE KEY`` / SubjectPublicKeyInfo ``PUBLIC KEY`` (RFC 8410);
- base64 of the raw 32-byte key (RFC 8032 §5.1.5 private seed, §5.1.2 public point encoding).

``key_id(public_key)`` is the lower-case hex SHA-256 of the raw 32-byte public key; DSSE envelopes carry it as
``keyid`` so a verifier holding several keys knows which one to try.

Error messages never contain key material.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import tempfile
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

__all__ = [
    "Ed25519PrivateKey",
    "Ed25519PublicKey",
    "generate_private_key",
    "key_id",
    "load_private_key",
    "load_private_key_file",
    "load_public_key",
    "private_key_b64",
    "private_key_pem",
    "public_key_b64",
    "public_key_pem",
    "public_key_raw",
    "save_private_key",
]

_NEXT = "make one with `ratchet keygen --out FILE` (its public key is printed and saved with --public-out)"


def _text(text_or_bytes: str | bytes, what: str) -> str:
    if isinstance(text_or_bytes, bytes | bytearray | memoryview):
        try:
            return bytes(text_or_bytes).decode("ascii").strip()
        except UnicodeDecodeError:
            raise ValueError(f"{what}: not PEM or base64 text; {_NEXT}") from None
    if isinstance(text_or_bytes, str):
        return text_or_bytes.strip()
    raise TypeError(f"{what}: expected PEM or base64 text, got {type(text_or_bytes).__name__}")


def _raw32(text: str, what: str) -> bytes:
    try:
        raw = base64.b64decode(text.replace("\n", "").replace("\r", ""), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{what}: neither PEM nor base64; {_NEXT}") from None
    if len(raw) != 32:
        raise ValueError(f"{what}: base64 decodes to {len(raw)} bytes, an Ed25519 key is 32; {_NEXT}")
    return raw


def generate_private_key() -> Ed25519PrivateKey:
    """A fresh Ed25519 private key from the operating system's CSPRNG."""
    return Ed25519PrivateKey.generate()


def load_private_key(text_or_bytes: str | bytes) -> Ed25519PrivateKey:
    """Read an Ed25519 private key from unencrypted PKCS#8 PEM or base64 of the raw 32-byte seed."""
    what = "private key"
    text = _text(text_or_bytes, what)
    if text.startswith("-----BEGIN"):
        if "PUBLIC KEY" in text.split("\n", 1)[0]:
            raise ValueError(f"{what}: this is a PUBLIC key; pass the private key file that signs ({_NEXT})")
        try:
            key = serialization.load_pem_private_key(text.encode("ascii"), password=None)
        except (ValueError, TypeError) as exc:
            reason = "it is encrypted" if "encrypted" in str(exc).lower() else "the PEM does not parse"
            raise ValueError(f"{what}: {reason}; {_NEXT}") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError(
                f"{what}: the PEM holds a {type(key).__name__}, Ratchet signs with Ed25519; {_NEXT}"
            )
        return key
    return Ed25519PrivateKey.from_private_bytes(_raw32(text, what))


def load_public_key(text_or_bytes: str | bytes) -> Ed25519PublicKey:
    """Read an Ed25519 public key from SubjectPublicKeyInfo PEM or base64 of the raw 32 bytes."""
    what = "public key"
    text = _text(text_or_bytes, what)
    if text.startswith("-----BEGIN"):
        if "PRIVATE KEY" in text.split("\n", 1)[0]:
            raise ValueError(
                f"{what}: this is a PRIVATE key; verifiers need only the public key (keep it secret)"
            )
        try:
            key = serialization.load_pem_public_key(text.encode("ascii"))
        except (ValueError, TypeError):
            raise ValueError(f"{what}: the PEM does not parse; {_NEXT}") from None
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError(f"{what}: the PEM holds a {type(key).__name__}, Ratchet signs with Ed25519")
        return key
    raw = _raw32(text, what)
    try:
        return Ed25519PublicKey.from_public_bytes(raw)
    except ValueError:
        raise ValueError(f"{what}: 32 bytes that are not an Ed25519 point; {_NEXT}") from None


def public_key_raw(public_key: Ed25519PublicKey | Ed25519PrivateKey) -> bytes:
    """The raw 32-byte encoding of a public key (of the private key's public half when given a private key)."""
    if isinstance(public_key, Ed25519PrivateKey):
        public_key = public_key.public_key()
    if not isinstance(public_key, Ed25519PublicKey):
        raise TypeError(f"expected an Ed25519 public key, got {type(public_key).__name__}")
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def private_key_pem(private_key: Ed25519PrivateKey) -> str:
    """Unencrypted PKCS#8 PEM (RFC 8410). Treat the result as a secret."""
    return private_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode("ascii")


def private_key_b64(private_key: Ed25519PrivateKey) -> str:
    """Base64 of the raw 32-byte seed (fits an environment variable such as RATCHET_SIGNING_KEY). Secret."""
    raw = private_key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    return base64.b64encode(raw).decode("ascii")


def public_key_pem(public_key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
    """SubjectPublicKeyInfo PEM of a public key."""
    if isinstance(public_key, Ed25519PrivateKey):
        public_key = public_key.public_key()
    return public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode("ascii")


def public_key_b64(public_key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
    """Base64 of the raw 32-byte public key."""
    return base64.b64encode(public_key_raw(public_key)).decode("ascii")


def key_id(public_key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
    """Hex SHA-256 of the raw 32-byte public key: the DSSE ``keyid`` of signatures made by this key."""
    return hashlib.sha256(public_key_raw(public_key)).hexdigest()


def save_private_key(private_key: Ed25519PrivateKey, path: str | os.PathLike[str], fmt: str = "pem") -> Path:
    """Write the private key to `path` with mode 0600, atomically (temp file in the same directory, then rename).

    `fmt` is ``"pem"`` (PKCS#8) or ``"base64"`` (raw seed). The file is never readable by others, not even
    for an instant: the temp file is created 0600.
    """
    if fmt not in ("pem", "base64"):
        raise ValueError(f"key format {fmt!r}: use 'pem' or 'base64'")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = private_key_pem(private_key) if fmt == "pem" else private_key_b64(private_key) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)  # mkstemp creates with 0600
    try:
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def load_private_key_file(path: str | os.PathLike[str]) -> Ed25519PrivateKey:
    """Read a private key file written by :func:`save_private_key` (PEM or base64)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ValueError(f"private key file {p} does not exist; {_NEXT}") from None
    try:
        return load_private_key(data)
    except ValueError as exc:
        raise ValueError(f"{p}: {exc}") from None
