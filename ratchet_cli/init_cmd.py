"""`ratchet init`: create $RATCHET_HOME with a signing key, its public key and the server pepper.

Idempotent: existing keys are kept (a new key would orphan every signature made with the old one).
The private key file is 0600; the public key (`signing.pub`, PEM) is what gateways and auditors hold.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import click

from ratchet_core.settings import load_settings


def ensure_home(home: Path | None = None) -> dict[str, str]:
    """Create the home layout and keys if absent; return the paths and the signing key id."""
    from ratchet_stats.keys import (
        generate_private_key,
        key_id,
        load_private_key_file,
        public_key_pem,
        save_private_key,
    )

    settings = load_settings(**({"home": home} if home else {}))
    home = settings.home
    for sub in ("keys", "ledger", "lake", "artifacts", "models"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    key_path = settings.signing_key_path
    created = False
    if settings.signing_key:
        from ratchet_stats.keys import load_private_key

        private = load_private_key(settings.signing_key)
    elif key_path.exists():
        private = load_private_key_file(key_path)
    else:
        private = generate_private_key()
        save_private_key(private, key_path)
        created = True
    pub_path = key_path.with_name("signing.pub")
    pem = public_key_pem(private.public_key())
    if not pub_path.exists() or pub_path.read_text() != (pem if isinstance(pem, str) else pem.decode()):
        pub_path.write_text(pem if isinstance(pem, str) else pem.decode())
    pepper_path = home / "keys" / "pepper"
    if not pepper_path.exists():
        fd = os.open(pepper_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32))
    return {
        "home": str(home),
        "signing_key": str(key_path) if not settings.signing_key else "RATCHET_SIGNING_KEY",
        "public_key": str(pub_path),
        "key_id": key_id(private.public_key()),
        "created_key": str(created).lower(),
        "pepper": str(pepper_path),
    }


@click.command()
@click.option("--home", type=click.Path(path_type=Path), default=None, help="Override RATCHET_HOME.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def init(home: Path | None, as_json: bool) -> None:
    """Create $RATCHET_HOME, a signing key (kept if present), its public key and a server pepper."""
    info = ensure_home(home)
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        click.echo(f"Ratchet home: {info['home']}")
        click.echo(f"signing key:  {info['signing_key']} (key id {info['key_id'][:16]}…)")
        click.echo(f"public key:   {info['public_key']}  <- give this to gateways and auditors")
