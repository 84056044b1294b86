"""The training process reaches for nothing outside the machine: a child whose sockets refuse (and report) every
address but loopback, with no HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE of its own, trains a cold night's adapter and
then a warm one from it through the training job's own entry (``train_job.run_training``). peft looks the base's
config up on the Hub by the base's name when it saves an adapter trained from a parent; ``ratchet_core`` runs the
Hugging Face libraries offline unless the operator says otherwise, and the child reports no attempt."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ratchet_core.student_model import ensure_demo_base
from tests.network_guard import GUARD_PRELUDE

pytestmark = pytest.mark.slow  # a fresh process that imports torch and trains twice (a few steps each)

NIGHTS = """
import dataclasses, json, sys
from ratchet_assets.night.adapter import NIGHT_TRAINING
from ratchet_assets.night.train_job import run_training
base, rows, out = sys.argv[1:4]
config = dataclasses.replace(NIGHT_TRAINING, min_steps=2, max_epochs=1, validation_share=0.0, refit=False)
for name, init in (("cold", None), ("warm", out + "/cold")):
    extras = {"base_path": base, "train_jsonl": rows, "out_dir": f"{out}/{name}",
              "result_path": f"{out}/{name}.json", "config": {**config.to_dict(), "start": name}}
    if init:
        extras["init_adapter"] = init
    run_training(extras, lambda line: None)
    print(name, "trained", flush=True)
"""


def test_a_cold_and_a_warm_training_try_no_network(tmp_path) -> None:
    base = ensure_demo_base(tmp_path / "base")
    rows = tmp_path / "train.jsonl"
    lines = [
        {
            "messages": [
                {"role": "user", "content": f"refund order {i}"},
                {"role": "assistant", "content": "refund"},
            ]
        }
        for i in range(6)
    ]
    rows.write_text("".join(json.dumps(line) + "\n" for line in lines))
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env["HOME"] = str(tmp_path)  # no cache of an earlier run to hide a lookup
    done = subprocess.run(
        [sys.executable, "-c", GUARD_PRELUDE + NIGHTS, str(base), str(rows), str(tmp_path / "out")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["cold", "trained", "warm", "trained"]
    assert "NETWORK ATTEMPT" not in done.stderr, done.stderr[-3000:]
    assert (tmp_path / "out" / "warm" / "adapter_model.safetensors").exists()
