"""Can vLLM load this adapter onto that base? The adapter reconciler asks before it loads into a vLLM endpoint.

:func:`vllm_compatible` checks, from the files alone (nothing is loaded), what vLLM checks when a LoRA adapter is
loaded at run time (``POST /v1/load_lora_adapter``), plus the base identity vLLM does not check:

- LoRA target modules vLLM supports for the base's architecture (:data:`VLLM_LORA_MODULES`, by ``model_type``
  in the base's ``config.json``). vLLM fuses ``q_proj``/``k_proj``/``v_proj`` into ``qkv_proj`` and
  ``gate_proj``/``up_proj`` into ``gate_up_proj`` (``packed_modules_mapping`` of ``Qwen2ForCausalLM`` and
  ``LlamaForCausalLM``) and supports LoRA on those and on ``o_proj`` and ``down_proj`` (their
  ``supported_lora_modules``); an adapter naming any other module is refused at load ("expected target modules
  in ... but received ..."; vLLM compares the last part of each module's name, as here: peft may list
  ``model.layers.0.mlp.down_proj``). Ratchet's trainer targets exactly these for a real base (``all-linear``);
- no ``modules_to_save`` ("vLLM only supports modules_to_save being None", ``vllm/lora/peft_helper.py``): the
  demo base's adapters carry their trained embeddings and head, so they load into Ratchet's student server only;
- no DoRA, no bias (the same helper's ``validate_legal``, with vLLM's default ``bias_enabled`` off);
- rank ``r`` at most the endpoint's ``--max-lora-rank`` (the setting ``RATCHET_STUDENT_MAX_LORA_RANK``);
- the base it was trained on is this base: the adapter's ``ratchet_train.json`` names the base's file digest and
  chat template digest (``ratchet_core.student_model.base_identity``); another base or another template means
  the adapter would be served prompts it was never trained on.

The answer is :class:`Compatibility`: ``ok``, or the ``reasons`` it is not, each saying what to do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ratchet_core.chat_encoding import TRAIN_META_FILE

_PROJECTIONS = frozenset({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})
# model_type -> the peft module names vLLM applies LoRA to for it (module docstring).
VLLM_LORA_MODULES: dict[str, frozenset[str]] = {"qwen2": _PROJECTIONS, "llama": _PROJECTIONS}


@dataclass
class Compatibility:
    reasons: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.reasons

    def __str__(self) -> str:
        return "loadable by vLLM" if self.ok else "not loadable by vLLM: " + "; ".join(self.reasons)


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def vllm_compatible(adapter_dir: str | Path, base: str | Path, max_rank: int) -> Compatibility:
    """Whether vLLM serving the base at `base` with ``--max-lora-rank max_rank`` can load the adapter in
    `adapter_dir` and serve it the prompts it was trained on (module docstring)."""
    from ratchet_core.student_model import base_identity

    adapter, base = Path(adapter_dir), Path(base)
    out = Compatibility()
    config = _json(adapter / "adapter_config.json")
    if not config:
        out.reasons.append(f"no readable adapter_config.json in {adapter}")
        return out
    model_type = _json(base / "config.json").get("model_type", "")
    supported = VLLM_LORA_MODULES.get(model_type)
    targets = config.get("target_modules")
    if supported is None:
        out.reasons.append(
            f"base model_type {model_type or '?'!r} has no table of the LoRA modules vLLM supports in Ratchet "
            f"(known: {', '.join(sorted(VLLM_LORA_MODULES))}); add one to VLLM_LORA_MODULES from vLLM's model code"
        )
    elif not isinstance(targets, list):
        out.reasons.append(f"target_modules is {targets!r}, not a list of module names vLLM can check")
    elif unknown := sorted({str(t).rsplit(".", 1)[-1] for t in targets} - supported):
        out.reasons.append(
            f"LoRA on {', '.join(unknown)}: vLLM supports {', '.join(sorted(supported))} for {model_type}; "
            "train with target_modules among those"
        )
    if config.get("modules_to_save"):
        out.reasons.append(
            f"it carries fully trained {', '.join(config['modules_to_save'])} (modules_to_save), which vLLM does "
            "not load: an adapter of the demo base is for Ratchet's student server only"
        )
    if config.get("use_dora"):
        out.reasons.append("it is a DoRA adapter, which vLLM does not load")
    if config.get("bias", "none") != "none":
        out.reasons.append(
            f"it trains biases (bias={config['bias']!r}), which vLLM loads only with bias enabled"
        )
    rank = config.get("r")
    if not isinstance(rank, int) or rank > max_rank:
        out.reasons.append(
            f"rank {rank} is above the endpoint's --max-lora-rank {max_rank} (RATCHET_STUDENT_MAX_LORA_RANK): "
            "serve with a larger --max-lora-rank or train a smaller rank"
        )
    trained_on = _json(adapter / TRAIN_META_FILE).get("base") or {}
    try:
        identity = base_identity(base)
    except FileNotFoundError as exc:
        out.reasons.append(f"the base it should be served on is not here: {exc}")
        return out
    if not trained_on:
        out.reasons.append(f"no {TRAIN_META_FILE} naming the base it was trained on")
    elif trained_on.get("sha256") != identity["sha256"]:
        out.reasons.append(
            f"it was trained on base {trained_on.get('name')} ({str(trained_on.get('sha256'))[:12]}), not on "
            f"{identity['name']} ({identity['sha256'][:12]}) that the endpoint serves"
        )
    elif trained_on.get("chat_template_sha256", "") != identity["chat_template_sha256"]:
        out.reasons.append(
            "it was trained with another chat template than the base's: its prompts would differ"
        )
    return out
