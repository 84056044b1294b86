"""A small base of a real instruct architecture, built here without a download: Qwen2 weights (random, fixed seed),
a byte-level BPE tokenizer trained on the built-in workloads' text, and a ChatML-with-tools chat template in the
style of Qwen2.5.

It is what the tests (``tests/night/test_real_base.py``) and the GPU check (``infra/vllm/gpu_check.sh``) run a
night on to prove the production path: the same files vLLM serves (``config.json``, ``model.safetensors``,
``tokenizer.json``, ``tokenizer_config.json`` with ``chat_template``), the template vLLM renders, tool calls
hermes-style (``vllm serve --tool-call-parser hermes``: ``<tool_call>`` and ``</tool_call>`` are single tokens,
not special ones, so they survive ``skip_special_tokens``), adapters on the attention and MLP projections only.
Like the demo base it is not a language model: it knows nothing before an adapter teaches it a task.

torch/transformers/tokenizers are imported inside the functions: importing this module stays light.
"""

from __future__ import annotations

import json
from pathlib import Path

CHATML_BASE_NAME = "ratchet-chatml-base"
CHATML_SEED = 20250607
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TOOL_TOKENS = ("<tool_call>", "</tool_call>")
# head_dim 32: the smallest head size vLLM's attention backends take
CHATML_CONFIG = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}
BPE_VOCAB = 1200
# The tied embeddings' standard deviation. With the default 0.02 the last RMSNorm (weight 1, not trained: LoRA
# only) bounds every logit near 1.3, so no answer can be confident whatever the adapter learns; at 0.3 a token
# aligned with the hidden state scores ~19.
EMBED_STD = 0.3

# ChatML with tools in the style of Qwen2.5's template: the tool list as JSON lines inside <tools></tools> in the
# system turn, each call as a <tool_call> block holding {"name": ..., "arguments": ...}, tool results as
# <tool_response> blocks in a user turn.
CHATML_TOOLS_TEMPLATE = (
    "{%- if tools -%}{{- '<|im_start|>system\\n' -}}"
    "{{- (messages[0].content if messages and messages[0].role == 'system' else 'You are a helpful assistant.') -}}"
    "{{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n' -}}"
    "{{- 'The functions you can call are listed as JSON signatures within <tools></tools>:\\n<tools>' -}}"
    "{%- for tool in tools -%}{{- '\\n' ~ (tool | tojson) -}}{%- endfor -%}"
    "{{- '\\n</tools>\\n\\nFor each call, answer with a JSON object holding the function name and its arguments '"
    ' ~ \'within <tool_call></tool_call> tags:\\n<tool_call>\\n{"name": <function-name>, "arguments": \''
    " ~ '<args-json-object>}\\n</tool_call><|im_end|>\\n' -}}"
    "{%- elif messages and messages[0].role == 'system' -%}"
    "{{- '<|im_start|>system\\n' ~ messages[0].content ~ '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) -%}"
    "{{- '<|im_start|>' ~ message.role ~ '\\n' ~ message.content ~ '<|im_end|>\\n' -}}"
    "{%- elif message.role == 'assistant' -%}{{- '<|im_start|>assistant' -}}"
    "{%- if message.content -%}{{- '\\n' ~ message.content -}}{%- endif -%}"
    "{%- for call in (message.tool_calls or []) -%}"
    "{%- set fn = call.function if call.function is defined else call -%}"
    '{{- \'\\n<tool_call>\\n{"name": "\' ~ fn.name ~ \'", "arguments": \' ~ (fn.arguments | tojson) -}}'
    "{{- '}\\n</tool_call>' -}}{%- endfor -%}{{- '<|im_end|>\\n' -}}"
    "{%- elif message.role == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}"
    "{{- '\\n<tool_response>\\n' ~ message.content ~ '\\n</tool_response>' -}}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def _training_text() -> list[str]:
    """Text the tokenizer learns its merges from: the built-in workloads' requests, answers and tools."""
    from ratchet_core.workloads import get_workload

    texts = []
    for task in ("tickets", "extract", "tools"):
        for example in get_workload(task).generate(400, seed=CHATML_SEED):
            texts.extend(str(m.get("content") or "") for m in [*example.messages, example.expected])
            for call in example.expected.get("tool_calls") or []:
                texts.append(json.dumps(call["function"]))
            if example.tools:
                texts.extend(json.dumps(t) for t in example.tools)
    return texts


# Qwen2's pre-tokenizer split (transformers' Qwen2Tokenizer): one digit a piece, words with their leading space.
QWEN2_SPLIT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""


def build_tokenizer():
    """The byte-level BPE tokenizer (a ``PreTrainedTokenizerFast``) with the template's tokens and template.

    Its normalizer, pre-tokenizer and decoder are Qwen2's (NFC, the Qwen2 split, byte-level), so every loader
    tokenizes alike: transformers 5 rebuilds a ``qwen2`` model's tokenizer with that pipeline (``Qwen2Tokenizer``)
    while transformers 4 (a vLLM install) reads ``tokenizer.json`` as it is."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(_training_text(), trainer=trainer)
    core.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=CHATML_CONFIG["max_position_embeddings"],
    )
    tokenizer.chat_template = CHATML_TOOLS_TEMPLATE
    return tokenizer


def build_chatml_base(path: str | Path) -> Path:
    """Build the base at `path` (overwriting), deterministically from CHATML_SEED and CHATML_CONFIG."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    config = Qwen2Config(
        **CHATML_CONFIG,
        vocab_size=len(tokenizer),
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(CHATML_SEED)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        model.get_input_embeddings().weight.normal_(0.0, EMBED_STD)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out, save_jinja_files=False)  # the template inside tokenizer_config.json
    # the class a Qwen2 base names (transformers 4 loads its fast version from tokenizer.json; 5 rebuilds it)
    config_file = out / "tokenizer_config.json"
    tokenizer_config = json.loads(config_file.read_text(encoding="utf-8"))
    tokenizer_config["tokenizer_class"] = "Qwen2Tokenizer"
    config_file.write_text(
        json.dumps(tokenizer_config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    return out
