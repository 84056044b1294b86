"""The teacher's prices and tokenizer: one home for both, used by the gateway, the demo teacher and the night.

- :func:`model_prices`: USD per token from litellm's bundled cost map (the one ``LITELLM_LOCAL_MODEL_COST_MAP=True``
  makes litellm use: no network); a model the map does not know is priced like ``fallback_like`` (``gpt-4o``), so
  the gateway (which bills with it) and the receipt (which states it) use the same numbers.
- :func:`prompt_tokens` / :func:`text_tokens`: ``litellm.token_counter`` for the model — tiktoken for OpenAI-style
  names (the encodings ship with litellm, so counting works offline) — with images counted at litellm's default
  size (it never fetches an image URL). The gateway records a student-served request's prompt counted this way
  (``teacher_prompt_tokens``), and the demo teacher bills its usage this way, so the two agree token for token.

Measured on the 2-core dev box: ~0.3 ms per count of a ~100-token prompt (mostly tiktoken's BPE); the first count
of a process loads the encoding (~1 s), so the gateway warms it up at start (:func:`warm_up`) and counts in a worker
thread while the student answers, never on the reply's critical path.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Prices:
    """USD per token; ``cost(usage)`` = prompt * input + completion * output (reasoning tokens are completion)."""

    input_per_token: float
    output_per_token: float

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return prompt_tokens * self.input_per_token + completion_tokens * self.output_per_token


def _litellm():
    import litellm

    litellm.suppress_debug_info = True  # no "Provider List" banners in the logs
    return litellm


@lru_cache(maxsize=1)
def _cost_map() -> dict[str, Any]:
    """litellm's bundled price map, read as JSON: what ``LITELLM_LOCAL_MODEL_COST_MAP=True`` makes litellm use,
    without importing litellm (~5-25 s here), so the night can state prices cheaply."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("litellm is not installed: cannot price the teacher; `pip install litellm`")
    path = Path(list(spec.submodule_search_locations)[0]) / "model_prices_and_context_window_backup.json"
    return json.loads(path.read_text(encoding="utf-8"))


def known_prices(model: str) -> Prices | None:
    """Prices of `model` (or of its name without the ``provider/`` prefix) from litellm's local cost map; None when
    the map has none (the one reader of the map: the gateway, the demo teacher, the night and the simulator)."""
    table = _cost_map()
    name = model.split("/", 1)[1] if "/" in model else model
    info = table.get(model) or table.get(name)
    if not info or info.get("input_cost_per_token") is None:
        return None
    return Prices(float(info["input_cost_per_token"]), float(info.get("output_cost_per_token") or 0.0))


def model_prices(model: str, fallback_like: str = "gpt-4o") -> Prices:
    """Prices from litellm's local cost map; a model it does not know is priced like ``fallback_like`` (and, where
    litellm is loaded — the gateway — registered with those prices so litellm's own accounting agrees)."""
    known = known_prices(model)
    if known is not None:
        return known
    table = _cost_map()
    name = model.split("/", 1)[1] if "/" in model else model
    like = table[fallback_like]
    if "litellm" in sys.modules:
        litellm = _litellm()
        if litellm.model_cost.get(name, {}).get("input_cost_per_token") is None:
            _, provider, _, _ = litellm.get_llm_provider(model)
            info = {k: like[k] for k in ("input_cost_per_token", "output_cost_per_token")}
            litellm.register_model({name: {**info, "litellm_provider": provider, "mode": "chat"}})
    return Prices(float(like["input_cost_per_token"]), float(like["output_cost_per_token"] or 0.0))


def max_output_tokens(model: str, fallback_like: str = "gpt-4o") -> int:
    """The most completion tokens `model` can produce in one answer (``max_output_tokens`` in litellm's local cost
    map, else ``max_tokens``); a model the map does not know is capped like ``fallback_like`` (16,384 for
    ``gpt-4o``), as it is priced. The gateway reserves it against a client's limits for a request that names no
    ``max_tokens`` (``ratchet_gateway.limits``): the worst case such a request can cost."""
    table = _cost_map()
    name = model.split("/", 1)[1] if "/" in model else model
    for info in (table.get(model), table.get(name), table[fallback_like]):
        if info:
            cap = info.get("max_output_tokens") or info.get("max_tokens")
            if isinstance(cap, int) and cap > 0:
                return cap
    return 16_384


def embedding_prices(model: str, fallback_like: str = "text-embedding-3-small") -> Prices:
    """An embedding model's prices from litellm's local cost map (input tokens only); a model the map does not know
    is priced like ``fallback_like``."""
    known = known_prices(model)
    return known if known is not None else known_prices(fallback_like) or Prices(0.0, 0.0)


def prompt_tokens(
    model: str,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    response_format: Mapping[str, Any] | None = None,
) -> int:
    """A chat prompt's tokens as ``model``'s tokenizer counts them: messages with their framing and tools
    (``litellm.token_counter``), plus a ``response_format``'s JSON text (a provider puts the schema in the prompt;
    litellm does not count it)."""
    n = _litellm().token_counter(
        model=model,
        messages=list(messages),
        tools=list(tools) if tools else None,
        use_default_image_token_count=True,
    )
    if response_format:
        n += text_tokens(model, json.dumps(response_format, sort_keys=True, separators=(",", ":")))
    return int(n)


def text_tokens(model: str, text: str) -> int:
    """Tokens of a generated text (a completion) as ``model``'s tokenizer counts them (no chat framing)."""
    if not text:
        return 0
    return int(_litellm().token_counter(model=model, text=text, count_response_tokens=True))


def warm_up(model: str) -> None:
    """Load the model's tokenizer now (the first count of a process takes ~1 s)."""
    prompt_tokens(model, [{"role": "user", "content": "warm up"}])
