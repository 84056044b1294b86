"""The chat format's text as token ids, cut to the window the adapter was trained with: training and serving alike.

The trainer (``ratchet_assets.night.lora_trainer``) and the student server (``ratchet_gateway.student_server``)
turn the prompt of ``ratchet_core.chat_format`` into tokens with :func:`encode` and keep its last ``prompt_window``
tokens with :func:`cut_prompt`; the trainer saves ``prompt_window`` in :data:`TRAIN_META_FILE` beside the adapter,
and the server reads it there, so a prompt is cut at serving exactly as it was in training.
"""

from __future__ import annotations

# Written by the trainer next to the adapter's files: its config, ``prompt_window`` and ``max_len``, the base.
TRAIN_META_FILE = "ratchet_train.json"


def encode(tokenizer, text: str) -> list[int]:
    """Token ids of `text` without special tokens (the byte tokenizer would append EOS otherwise)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def cut_prompt(prompt_ids: list[int], prompt_window: int) -> list[int]:
    """The last `prompt_window` prompt tokens: the end of a prompt (latest turn + header) matters most."""
    return prompt_ids[-prompt_window:] if len(prompt_ids) > prompt_window else prompt_ids
