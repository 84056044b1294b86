"""The student's base model: the demo base, and the identity (hashes) of any base on disk.

The demo base is NOT a language model. It is a 2-layer Llama (about a million weights) with the file-free ByT5 byte
tokenizer, small enough to fine-tune on two CPU cores in a minute. Its weights (``demo_base.safetensors``, beside
this module) were pretrained on this project's machine from the random weights of ``DEMO_SEED``, on a generic
synthetic corpus generated from a seed (``benchmarks/pretrain_demo_base.py``: made-up words, codes, numbers, keys
and tools; nothing of the built-in workloads): it has learnt to find an earlier occurrence and copy what followed
it, and the shape of JSON objects and tool calls, and knows no task. The random base it replaced never learnt to
copy a value from a request into an answer, so `extract` and `tools` answered 0 rows exactly after any night; the
pretrained one answers most of them after one night (README, "The demo base, pretrained"). The LoRA adapter teaches
it one narrow task (LoRA alone; a demo base with random weights, built by a home before, also trains its embeddings
and head: ``ratchet_assets.night.lora_trainer.resolve_modules_to_save``), which is exactly what the nightly loop
needs to exercise end to end without downloading anything.

It is saved in standard Hugging Face format (``config.json``, ``model.safetensors``, tokenizer files, with
Ratchet's compact chat template ``ratchet_core.chat_format.RATCHET_CHAT_TEMPLATE`` as ``chat_template`` in its
``tokenizer_config.json``), so every piece of code that loads it — training, the student server — uses
``AutoModelForCausalLM``/``AutoTokenizer`` and renders with ``apply_chat_template``, and loads a real local base
(e.g. Qwen2.5-0.5B-Instruct) the same way.

A base's identity (:func:`base_identity`) is the SHA-256 of its files plus, named on their own, the SHA-256 of its
chat template and the vLLM tool parser that template needs (``ratchet_core.tool_calls.tool_parser_of``): the
adapter record, its BOM and its certificate carry all three.

torch/transformers are imported inside the functions: importing this module stays light.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ratchet_core.chat_format import template_sha256
from ratchet_core.tool_calls import tool_parser_of
from ratchet_stats.canonical import sha256_file

DEMO_BASE_NAME = "ratchet-demo-base"
DEMO_SEED = 20240607
# The pretrained weights of DEMO_CONFIG's shape (module docstring) and their SHA-256: a build refuses any other file.
DEMO_WEIGHTS = Path(__file__).with_name("demo_base.safetensors")
DEMO_WEIGHTS_SHA256 = "c36d0c04ccc5477f663729852ce5a24433b8f21a23edb0a38eb6bdb8043ee2d6"

# Byte vocabulary of ByT5: 3 special tokens + 256 bytes + 125 sentinel ids = 384.
DEMO_CONFIG = {
    "vocab_size": 384,
    "hidden_size": 192,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 1024,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
}

# Files that define a base model's behaviour; everything else in the folder (READMEs, caches) is ignored.
_IDENTITY_SUFFIXES = (".safetensors", ".bin", ".json", ".model", ".txt", ".tiktoken", ".jinja")
_MARKER = "ratchet_demo_base.txt"


def build_demo_base(path: str | Path, *, pretrained: bool = True) -> Path:
    """Build the demo base at `path` (overwriting): DEMO_CONFIG's shape with the pretrained weights
    (``DEMO_WEIGHTS``), or with ``pretrained=False`` the random weights of DEMO_SEED they were pretrained from (the
    only choice for a DEMO_CONFIG of another shape: the learner sweep's variants, the pretraining's start)."""
    import torch
    from transformers import ByT5Tokenizer, LlamaConfig, LlamaForCausalLM

    from ratchet_core.chat_format import RATCHET_CHAT_TEMPLATE

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = ByT5Tokenizer()
    tokenizer.chat_template = RATCHET_CHAT_TEMPLATE
    config = LlamaConfig(
        **DEMO_CONFIG,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(DEMO_SEED)
    model = LlamaForCausalLM(config)
    if pretrained:
        from safetensors.torch import load_file

        if sha256_file(DEMO_WEIGHTS) != DEMO_WEIGHTS_SHA256:
            raise RuntimeError(
                f"{DEMO_WEIGHTS} is not the demo base's weights (SHA-256 {DEMO_WEIGHTS_SHA256}): reinstall Ratchet"
            )
        model.load_state_dict(load_file(DEMO_WEIGHTS), strict=True)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out, save_jinja_files=False)  # the template inside tokenizer_config.json
    weights = (
        f"weights pretrained on a generic synthetic corpus (SHA-256 {DEMO_WEIGHTS_SHA256[:16]})"
        if pretrained
        else f"random weights (seed {DEMO_SEED})"
    )
    (out / _MARKER).write_text(
        f"{DEMO_BASE_NAME}: a 2-layer Llama with {weights} and a byte tokenizer.\n"
        "A demo base for Ratchet's embedded default, not a language model.\n"
    )
    return out


def ensure_demo_base(path: str | Path) -> Path:
    """The demo base at `path`, built first if `path` holds no model yet, or a demo base built before it carried
    its chat template (the same weights, now with the template). Returns the path."""
    out = Path(path)
    built = (out / "config.json").exists() and any(out.glob("*.safetensors"))
    if built and (not (out / _MARKER).exists() or chat_template_text(out)):
        return out
    return build_demo_base(out)


def chat_template_text(path: str | Path) -> str:
    """The chat template a base folder ships (``chat_template.jinja``, else ``chat_template`` in
    ``tokenizer_config.json``, the default one when it names several), read without loading the tokenizer, as
    ``AutoTokenizer`` finds it; "" when it has none."""
    root = Path(path)
    jinja = root / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    config = root / "tokenizer_config.json"
    if not config.is_file():
        return ""
    template = json.loads(config.read_text(encoding="utf-8")).get("chat_template") or ""
    if isinstance(template, list):  # [{"name": ..., "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or ""
    return template if isinstance(template, str) else ""


def base_identity(path: str | Path) -> dict:
    """Name and SHA-256 of every file that defines the base at `path` (weights, config, tokenizer, template).

    ``sha256`` is the SHA-256 of the sorted ``"<sha256>  <relative path>\\n"`` lines of those files (the
    ``sha256sum`` manifest), so the identity changes when any of them does. ``chat_template_sha256`` is the
    SHA-256 of the chat template's text ("" without one) and ``tool_parser`` the vLLM tool parser it needs
    (``ratchet_core.tool_calls.tool_parser_of``).
    """
    root = Path(path)
    if not (root / "config.json").exists():
        raise FileNotFoundError(
            f"no model at {root}: expected a Hugging Face model folder with config.json "
            "(build the demo base with ensure_demo_base, or point RATCHET_STUDENT_BASE_MODEL at a local model)"
        )
    files = {
        p.relative_to(root).as_posix(): sha256_file(p)
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name.endswith(_IDENTITY_SUFFIXES)
    }
    listing = "".join(f"{digest}  {name}\n" for name, digest in sorted(files.items()))
    name = DEMO_BASE_NAME if (root / _MARKER).exists() else root.name
    template = chat_template_text(root)
    return {
        "name": name,
        "path": str(root),
        "sha256": hashlib.sha256(listing.encode()).hexdigest(),
        "files": files,
        "chat_template_sha256": template_sha256(template) if template else "",
        "tool_parser": tool_parser_of(template),
    }


def is_demo_base(path: str | Path) -> bool:
    """Whether `path` holds the demo base (which needs embeddings and head trained alongside LoRA)."""
    return (Path(path) / _MARKER).exists()


def is_pretrained_demo_base(path: str | Path) -> bool:
    """Whether `path` holds the demo base with its pretrained weights (``DEMO_WEIGHTS``), not a random demo base
    a home built before them: its embeddings and head already know bytes, so LoRA alone trains it."""
    weights = Path(path) / "model.safetensors"
    return is_demo_base(path) and weights.is_file() and sha256_file(weights) == DEMO_WEIGHTS_SHA256


def is_demo_identity(identity: dict) -> bool:
    """Whether a base identity (:func:`base_identity`, as records keep it) is the demo base's: its marker file is
    one of the files (the ``.txt`` suffix puts it there), so no path is needed."""
    return _MARKER in (identity.get("files") or {})
