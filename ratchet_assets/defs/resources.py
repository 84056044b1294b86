"""Resources every night asset shares (H7/H8's assets use the same keys).

- ``paths``: ``RatchetPaths`` — lake (folder or fsspec URL), artifacts and home folders (default:
  ``ratchet_core.settings``);
- ``control_db``: ``ControlDB`` — SQLAlchemy engine of the control DB (effect ledger, erasures, manifests);
- ``signer``: ``Signer`` — the control plane's Ed25519 key (``RATCHET_SIGNING_KEY`` or the key file
  ``$RATCHET_HOME/keys/signing.key``, created with a log line when absent in the embedded default);
- ``night``: ``NightConfig`` — golden share and salt, certification target, training window.

Tests replace them with instances rooted in ``tmp_path`` (``dg.materialize(..., resources=night_resources(...))``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import dagster as dg
from sqlalchemy.engine import Engine

from ratchet_core.control_db import make_engine
from ratchet_core.lake import lake_location
from ratchet_core.settings import Settings, load_settings

log = logging.getLogger(__name__)


def _settings() -> Settings:
    return load_settings()


class RatchetPaths(dg.ConfigurableResource):
    """Where the lake (a folder or an fsspec URL, ``ratchet_core.lake``) and the artifacts (a local folder) live;
    empty = the settings' default."""

    home: str = ""
    lake: str = ""
    artifacts: str = ""

    def home_path(self) -> Path:
        return Path(self.home) if self.home else _settings().home

    def lake_root(self) -> str | Path:
        """A ``Path`` for a folder, the URL itself for ``s3://...`` etc. (read it with ``ratchet_core.lake.Lake``)."""
        if self.lake:
            return lake_location(self.lake)
        if self.home:
            return Path(self.home) / "lake"
        return lake_location(_settings().lake_root)

    def artifacts_root(self) -> Path:
        if self.artifacts:
            return Path(self.artifacts)
        if self.home:
            return Path(self.home) / "artifacts"
        return Path(_settings().artifacts_root)


class ControlDB(dg.ConfigurableResource):
    """The control DB (SQLite WAL by default, any SQLAlchemy URL at scale)."""

    url: str = ""

    def resolved_url(self) -> str:
        return self.url or _settings().control_db_url

    def engine(self) -> Engine:
        return make_engine(self.resolved_url())

    def effects(self) -> Any:
        from ratchet_assets.effects import EffectLedger

        return EffectLedger(self.engine())


class Signer(dg.ConfigurableResource):
    """The control plane's signing key. ``key``: base64/PEM text; ``key_file``: a path; else the settings."""

    key: str = ""
    key_file: str = ""
    create_if_missing: bool = True

    def private_key(self) -> Any:
        from ratchet_stats.keys import (
            generate_private_key,
            load_private_key,
            load_private_key_file,
            save_private_key,
        )

        if self.key:
            return load_private_key(self.key)
        if self.key_file:
            path = Path(self.key_file)
        else:
            settings = _settings()
            if settings.signing_key.startswith("@"):
                path = Path(settings.signing_key[1:])
            elif settings.signing_key:
                return load_private_key(settings.signing_key)
            else:
                path = settings.signing_key_path
        if path.exists():
            return load_private_key_file(path)
        if not self.create_if_missing:
            raise FileNotFoundError(
                f"no signing key at {path}: run `ratchet init` or set RATCHET_SIGNING_KEY"
            )
        key = generate_private_key()
        path.parent.mkdir(parents=True, exist_ok=True)
        save_private_key(key, path)
        log.warning(
            "created a new signing key at %s (embedded default); keep it: signatures depend on it", path
        )
        return key

    def public_key(self) -> Any:
        return self.private_key().public_key()

    def key_id(self) -> str:
        from ratchet_stats.keys import key_id

        return key_id(self.public_key())


class NightConfig(dg.ConfigurableResource):
    """Knobs of the night. Changing ``golden_salt`` or ``golden_share`` only affects keys not yet assigned."""

    golden_share: float = 0.2
    golden_salt: str = "ratchet-golden-v1"
    certify_target: float = 0.95
    certify_delta: float = 0.05
    window_days: int = 7
    late_grace_minutes: float = 60.0


def night_resources(
    home: str | Path | None = None,
    control_db_url: str = "",
    signing_key: str = "",
    **night: Any,
) -> dict[str, Any]:
    """The resource dict for ``dg.materialize`` / ``Definitions``; everything under ``home`` when given."""
    home_s = str(home) if home else ""
    if home and not control_db_url:
        control_db_url = f"sqlite:///{(Path(home) / 'control.db').as_posix()}"
    key_file = str(Path(home) / "keys" / "signing.key") if home and not signing_key else ""
    return {
        "paths": RatchetPaths(home=home_s),
        "control_db": ControlDB(url=control_db_url),
        "signer": Signer(key=signing_key, key_file=key_file),
        "night": NightConfig(**night),
    }


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(resources=night_resources())
