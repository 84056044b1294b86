"""`ratchet init`: create $RATCHET_HOME with a signing key, its public key, the server pepper and the student
server key.

Idempotent: existing keys are kept (a new key would orphan every signature made with the old one).
The private key file is 0600; the public key (`signing.pub`, PEM) is what gateways and auditors hold. The key is
recorded as the first trusted key of the control DB's key history when that history is empty
(``ratchet_core.keys``); change it later with ``ratchet admin keys rotate``.

The student server key (``keys/student.key``, 0600, random) is the bearer key ``ratchet student-server`` requires
and the gateway sends (``RATCHET_STUDENT_API_KEY`` overrides it; ``ratchet_core.home_files``). Everything under
the home is private to the user: folders 0700, files 0600, fixed on every run for a home made earlier.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import click
import sqlalchemy as sa

from ratchet_core.home_files import ensure_student_key, private_dir, private_umask, tighten
from ratchet_core.settings import load_settings

log = logging.getLogger(__name__)


def ensure_home(home: Path | None = None) -> dict[str, str]:
    """Create the home layout and keys if absent, trust the key in the control DB; return paths and key id."""
    from ratchet_core.api_keys import load_pepper
    from ratchet_core.control_db import make_engine
    from ratchet_core.key_history import ensure_anchor
    from ratchet_core.keys import public_key_path, signing_key, signing_key_source
    from ratchet_stats.keys import key_id, public_key_pem

    settings = load_settings(**({"home": home} if home else {}))
    home = settings.home
    for sub in ("keys", "ledger", "lake", "artifacts", "models"):
        private_dir(home / sub)
    student_key, _ = ensure_student_key(home)
    source = signing_key_source(settings)
    created = source.path is not None and not source.path.exists()
    private = signing_key(settings, create=True)
    pub_path = public_key_path(settings)
    pem = public_key_pem(private.public_key())
    if not pub_path.exists() or pub_path.read_text() != pem:
        pub_path.write_text(pem)
    pepper_path = home / "keys" / "pepper"
    load_pepper("", home)  # makes the file when absent, as the gateway would on its first start
    # The control DB's key history starts with this key (a no-op once it has a history).
    try:
        with private_umask():  # the embedded SQLite control DB is created under the home
            trust = ensure_anchor(make_engine(settings.control_db_url), private, "ratchet init")
        trusted = str(key_id(private) in trust.trusted).lower()
    except sa.exc.OperationalError as exc:  # e.g. Postgres not up yet: the first publish records the key
        log.warning("control DB not reachable (%s): the key is trusted on first publish", type(exc).__name__)
        trusted = "unknown"
    tighten(home)
    return {
        "home": str(home),
        "signing_key": source.describe(),
        "public_key": str(pub_path),
        "key_id": key_id(private.public_key()),
        "created_key": str(created).lower(),
        "trusted": trusted,
        "pepper": str(pepper_path),
        "student_key": str(student_key),
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
        click.echo(f"student key:  {info['student_key']}  (the student server and the gateway use it)")
        if info["trusted"] == "false":
            click.echo(
                "warning: the control DB trusts other keys, so manifests signed with this key will be refused; "
                "see `ratchet admin keys list`",
                err=True,
            )
