"""lora_adapter honours the signed manifest's training_paused flag: no launch, nothing downstream."""

from __future__ import annotations

import pytest

from tests.night.nights import materialize_night

DAY = "2026-01-03"
pytestmark = pytest.mark.slow  # a Dagster run of the upstream night: ~10 s idle, more on a loaded machine


def test_training_paused_skips_the_adapter_and_everything_after_it(tmp_path):
    from ratchet_assets.effects import EffectLedger
    from ratchet_assets.night.fixtures import write_day
    from ratchet_core.control_db import ensure_schema, make_engine
    from ratchet_stats.keys import generate_private_key, save_private_key
    from tests.evidence.manifests import write_signed_manifest

    home = tmp_path / "home"
    key = generate_private_key()
    save_private_key(key, home / "keys" / "signing.key")
    write_day(home / "lake", DAY, 80, seed=3, workload="tickets", student_share=0.0)
    engine = make_engine(f"sqlite:///{(home / 'control.db').as_posix()}")
    ensure_schema(engine)
    write_signed_manifest(engine, key, flags={"training_paused": True}, reason="pause training for the test")

    result = materialize_night(home, DAY, student_url="http://127.0.0.1:9")  # never asked: nothing to certify
    assert result.success
    done = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert "training_set" in done and "lora_adapter" not in done and "evaluation_certificate" not in done
    assert EffectLedger(engine).list_effects(effect_type="training.launch") == []
    assert not (home / "artifacts" / "adapters").exists()
