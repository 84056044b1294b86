"""Hard tasks get more (``night.step_budget``): each consecutive earlier night whose signed certificate did not
certify a task of tonight's training set doubles the step budget (min_steps, max_epochs), up to 4x together with
the doublings of a run short of steps (``max_extensions``); a certified night, a gap or an unverifiable
certificate stops the walk."""

from __future__ import annotations

import json
from pathlib import Path

from ratchet_assets.night.step_budget import MAX_EPOCHS_FACTOR, MAX_FACTOR, step_budget
from ratchet_core.layout import ArtifactLayout
from ratchet_stats.keys import generate_private_key
from tests.evidence.certificates import sign_certificate


def _night(
    art: Path, key, day: str, version: str, task: str, correct: int, n: int = 100, path: Path | None = None
) -> None:
    pointer = ArtifactLayout(art).adapter_pointer(day)
    pointer.parent.mkdir(parents=True, exist_ok=True)
    pointer.write_text(json.dumps({"version": version}))
    sign_certificate(art, key, version, task, correct, n, day, path=path)


def test_each_night_that_did_not_certify_doubles_the_budget_up_to_the_cap(tmp_path):
    key = generate_private_key()
    art = tmp_path / "art"
    keys = [key.public_key()]
    assert step_budget(art, "2026-01-02", ["tickets"], keys).factor == 1  # no earlier night
    _night(art, key, "2026-01-01", "v1-aa", "tickets", correct=80)  # not certified at 0.9
    one = step_budget(art, "2026-01-02", ["tickets"], keys)
    assert one.factor == 2 and one.nights == [{"day": "2026-01-01", "version": "v1-aa", "tasks": ["tickets"]}]
    config = one.apply({"min_steps": 150, "max_epochs": 8, "lr": 4e-3, "max_extensions": 2})
    # a run short of steps may double its schedule once more: the two together stay within MAX_FACTOR
    assert config == {"min_steps": 300, "max_epochs": 16, "lr": 4e-3, "max_extensions": 1}
    assert one.apply({}) == {
        "min_steps": 300,
        "max_epochs": 24,
        "max_extensions": 1,
    }  # the trainer's defaults
    _night(art, key, "2026-01-02", "v2-bb", "tickets", correct=85)
    _night(art, key, "2026-01-03", "v3-cc", "tickets", correct=86)
    four = step_budget(art, "2026-01-04", ["tickets"], keys)
    assert four.factor == MAX_FACTOR == 4
    assert four.apply({"min_steps": 150, "max_epochs": 8, "max_extensions": 2})["max_extensions"] == 0
    # the floor grows x4, the schedule the learning rate decays over at most x2 (MAX_EPOCHS_FACTOR)
    scaled = four.apply({"min_steps": 150, "max_epochs": 8, "max_extensions": 2})
    assert (scaled["min_steps"], scaled["max_epochs"]) == (600, 8 * MAX_EPOCHS_FACTOR) == (600, 16)
    assert four.apply({"min_steps": 150, "max_epochs": 8, "max_extensions": 0})["max_extensions"] == 0
    # another task's misses are not this set's; a certified night ends the walk
    assert step_budget(art, "2026-01-04", ["extract"], keys).factor == 1
    _night(art, key, "2026-01-04", "v4-dd", "tickets", correct=100)
    assert step_budget(art, "2026-01-05", ["tickets"], keys).factor == 1


def test_a_certificate_the_home_cannot_verify_grows_nothing(tmp_path):
    art = tmp_path / "art"
    stranger = generate_private_key()
    _night(art, stranger, "2026-01-01", "v1-aa", "tickets", correct=10)
    mine = [generate_private_key().public_key()]
    assert step_budget(art, "2026-01-02", ["tickets"], mine).factor == 1
    assert step_budget(art, "2026-01-02", ["tickets"], None).factor == 1  # no keys: the config's budget
    # a forged outcome: the signed bytes changed after signing
    cert = ArtifactLayout(art).certificate("v1-aa")
    envelope = json.loads(cert.read_text())
    envelope["payload"] = envelope["payload"][:-8] + "AAAAAAA="
    cert.write_text(json.dumps(envelope))
    assert step_budget(art, "2026-01-02", ["tickets"], [stranger.public_key()]).factor == 1


def test_a_version_re_certified_by_a_later_night_is_judged_by_that_nights_certificate(tmp_path):
    """Night 1 mints v1 and certifies it; night 2 trains the same weights (the same version) and re-certifies it
    on its own golden set, where it does not certify (``certificates/v1-aa@<day 2>.dsse.json``): night 3's budget
    doubles on night 2's outcome, not on night 1's certificate of the same version."""
    key = generate_private_key()
    art = tmp_path / "art"
    keys = [key.public_key()]
    layout = ArtifactLayout(art)
    _night(art, key, "2026-01-01", "v1-aa", "tickets", correct=100)
    _night(
        art,
        key,
        "2026-01-02",
        "v1-aa",
        "tickets",
        correct=80,
        path=layout.recertificate("v1-aa", "2026-01-02"),
    )
    three = step_budget(art, "2026-01-03", ["tickets"], keys)
    assert three.factor == 2 and three.nights == [
        {"day": "2026-01-02", "version": "v1-aa", "tasks": ["tickets"]}
    ]
    assert step_budget(art, "2026-01-02", ["tickets"], keys).factor == 1  # night 1 certified it
