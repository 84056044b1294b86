"""The demo base is deterministic, carries its pretrained weights (it copies; the random weights it was pretrained
from do not), refuses other weights, loads with the Auto classes, and its identity follows its files."""

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


def _copies(base, items: int = 30) -> int:
    """Of `items` held-out strings of random letters and digits in which a 16-character segment comes back, how
    many the base (no adapter) continues exactly: the last 12 characters of the second occurrence, each the argmax
    after what came before it (greedy decoding). Nothing of the pretraining corpus's generator is used."""
    import random
    import string

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    rng, chars = random.Random(5), string.ascii_letters + string.digits

    def noise(n: int) -> str:
        return "".join(rng.choice(chars) for _ in range(n))

    right = 0
    for _ in range(items):
        segment = noise(16)
        ids = tok(f"{noise(12)} {segment} {noise(12)} {segment}", add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            pred = model(torch.tensor([ids])).logits[0].argmax(-1).tolist()
        right += all(pred[i - 1] == ids[i] for i in range(len(ids) - 12, len(ids)))
    return right


def test_the_demo_base_is_pretrained_to_copy_and_its_random_start_is_not(demo_base, tmp_path):
    """The shipped weights are what makes `extract` and `tools` learnable in a night (README, "The demo base,
    pretrained"): copying a span seen earlier. Measured 26/30 for the pretrained weights, 0/30 for the random ones."""
    random_base = build_demo_base(tmp_path / "random", pretrained=False)
    assert base_identity(random_base)["sha256"] != base_identity(demo_base)["sha256"]
    assert _copies(demo_base) >= 20
    assert _copies(random_base) <= 2


def test_only_a_random_demo_base_trains_its_embeddings_and_head(demo_base, tmp_path):
    """The pretrained demo base trains LoRA alone (its embeddings and head already know bytes); a demo base with
    random weights, as a home built before them keeps, also trains embeddings and head; a config that names its
    modules is followed either way."""
    from ratchet_assets.night.lora_trainer import (
        DEMO_MODULES_TO_SAVE,
        LoraTrainConfig,
        resolve_modules_to_save,
    )
    from ratchet_core.student_model import is_pretrained_demo_base

    random_base = build_demo_base(tmp_path / "random", pretrained=False)
    assert is_pretrained_demo_base(demo_base) and not is_pretrained_demo_base(random_base)
    assert not is_pretrained_demo_base(tmp_path / "nothing")
    assert resolve_modules_to_save(demo_base, LoraTrainConfig()) is None
    assert resolve_modules_to_save(random_base, LoraTrainConfig()) == DEMO_MODULES_TO_SAVE
    named = LoraTrainConfig(modules_to_save=["lm_head"])
    assert resolve_modules_to_save(demo_base, named) == ["lm_head"]
    assert resolve_modules_to_save(random_base, LoraTrainConfig(modules_to_save=[])) is None


def test_a_build_refuses_weights_that_are_not_the_demo_bases(tmp_path, monkeypatch):
    from ratchet_core import student_model

    forged = tmp_path / "demo_base.safetensors"
    forged.write_bytes(student_model.DEMO_WEIGHTS.read_bytes()[:-1] + b" ")
    monkeypatch.setattr(student_model, "DEMO_WEIGHTS", forged)
    with pytest.raises(RuntimeError, match="not the demo base's weights"):
        build_demo_base(tmp_path / "base")
    assert not (tmp_path / "base" / "model.safetensors").exists()


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
