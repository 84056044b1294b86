"""The demo base is deterministic, loads with the Auto classes, and its identity follows its files."""

from __future__ import annotations

import json

import pytest

from ratchet_core.student_model import base_identity, build_demo_base, ensure_demo_base


def test_demo_base_is_deterministic_and_identity_tracks_files(demo_base, tmp_path):
    again = build_demo_base(tmp_path / "again")
    first, second = base_identity(demo_base), base_identity(again)
    assert first["sha256"] == second["sha256"] and first["files"] == second["files"]
    assert {"config.json", "model.safetensors"} <= set(first["files"])
    (again / "config.json").write_text((again / "config.json").read_text().replace("192", "193", 1))
    assert base_identity(again)["sha256"] != first["sha256"]


def test_ensure_does_not_rebuild_an_existing_base(demo_base):
    before = (demo_base / "model.safetensors").stat().st_mtime_ns
    assert ensure_demo_base(demo_base) == demo_base
    assert (demo_base / "model.safetensors").stat().st_mtime_ns == before


def test_demo_base_loads_with_auto_classes(demo_base):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(demo_base)
    model = AutoModelForCausalLM.from_pretrained(demo_base)
    assert model.config.vocab_size == len(tok) == 384
    assert tok.decode(tok("héllo", add_special_tokens=False)["input_ids"]) == "héllo"


def test_identity_names_the_chat_template_and_its_tool_parser(demo_base, tmp_path):
    import hashlib
    import shutil

    from ratchet_core.chat_format import RATCHET_CHAT_TEMPLATE

    identity = base_identity(demo_base)
    assert identity["chat_template_sha256"] == hashlib.sha256(RATCHET_CHAT_TEMPLATE.encode()).hexdigest()
    assert identity["tool_parser"] == "hermes"
    # a demo base built before it carried its template gets it (same weights), and so another identity
    old = tmp_path / "old"
    shutil.copytree(demo_base, old)
    config = json.loads((old / "tokenizer_config.json").read_text())
    del config["chat_template"]
    (old / "tokenizer_config.json").write_text(json.dumps(config))
    stale = base_identity(old)
    assert (stale["chat_template_sha256"], stale["tool_parser"]) == ("", "")
    ensure_demo_base(old)
    assert base_identity(old)["sha256"] == identity["sha256"]


def test_identity_of_a_missing_model_says_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match="RATCHET_STUDENT_BASE_MODEL"):
        base_identity(tmp_path / "nothing")
