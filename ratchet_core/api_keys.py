"""Client keys: bearer keys from ``RATCHET_API_KEYS``, kept only as HMAC-SHA256(pepper, secret).

The gateway and the effect gate (``ratchet effects serve``) authenticate clients with the same store.

``RATCHET_API_KEYS`` is ``name:secret,...`` or ``@file`` (one ``name:secret`` a line, ``#`` comments). The pepper
is ``RATCHET_PEPPER`` or the file ``$RATCHET_HOME/keys/pepper`` (created 0600 with 32 random bytes when absent,
the same file ``ratchet init`` writes). A presented key is hashed and compared with every stored digest using
``hmac.compare_digest`` (constant time, and no early exit on the first match), so neither timing nor a leaked
process image reveals a secret. The client's identity is the key's *name*; secrets are never logged or stored.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path


def load_pepper(pepper: str, home: Path) -> bytes:
    """The server pepper: the setting if given, else $RATCHET_HOME/keys/pepper (created 0600 if absent)."""
    if pepper:
        return pepper.encode()
    path = home / "keys" / "pepper"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_hex(32))
        except FileExistsError:  # another worker created it first
            pass
    return path.read_text().strip().encode()


def parse_api_keys(spec: str) -> list[tuple[str, str]]:
    """``name:secret,...`` or ``@file`` -> [(name, secret)]; ValueError naming ``RATCHET_API_KEYS`` and the bad entry
    (never the secret).

    The one check of the setting: the gateway and the effect gate call it at start, ``ratchet config check`` calls
    it too, so what the check accepts starts. Each entry is ``name:secret`` with a name that follows the client
    name rule (``ratchet_core.names``) and a non-empty secret; names and secrets are unique (a secret shared by
    two names would authenticate as whichever came last)."""
    from ratchet_core.names import NameRuleError, check

    spec = spec.strip()
    if spec.startswith("@"):
        path = Path(spec[1:]).expanduser()
        if not path.exists():
            raise ValueError(
                f"RATCHET_API_KEYS: file {path} does not exist; create it with one name:secret a line"
            )
        entries = [ln.strip() for ln in path.read_text().splitlines()]
        entries = [e for e in entries if e and not e.startswith("#")]
    else:
        entries = [e.strip() for e in spec.split(",") if e.strip()]
    out: list[tuple[str, str]] = []
    names: dict[str, int] = {}
    secrets_at: dict[str, int] = {}
    for i, entry in enumerate(entries, 1):
        name, sep, secret = (part.strip() for part in entry.partition(":"))
        if not sep or not name or not secret:
            what = "has no ':'" if not sep else "has an empty name" if not name else "has an empty secret"
            raise ValueError(f"RATCHET_API_KEYS: entry {i} {what}: write name:secret (e.g. app1:sk-abc...)")
        try:
            check("client", name)
        except NameRuleError as exc:
            raise ValueError(f"RATCHET_API_KEYS: entry {i}: {exc.message}") from None
        if name in names:
            raise ValueError(f"RATCHET_API_KEYS: entries {names[name]} and {i} both name client {name!r}")
        if secret in secrets_at:
            raise ValueError(
                f"RATCHET_API_KEYS: entries {secrets_at[secret]} and {i} share a secret; give each client its own"
            )
        names[name], secrets_at[secret] = i, i
        out.append((name, secret))
    return out


class KeyStore:
    """Digests of the configured client keys; ``authenticate`` returns the client name or None."""

    def __init__(self, keys: list[tuple[str, str]], pepper: bytes):
        self._pepper = pepper
        self._digests = [(name, self._digest(secret)) for name, secret in keys]

    def _digest(self, secret: str) -> bytes:
        return hmac.new(self._pepper, secret.encode(), hashlib.sha256).digest()

    @property
    def empty(self) -> bool:
        return not self._digests

    def authenticate(self, authorization: str | None) -> str | None:
        """The client named by an ``Authorization: Bearer <key>`` header value, or None."""
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return None
        return self.authenticate_token(token)

    def authenticate_token(self, token: str | None) -> str | None:
        """The client whose key is `token`, or None."""
        token = (token or "").strip()
        if not token or not self._digests:
            return None
        presented = self._digest(token)
        found = None
        for name, digest in self._digests:  # no early exit: time does not depend on which key matched
            if hmac.compare_digest(presented, digest):
                found = name
        return found
