"""The machinery behind the built-in workloads: a workload is plain data, the code here is generic over it.

A task description (`TaskDescription`) is what a user would write down to describe an application's traffic:
a system prompt, the intents the app sees, for each intent a few message templates with ``{slot}`` holes and
the keywords that identify it, and the answer the app expects (a label, a JSON object, or a function call, with
``{slot}`` references). From that one description we both

- generate examples (`generate_examples`): pick an intent, a template, fill the slots from a seeded RNG and
  fill the answer template with the same values (the ground truth), and
- solve requests (`solve_request`): find the intent by its keywords in the user's text, read the slot values
  back out of the text (regular expressions per slot kind), fill the answer template.

Solving never looks at e-mails or phone numbers, so it gives the same answer when the gateway has replaced them
with placeholders such as ``<EMAIL_1a2b3c4d>``.
Seeding: one ``random.Random(f"{workload}:{seed}:{day}")`` per call; never the global RNG.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

COMPARATORS = ("label", "json", "tool_call")


@dataclass(frozen=True)
class Example:
    """One request of a workload and the answer it should get.

    `expected` is the correct assistant message ``{"role": "assistant", "content": str | None,
    "tool_calls": list | None}``; `meta` says where the example came from (workload, seed, day, index, intent,
    template, drifted).
    """

    task: str
    messages: list[dict]
    tools: list[dict] | None = None
    tool_choice: str | dict | None = None
    response_format: dict | None = None
    expected: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def request_body(self) -> dict[str, Any]:
        """The OpenAI chat-completions body fields of this example (None fields left out)."""
        body: dict[str, Any] = {"messages": copy.deepcopy(self.messages)}
        if self.tools is not None:
            body["tools"] = copy.deepcopy(self.tools)
        if self.tool_choice is not None:
            body["tool_choice"] = copy.deepcopy(self.tool_choice)
        if self.response_format is not None:
            body["response_format"] = copy.deepcopy(self.response_format)
        return body

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "messages": self.messages,
            "tools": self.tools,
            "tool_choice": self.tool_choice,
            "response_format": self.response_format,
            "expected": self.expected,
            "meta": self.meta,
        }


@dataclass(frozen=True)
class TaskSpec:
    """What the rest of Ratchet needs to know about a task: its name, how answers are compared, one line."""

    name: str
    comparator: str
    description: str


@dataclass(frozen=True)
class Intent:
    """One kind of request: how users phrase it (`templates`), how to recognise it (`keywords`, matched as
    whole words, case-insensitive, in the last user message) and the answer it expects (`answer`: a label
    string, a JSON object, or ``{"name": fn, "arguments": {...}}`` for tool calls; strings ``"{slot}"`` inside
    are replaced by the slot's value, keeping its type)."""

    name: str
    templates: tuple[str, ...]
    keywords: tuple[str, ...]
    answer: Any


@dataclass(frozen=True)
class TaskDescription:
    """A task as plain data (see module docstring). `slots` maps a slot name to a list of choices; the slot
    names ``order_id``, ``money``, ``email``, ``phone`` and ``name`` are built in (see `SLOT_KINDS`).
    `drift_intents` appear only from the workload's drift day on, in a `drift_share` of the examples."""

    name: str
    comparator: str
    description: str
    system_prompt: str
    intents: tuple[Intent, ...]
    fallback_answer: Any
    drift_intents: tuple[Intent, ...] = ()
    drift_share: float = 0.3
    slots: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    prefixes: tuple[str, ...] = ("",)
    suffixes: tuple[str, ...] = ("",)
    tools: tuple[dict, ...] | None = None
    tool_choices: tuple[tuple[str, float], ...] = ()
    response_format: dict | None = None

    @property
    def spec(self) -> TaskSpec:
        return TaskSpec(self.name, self.comparator, self.description)

    @property
    def all_intents(self) -> tuple[Intent, ...]:
        return self.intents + self.drift_intents


# Built-in slot kinds ---------------------------------------------------------------------------------------
FIRST_NAMES = ("Ana", "Ben", "Chloe", "Dev", "Eli", "Fatima", "Gus", "Hana", "Ivan", "June", "Kofi", "Lena")
LAST_NAMES = ("Smith", "Okafor", "Garcia", "Nguyen", "Muller", "Rossi", "Tanaka", "Brown", "Silva", "Kim")
EMAIL_DOMAINS = ("example.com", "mail.test", "inbox.example.org")
# Currency code -> symbol; the text shows either, the answer always has the code.
CURRENCIES = {"USD": "$", "EUR": "€", "GBP": "£"}
_SYMBOL_TO_CODE = {v: k for k, v in CURRENCIES.items()}

ORDER_ID_RE = re.compile(r"\b([A-HJ-NP-Z]-\d{5})\b")
_MONEY_RE = re.compile(
    r"(?P<sym>[$€£])\s?(?P<a1>\d+(?:\.\d{2})?)\b"
    r"|\b(?P<c1>USD|EUR|GBP)\s?(?P<a2>\d+(?:\.\d{2})?)\b"
    r"|\b(?P<a3>\d+(?:\.\d{2})?)\s?(?P<c2>USD|EUR|GBP)\b"
)


def _gen_order_id(rng: random.Random) -> str:
    return f"{rng.choice('ABCDEFGHJKLMNPRSTUVWXYZ')}-{rng.randrange(10000, 100000)}"


def _gen_money(rng: random.Random) -> tuple[str, dict]:
    code = rng.choice(sorted(CURRENCIES))
    cents = rng.randrange(100, 50000)
    # Whole amounts are written without cents half the time, as people do.
    text_amount = f"{cents // 100}" if cents % 100 == 0 else f"{cents / 100:.2f}"
    style = rng.randrange(3)
    if style == 0:
        text = f"{CURRENCIES[code]}{text_amount}"
    elif style == 1:
        text = f"{text_amount} {code}"
    else:
        text = f"{code} {text_amount}"
    return text, {"amount": round(cents / 100, 2), "currency": code}


def parse_money(text: str) -> dict | None:
    """The first money amount in `text` as {"amount": float, "currency": code}, or None."""
    for m in _MONEY_RE.finditer(text):
        if m.group("sym"):
            return {"amount": round(float(m.group("a1")), 2), "currency": _SYMBOL_TO_CODE[m.group("sym")]}
        if m.group("c1"):
            return {"amount": round(float(m.group("a2")), 2), "currency": m.group("c1")}
        return {"amount": round(float(m.group("a3")), 2), "currency": m.group("c2")}
    return None


def _gen_email(rng: random.Random) -> str:
    first, last = rng.choice(FIRST_NAMES).lower(), rng.choice(LAST_NAMES).lower()
    return f"{first}.{last}{rng.randrange(1, 99)}@{rng.choice(EMAIL_DOMAINS)}"


def _gen_phone(rng: random.Random) -> str:
    area, line = rng.randrange(201, 990), rng.randrange(1000, 10000)
    return rng.choice(
        (f"+1 {area}-555-{line:04d}", f"({area}) 555-{line:04d}", f"+44 7700 900{line % 1000:03d}")
    )


def _slot_value(name: str, choices: Mapping[str, tuple[str, ...]], rng: random.Random) -> tuple[str, Any]:
    """(text shown in the message, value used in the answer) of one slot."""
    if name in choices:
        v = rng.choice(choices[name])
        return v, v
    if name == "order_id":
        v = _gen_order_id(rng)
        return v, v
    if name == "money":
        return _gen_money(rng)
    if name == "email":
        v = _gen_email(rng)
        return v, v
    if name == "phone":
        v = _gen_phone(rng)
        return v, v
    if name == "name":
        v = rng.choice(FIRST_NAMES)
        return v, v
    raise KeyError(f"slot {{{name}}} has no choices and is not a built-in slot kind; add it to `slots`")


def _parse_slot(name: str, choices: Mapping[str, tuple[str, ...]], text: str) -> Any:
    """Read a slot's answer value back from request text; None when it is not there."""
    if name in choices:
        low = text.lower()
        for v in sorted(choices[name], key=len, reverse=True):
            if re.search(rf"\b{re.escape(v.lower())}\b", low):
                return v
        return None
    if name == "order_id":
        m = ORDER_ID_RE.search(text)
        return m.group(1) if m else None
    if name == "money":
        return parse_money(text)
    raise KeyError(f"slot {{{name}}} cannot be read back from text")


_SLOT_REF = re.compile(r"\{([a-z_]+)(?:\.([a-z_]+))?\}")


def _slot_names(s: str) -> list[str]:
    return [m.group(1) for m in _SLOT_REF.finditer(s)]


def fill_answer(template: Any, values: Mapping[str, Any]) -> Any:
    """Replace ``"{slot}"`` / ``"{slot.field}"`` strings in an answer template by their values (types kept)."""
    if isinstance(template, str):
        m = _SLOT_REF.fullmatch(template)
        if m:
            v = values.get(m.group(1))
            if v is None:
                return None
            return v[m.group(2)] if m.group(2) else v
        return _SLOT_REF.sub(lambda mm: str(fill_answer(mm.group(0), values)), template)
    if isinstance(template, dict):
        return {k: fill_answer(v, values) for k, v in template.items()}
    if isinstance(template, list):
        return [fill_answer(v, values) for v in template]
    return template


def answer_slots(template: Any) -> list[str]:
    """Slot names an answer template refers to."""
    if isinstance(template, str):
        return _slot_names(template)
    if isinstance(template, dict):
        return [s for v in template.values() for s in answer_slots(v)]
    if isinstance(template, list):
        return [s for v in template for s in answer_slots(v)]
    return []


@lru_cache(maxsize=256)
def _keyword_re(keywords: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(r"\b(?:" + "|".join(re.escape(k.lower()) for k in keywords) + r")\b")


# Answers as assistant messages ----------------------------------------------------------------------------
def compact_json(obj: Any) -> str:
    """JSON text as the demo teacher writes it: schema key order, no spaces, non-ASCII kept."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def tool_call_id(seed_text: str, index: int) -> str:
    return "call_" + hashlib.sha256(f"{seed_text}:{index}".encode()).hexdigest()[:24]


def answer_message(desc: TaskDescription, answer: Any, id_seed: str = "") -> dict:
    """The assistant message that carries `answer` for this task's comparator."""
    if desc.comparator == "label":
        return {"role": "assistant", "content": str(answer), "tool_calls": None}
    if desc.comparator == "json":
        return {"role": "assistant", "content": compact_json(answer), "tool_calls": None}
    calls = answer if isinstance(answer, list) else [answer]
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": tool_call_id(id_seed, i),
                "type": "function",
                "function": {"name": c["name"], "arguments": compact_json(c["arguments"])},
            }
            for i, c in enumerate(calls)
        ],
    }


# Generation ------------------------------------------------------------------------------------------------
def _pick_weighted(rng: random.Random, options: Sequence[tuple[Any, float]]) -> Any:
    total = sum(w for _, w in options)
    x = rng.random() * total
    for value, w in options:
        x -= w
        if x < 0:
            return value
    return options[-1][0]


def make_example(desc: TaskDescription, rng: random.Random, drifted: bool, meta: dict[str, Any]) -> Example:
    """One example of `desc`; drift intents are eligible when `drifted` (with probability drift_share)."""
    if drifted and desc.drift_intents and rng.random() < desc.drift_share:
        intent = rng.choice(desc.drift_intents)
    else:
        intent = rng.choice(desc.intents)
    t_index = rng.randrange(len(intent.templates))
    template = intent.templates[t_index]
    values: dict[str, Any] = {}
    texts: dict[str, str] = {}
    for slot in dict.fromkeys(_slot_names(template) + answer_slots(intent.answer)):
        texts[slot], values[slot] = _slot_value(slot, desc.slots, rng)
    body = _SLOT_REF.sub(lambda m: texts[m.group(1)], template)
    text = rng.choice(desc.prefixes) + body + rng.choice(desc.suffixes)
    answer = fill_answer(intent.answer, values)
    messages = [
        {"role": "system", "content": desc.system_prompt},
        {"role": "user", "content": text},
    ]
    tool_choice = _pick_weighted(rng, desc.tool_choices) if desc.tool_choices else None
    full_meta = {**meta, "intent": intent.name, "template": t_index, "drifted": intent in desc.drift_intents}
    id_seed = f"{meta.get('workload')}:{meta.get('seed')}:{meta.get('day')}:{meta.get('index')}"
    return Example(
        task=desc.name,
        messages=messages,
        tools=copy.deepcopy(list(desc.tools)) if desc.tools is not None else None,
        tool_choice=tool_choice,
        response_format=copy.deepcopy(desc.response_format),
        expected=answer_message(desc, answer, id_seed),
        meta=full_meta,
    )


# Solving ---------------------------------------------------------------------------------------------------
def last_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """Text of the last user message (content parts of type text are joined)."""
    for msg in reversed(messages):
        if msg.get("role") == "user":
            content = msg.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return " ".join(
                    str(p.get("text", ""))
                    for p in content
                    if isinstance(p, Mapping) and p.get("type") == "text"
                )
            return ""
    return ""


def find_intent(desc: TaskDescription, text: str) -> Intent | None:
    """The intent whose keyword occurs first in `text` (whole words, case-insensitive); None if none does."""
    low = text.lower()
    best: tuple[int, int] | None = None
    found: Intent | None = None
    for order, intent in enumerate(desc.all_intents):
        m = _keyword_re(intent.keywords).search(low)
        if m and (best is None or (m.start(), order) < best):
            best, found = (m.start(), order), intent
    return found


def solve_request(desc: TaskDescription, messages: Sequence[Mapping[str, Any]], id_seed: str = "") -> dict:
    """The correct assistant message for a request of task `desc`, computed from the request text alone."""
    text = last_user_text(messages)
    intent = find_intent(desc, text)
    if intent is None:
        return answer_message(desc, desc.fallback_answer, id_seed)
    values = {s: _parse_slot(s, desc.slots, text) for s in dict.fromkeys(answer_slots(intent.answer))}
    return answer_message(desc, fill_answer(intent.answer, values), id_seed)


def validate(desc: TaskDescription) -> list[str]:
    """Problems in a description (empty when sound): each template must name exactly its own intent by keyword,
    and its answer slots must appear in it. A description with problems gives examples `solve` gets wrong."""
    problems = []
    if desc.comparator not in COMPARATORS:
        problems.append(f"{desc.name}: comparator {desc.comparator!r} is not one of {COMPARATORS}")
    for intent in desc.all_intents:
        for t in intent.templates:
            probe = _SLOT_REF.sub("", t)
            hits = [i.name for i in desc.all_intents if _keyword_re(i.keywords).search(probe.lower())]
            if hits[:1] != [intent.name] or len(hits) != 1:
                problems.append(f"{desc.name}/{intent.name}: template {t!r} matches intents {hits}")
            missing = set(answer_slots(intent.answer)) - set(_slot_names(t))
            if missing:
                problems.append(f"{desc.name}/{intent.name}: template {t!r} lacks slots {sorted(missing)}")
    fixed = {**desc.slots, "prefixes": desc.prefixes, "suffixes": desc.suffixes}
    for name, values in fixed.items():
        for v in values:
            hits = [i.name for i in desc.all_intents if _keyword_re(i.keywords).search(v.lower())]
            if hits:
                problems.append(f"{desc.name}: slot {name} value {v!r} contains keywords of {hits}")
    return problems


@dataclass(frozen=True)
class Workload:
    """A named mix of tasks. `generate(n, seed, day, drift_day)` is deterministic in its arguments; from
    `drift_day` on (day >= drift_day) the tasks' drift intents appear."""

    name: str
    descriptions: tuple[TaskDescription, ...]
    weights: tuple[float, ...] = ()

    @property
    def tasks(self) -> list[str]:
        return [d.name for d in self.descriptions]

    def generate(self, n: int, seed: int, day: int = 0, drift_day: int | None = None) -> list[Example]:
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        rng = random.Random(f"{self.name}:{seed}:{day}")
        drifted = drift_day is not None and day >= drift_day
        weights = self.weights or tuple(1.0 for _ in self.descriptions)
        options = list(zip(self.descriptions, weights, strict=True))
        out = []
        for i in range(n):
            desc = options[0][0] if len(options) == 1 else _pick_weighted(rng, options)
            meta = {"workload": self.name, "seed": seed, "day": day, "index": i}
            out.append(make_example(desc, rng, drifted, meta))
        return out
