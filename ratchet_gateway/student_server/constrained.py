"""Structured outputs on Ratchet's student server, as vLLM does them: the answer is decoded under a grammar.

A request's ``response_format`` is not part of the prompt (``ratchet_core.chat_format``); like vLLM, the server
constrains decoding to it instead, with xgrammar, vLLM's default structured-output backend:
``{"type": "json_schema", "json_schema": {"schema": ...}}`` compiles the schema (``compile_json_schema`` with
xgrammar's defaults, any whitespace allowed, as vLLM calls it), ``{"type": "json_object"}`` the built-in JSON
grammar, ``text`` or none leaves decoding free. At each step the tokens the grammar forbids get -inf before the
next token is chosen; once the value is complete only the EOS token is allowed. Logprobs stay those of the raw
logits (vLLM's default ``raw_logprobs``), so the gateway's confidence measures the model, not the grammar.

A schema xgrammar cannot compile, or another ``response_format`` type, is the request's error (HTTP 400, as vLLM
answers). Compiled grammars are cached per schema text. xgrammar is imported on the first constrained request.
"""

from __future__ import annotations

import json
import threading
from typing import Any

_MAX_CACHED = 256


class FormatError(ValueError):
    """A ``response_format`` the server cannot constrain decoding to (HTTP 400)."""


def grammar_key(response_format: dict | None) -> str | None:
    """What decides the grammar of a ``response_format`` (None: decoding is free); FormatError when unsupported."""
    if not response_format:
        return None
    kind = response_format.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return "json_object"
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict):
            raise FormatError("response_format json_schema needs a `schema` object (json_schema.schema)")
        # as given: the properties' order is the order the answer writes them in (vLLM's too)
        return "json_schema:" + json.dumps(schema, separators=(",", ":"))
    raise FormatError(
        f"response_format type {kind!r} is not supported by the student server: use text, json_object or json_schema"
    )


class Grammars:
    """Compiled grammars for one tokenizer (thread-safe: the event loop's threads compile, the engine matches)."""

    def __init__(self, tokenizer: Any, vocab_size: int, byte_offset: int | None):
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size
        self._byte_offset = byte_offset
        self._compiler = None
        self._cache: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _tokenizer_info(self):
        import xgrammar as xgr

        eos = self._tokenizer.eos_token_id
        if self._byte_offset is None:
            return xgr.TokenizerInfo.from_huggingface(
                self._tokenizer, vocab_size=self._vocab_size, stop_token_ids=[eos]
            )
        # A byte tokenizer (the demo base's ByT5): token byte_offset + b is the byte b, every other id is special.
        offset = self._byte_offset
        vocab = [bytes([i - offset]) if offset <= i < offset + 256 else b"" for i in range(self._vocab_size)]
        return xgr.TokenizerInfo(vocab, xgr.VocabType.RAW, vocab_size=self._vocab_size, stop_token_ids=[eos])

    def compile(self, key: str) -> Any:
        """The compiled grammar for a :func:`grammar_key` (FormatError when xgrammar cannot compile it)."""
        with self._lock:
            if key in self._cache:
                return self._cache[key]
            if self._compiler is None:
                import xgrammar as xgr

                self._compiler = xgr.GrammarCompiler(self._tokenizer_info())
            try:
                if key == "json_object":
                    grammar = self._compiler.compile_builtin_json_grammar()
                else:
                    grammar = self._compiler.compile_json_schema(key.removeprefix("json_schema:"))
            except (RuntimeError, ValueError) as exc:
                raise FormatError(
                    f"response_format's JSON schema cannot be used for decoding: {exc}"
                ) from None
            if len(self._cache) >= _MAX_CACHED:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = grammar
            return grammar


def logits_processor(grammars: list[Any], vocab_size: int):
    """A transformers LogitsProcessor masking, row by row, what each row's grammar forbids (None: a free row)."""
    import torch
    import xgrammar as xgr
    from transformers import LogitsProcessor

    class _Masks(LogitsProcessor):
        def __init__(self) -> None:
            self.matchers = [xgr.GrammarMatcher(g) if g is not None else None for g in grammars]
            self.bitmask = xgr.allocate_token_bitmask(len(grammars), vocab_size)
            self.started = False

        def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
            rows = []
            for row, matcher in enumerate(self.matchers):
                if matcher is None or matcher.is_terminated():
                    continue
                if self.started and not matcher.accept_token(int(input_ids[row, -1])):
                    self.matchers[row] = None  # cannot happen under the mask; never block the batch
                    continue
                matcher.fill_next_token_bitmask(self.bitmask, row)
                rows.append(row)
            self.started = True
            if rows:
                xgr.apply_token_bitmask_inplace(scores, self.bitmask, vocab_size=vocab_size, indices=rows)
            return scores

    return _Masks()
