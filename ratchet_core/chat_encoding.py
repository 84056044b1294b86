"""The chat template's text as token ids, never cut: training and serving alike.

The trainer (``ratchet_assets.night.lora_trainer``) and the student server (``ratchet_gateway.student_server``)
turn the prompt ``ratchet_core.chat_format`` renders into tokens with :func:`encode`, as vLLM tokenizes a chat
prompt (no special tokens added: the template wrote every one it wants). A prompt is never cut: vLLM takes a
prompt whole or refuses it (its context is ``--max-model-len``), so the trainer leaves out a row whose prompt and
answer do not fit its ``max_len`` (counted in ``ratchet_train.json``) and the student server refuses a prompt
that does not fit its context, as vLLM does (:func:`context_error`).

The target of a training row is the template's render of the answer turn, kept up to and including its first EOS
token (:func:`encode_answer`): what follows the EOS in the render (the newline between turns) is never
generated, since decoding stops at EOS.
"""

from __future__ import annotations

from typing import Any

# Written by the trainer next to the adapter's files: its config, ``max_len``, the rows left out, the base.
TRAIN_META_FILE = "ratchet_train.json"


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of `text` without added special tokens (as vLLM tokenizes a chat prompt)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_answer(tokenizer: Any, text: str) -> list[int]:
    """Token ids of a rendered answer up to and including its first EOS (EOS appended when it has none)."""
    ids = encode(tokenizer, text)
    eos = tokenizer.eos_token_id
    return ids[: ids.index(eos) + 1] if eos in ids else [*ids, eos]


def context_length(model_config: Any) -> int:
    """The context a base takes: its ``max_position_embeddings`` (vLLM's default ``--max-model-len``)."""
    return int(getattr(model_config, "max_position_embeddings", 0) or 2048)


def context_error(prompt_tokens: int, max_tokens: int | None, context: int) -> str | None:
    """vLLM's refusal of a request that does not fit the context, or None when it fits: the prompt must leave room
    for at least one token, and for ``max_tokens`` when the request sets it."""
    wanted = prompt_tokens + (max_tokens or 1)
    if wanted <= context:
        return None
    return (
        f"This model's maximum context length is {context} tokens. However, you requested {wanted} tokens "
        f"({prompt_tokens} in the messages, {max_tokens or 1} in the completion). Please reduce the length of the "
        "messages or completion."
    )
