"""A version is its content (``ratchet_assets.release.content``): a night whose adapter equals an existing version's
re-certifies that version (a new certificate, chained to its earlier one) and starts no rollout."""

from __future__ import annotations

from ratchet_assets.release import registry
from ratchet_assets.release.content import content_digest, existing_version, record_content
from ratchet_assets.release.control import release_tick
from ratchet_core import manifest as mf
from ratchet_core.layout import ArtifactLayout
from tests.evidence.certificates import sign_certificate

from .conftest import write_pairs


def _walk_to_live(engine, key, tmp_path, version):
    r = release_tick(engine, key, tmp_path / "lake", tmp_path / "artifacts", None)
    write_pairs(tmp_path / "lake", "2026-01-02", 1, version, "tickets", [False] * 600)
    for _ in range(4):
        r = release_tick(engine, key, tmp_path / "lake", tmp_path / "artifacts", r.state)
    m, _ = mf.latest_verified(engine, key.public_key())
    assert (m.task("tickets").stage, m.task("tickets").version) == ("live", version)
    return r, m.sequence


def test_a_version_identical_to_live_is_recertified_and_not_released_again(engine, key, tmp_path):
    art = tmp_path / "artifacts"
    layout = ArtifactLayout(art)
    sign_certificate(art, key, "v1-aaa", "tickets", correct=300, n=300, day="2026-01-01")
    r, sequence = _walk_to_live(engine, key, tmp_path, "v1-aaa")

    # Night 2's adapter has v1's content: the night names it v1-aaa and writes a second certificate beside the first.
    second = layout.night_certificate("v1-aaa", "2026-01-02")
    assert second.name == "v1-aaa@2026-01-02.dsse.json"
    assert layout.night_certificate("v1-aaa", "2026-01-01") == layout.certificate(
        "v1-aaa"
    )  # a rerun: same file
    sign_certificate(art, key, "v1-aaa", "tickets", correct=299, n=300, day="2026-01-02", path=second)

    r = release_tick(engine, key, tmp_path / "lake", tmp_path / "artifacts", r.state)
    assert any("re-certified on 2026-01-02" in n for n in r.notes), r.notes
    m, _ = mf.latest_verified(engine, key.public_key())
    assert m.sequence == sequence  # nothing published: no rollout
    assert (m.task("tickets").stage, m.task("tickets").version) == ("live", "v1-aaa")
    rows = [x for x in registry.list_versions(engine) if x["version"] == "v1-aaa"]
    assert [(x["status"], x["certificate_path"]) for x in rows] == [("live", "certificates/" + second.name)]
    certs = registry.certificates_of(engine, "v1-aaa")
    assert [c["day"] for c in certs] == ["2026-01-01", "2026-01-02"]
    assert certs[0]["previous_digest"] == "" and certs[1]["previous_digest"] == certs[0]["digest"]


def test_the_same_content_is_the_same_version_whatever_night_made_it():
    record = {
        "version": "v1-abc",
        "adapter_sha256": "a" * 64,
        "base": {"sha256": "b" * 64, "chat_template_sha256": "c" * 64},
        "config_hash": "d" * 64,
    }
    same = content_digest("a" * 64, "b" * 64, "c" * 64, "d" * 64)
    assert record_content(record) == same
    known = [("v1-abc", same), ("v2-abc", same)]
    assert existing_version(known, same) == "v1-abc"  # the oldest name
    for changed in (("e" * 64, "b" * 64, "c" * 64, "d" * 64), ("a" * 64, "b" * 64, "c" * 64, "e" * 64)):
        assert (
            existing_version(known, content_digest(*changed)) is None
        )  # other weights or config: a new version
