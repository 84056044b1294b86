"""A five-label classification task the project has never seen (not a built-in workload): ``moods``.

Used by the per-task night test, the import test and the learner measurement (tests/night/measure_learner.py).
Like ``tickets`` the label is decided by keywords, but the labels, phrasings and slots are new. Only the tests know
it: to Ratchet it is just a task name.

``moods_night``: the fixture both night tests share (tests/night/test_new_task_night.py,
tests/governance/test_import_certifies.py): a signed test home, ``ratchet admin task set`` for ``moods``, and the real
night (traffic -> examples -> golden_split -> training_set -> lora_adapter -> evaluation_certificate, Dagster assets,
a real LoRA training on the demo base with the night's own defaults, the real student server on loopback).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ratchet_core.workloads.base import Intent, TaskDescription, Workload

LABELS = ("praise", "complaint", "question", "cancel", "urgent")

MOODS = TaskDescription(
    name="moods",
    comparator="label",
    description="Customer note -> one of praise, complaint, question, cancel, urgent.",
    system_prompt="Label the customer note as one of: " + ", ".join(LABELS) + ". Answer with the label only.",
    intents=(
        Intent(
            "praise",
            (
                "I love the {product}, great work!",
                "Thanks, the {product} is wonderful.",
                "Your team was fantastic with my order {order_id}.",
                "Great service in {city}, I love it.",
            ),
            ("love", "great", "wonderful", "fantastic"),
            "praise",
        ),
        Intent(
            "complaint",
            (
                "The {product} is awful and noisy.",
                "I am unhappy with order {order_id}, it was terrible.",
                "Terrible experience at the {city} store.",
                "The {product} arrived dirty, awful quality.",
            ),
            ("awful", "terrible", "unhappy", "dirty"),
            "complaint",
        ),
        Intent(
            "question",
            (
                "Does the {product} come in another colour?",
                "What sizes does the {product} have?",
                "Which store in {city} stocks the {product}?",
                "Does order {order_id} include a manual?",
            ),
            ("does", "what", "which"),
            "question",
        ),
        Intent(
            "cancel",
            (
                "Cancel order {order_id} please.",
                "Please cancel my {product} order.",
                "Stop my order {order_id}, cancel it.",
                "I need to cancel, write to {email}.",
            ),
            ("cancel", "stop"),
            "cancel",
        ),
        Intent(
            "urgent",
            (
                "Urgent: the {product} is smoking, call {phone} now!",
                "Emergency with order {order_id}, respond immediately.",
                "This is urgent, the {product} sparked.",
                "Immediately help, the {product} is leaking in {city}.",
            ),
            ("urgent", "emergency", "immediately", "now"),
            "urgent",
        ),
    ),
    fallback_answer="question",
    slots={
        "product": ("heater", "blender", "backpack", "tent", "drone", "monitor"),
        "city": ("Porto", "Dallas", "York", "Kyoto", "Accra", "Boise"),
    },
    prefixes=("", "", "Hey. ", "Hello, "),
    suffixes=("", "", " Cheers.", " Thanks!"),
)

MOODS_WORKLOAD = Workload("moods", (MOODS,))


@dataclass
class NightRun:
    """What one night of ``moods_night`` produced."""

    result: Any  # dagster's ExecuteInProcessResult
    materialised: set[str]
    cert_file: Path
    predicate: dict
    section: dict  # predicate["tasks"]["moods"]

    def metadata(self, asset: str) -> dict:
        return {
            e.asset_key.to_user_string(): e.materialization.metadata
            for e in self.result.get_asset_materialization_events()
        }[asset]


@pytest.fixture
def moods_night(tmp_path: Path) -> Callable[..., NightRun]:
    """``run(day, policy=[...admin task set options], before=callable(home), training=None)``: a signed home at
    ``tmp_path/home`` (``run.home``); ``before(home)`` writes the day's data; the policy is set with ``ratchet admin
    task set moods``; then the night runs with the ``lora_adapter`` defaults (one torch thread;
    ``tests.night.nights``), ``training`` (``lora_adapter`` config) over them."""
    from ratchet_stats.keys import generate_private_key, public_key_pem, save_private_key

    home = tmp_path / "home"
    key = generate_private_key()
    save_private_key(key, home / "keys" / "signing.key")
    (home / "keys" / "signing.pub").write_text(public_key_pem(key.public_key()))

    def run(
        day: str, policy: list[str], before: Callable[[Path], None], training: dict[str, Any] | None = None
    ) -> NightRun:
        from tests.night.nights import demo_base_of, run_night, set_task_policy

        before(home)
        set_task_policy(home, "moods", policy)
        result = run_night(home, day, base=demo_base_of(home), training=training)
        done = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
        assert {"golden_split", "training_set", "lora_adapter", "evaluation_certificate"} <= done, done
        [cert_file] = (home / "artifacts" / "certificates").glob("*.dsse.json")
        predicate = json.loads(base64.b64decode(json.loads(cert_file.read_text())["payload"]))["predicate"]
        return NightRun(result, done, cert_file, predicate, predicate["tasks"]["moods"])

    run.home = home  # type: ignore[attr-defined]
    return run
