"""In-process students for ``ratchet sim``: a fast learner standing in for the LoRA adapter, and the real one.

``FastStudent`` (``--student fast``, the default) is a real learner trained only on the night's ``train.jsonl``,
so it can be wrong, and it gives a confidence in [0, 1] for the cascade and Learn-then-Test:

- label tasks (``tickets``): multinomial naive Bayes over the words and word pairs of the last user message,
  Laplace smoothing (add-one); answer = the arg-max label, confidence = its posterior
  P(label | words) = exp(s_label) / sum_l exp(s_l) with s_l = log P(l) + sum_w log P(w | l)
  (Manning, Raghavan & Schuetze 2008, "Introduction to Information Retrieval", section 13.2).
- JSON and tool-call tasks (``extract``, ``tools``): the answer is split into a *skeleton* (the answer with every
  value that was copied from the user's text replaced by a slot) and the copied values. The skeleton is chosen
  by the same naive Bayes; each slot is filled from the text by memorised rules: the value's character shape
  (runs of digits -> 9, capitals -> A, small letters -> a) and the words seen just before it in training.
  Confidence = skeleton posterior x the product of per-slot confidences (1 for an unambiguous match, the share of
  the rule's training support otherwise, 0.05 when no candidate fits).

It stands in for the LoRA adapter so that a 7-day simulation runs in seconds; ``LoraStudent``
(``--student lora``) trains the real adapter with ``ratchet_assets.night.lora_trainer.train_lora`` on the demo base, with
the night's settings and step budget (``sim.engine.lora_night_config``), and answers by greedy generation in process
(minutes per night on a CPU; the tests check its config, not a run).
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ratchet_core.workloads import comparator_of, detect_task, last_user_text
from ratchet_stats.canonical import canonical_json, sha256_hex

_WORD = re.compile(r"[A-Za-z0-9]+(?:[.\-][A-Za-z0-9]+)*|[^\sA-Za-z0-9]")
_SLOT = "\u0000slot"


class Student(Protocol):
    """What the simulator needs of a trained student version: ``digest`` names it in its certificate, ``weights``
    is what its content is (``release.content``: two nights that keep the same weights make one version)."""

    digest: str
    weights: str

    def answer(
        self,
        task: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        response_format: Mapping[str, Any] | None,
    ) -> tuple[dict[str, Any], float]: ...


def words(text: str) -> list[str]:
    """Lower-cased tokens: alphanumeric runs (keeping '.' and '-' inside them) and single symbols."""
    return [w.lower() for w in _WORD.findall(text)]


def features(text: str) -> list[str]:
    """Naive-Bayes features: words and adjacent word pairs."""
    ws = words(text)
    return ws + [f"{a} {b}" for a, b in zip(ws, ws[1:], strict=False)]


def shape(value: str) -> str:
    """Character shape of a copied value: digit runs -> 9, capital runs -> A, small-letter runs -> a."""
    s = re.sub(r"[0-9]+", "9", value)
    s = re.sub(r"[A-Z]+", "A", s)
    return re.sub(r"[a-z]+", "a", s)


class NaiveBayes:
    """Multinomial naive Bayes with add-one smoothing (formula in the module docstring)."""

    def __init__(self) -> None:
        self.class_count: Counter[str] = Counter()
        self.feature_count: dict[str, Counter[str]] = defaultdict(Counter)
        self.total: Counter[str] = Counter()
        self.vocab: set[str] = set()

    def add(self, label: str, feats: Sequence[str]) -> None:
        self.class_count[label] += 1
        self.feature_count[label].update(feats)
        self.total[label] += len(feats)
        self.vocab.update(feats)

    def posterior(self, feats: Sequence[str]) -> list[tuple[str, float]]:
        """(label, P(label | feats)) for every label, most likely first (ties by label)."""
        n = sum(self.class_count.values())
        v = len(self.vocab) + 1
        scores = {}
        for label, count in self.class_count.items():
            fc, tot = self.feature_count[label], self.total[label] + v
            s = math.log(count / n)
            for f in feats:
                if f in self.vocab:
                    s += math.log((fc.get(f, 0) + 1) / tot)
            scores[label] = s
        top = max(scores.values())
        z = math.fsum(math.exp(s - top) for s in scores.values())
        post = [(lab, math.exp(s - top) / z) for lab, s in scores.items()]
        post.sort(key=lambda p: (-p[1], p[0]))
        return post


def _candidates(text: str) -> list[tuple[str, str]]:
    """(token, the word before it) for every token of the raw text, in order."""
    toks = _WORD.findall(text)
    return [(t, toks[i - 1].lower() if i else "") for i, t in enumerate(toks)]


def _skeleton(value: Any, text: str, slots: list[Any]) -> Any:
    """`value` with every leaf copied verbatim from `text` replaced by a slot marker (appending to `slots`)."""
    if isinstance(value, dict):
        return {k: _skeleton(v, text, slots) for k, v in value.items()}
    if isinstance(value, list):
        return [_skeleton(v, text, slots) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    as_text = value if isinstance(value, str) else _number_text(value)
    if as_text and as_text in {t for t, _ in _candidates(text)}:
        slots.append(value)
        return f"{_SLOT}{len(slots) - 1}:{'n' if not isinstance(value, str) else 's'}"
    return value


def _number_text(value: float | int) -> str:
    return repr(value) if isinstance(value, int) else f"{value:g}" if value != int(value) else str(int(value))


def _fill(skeleton: Any, values: dict[int, Any]) -> Any:
    if isinstance(skeleton, dict):
        return {k: _fill(v, values) for k, v in skeleton.items()}
    if isinstance(skeleton, list):
        return [_fill(v, values) for v in skeleton]
    if isinstance(skeleton, str) and skeleton.startswith(_SLOT):
        return values[int(skeleton[len(_SLOT) :].split(":", 1)[0])]
    return skeleton


def _answer_object(task: str, message: Mapping[str, Any]) -> Any:
    """The part of an assistant message a task's answer consists of (JSON content or the tool calls)."""
    if comparator_of(task) == "tool_call":
        return [
            {"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"] or "{}")}
            for c in message.get("tool_calls") or []
        ]
    try:
        return json.loads(message.get("content") or "")
    except ValueError:
        return message.get("content") or ""


def _message(task: str, obj: Any, text: str) -> dict[str, Any]:
    if comparator_of(task) == "tool_call":
        calls = [
            {
                "id": "call_" + sha256_hex(f"{i}:{text}".encode())[:24],
                "type": "function",
                "function": {
                    "name": c["name"],
                    "arguments": canonical_json(c["arguments"]).decode("utf-8"),
                },
            }
            for i, c in enumerate(obj)
        ]
        return {"role": "assistant", "content": None, "tool_calls": calls}
    content = obj if isinstance(obj, str) else canonical_json(obj).decode("utf-8")
    return {"role": "assistant", "content": content, "tool_calls": None}


class _TaskModel:
    """One task's learner: naive Bayes over answers (labels) or skeletons, plus slot-filling rules."""

    def __init__(self, task: str) -> None:
        self.task = task
        self.nb = NaiveBayes()
        self.skeletons: dict[str, Any] = {}
        self.kinds: dict[str, list[str]] = {}  # skeleton id -> per slot "n" (number) or "s" (string)
        # (skeleton id, slot index) -> Counter of (shape, word before) seen in training, and the values seen
        self.rules: dict[tuple[str, int], Counter[tuple[str, str]]] = defaultdict(Counter)
        self.seen: dict[tuple[str, int], set[str]] = defaultdict(set)

    def add(self, messages: Sequence[Mapping[str, Any]], answer: Mapping[str, Any]) -> None:
        text = last_user_text(messages)
        if comparator_of(self.task) == "label":
            self.nb.add((answer.get("content") or "").strip(), features(text))
            return
        slots: list[Any] = []
        skel = _skeleton(_answer_object(self.task, answer), text, slots)
        sid = canonical_json(skel).decode("utf-8")
        self.skeletons[sid] = skel
        self.kinds[sid] = ["s" if isinstance(v, str) else "n" for v in slots]
        self.nb.add(sid, features(text))
        cands = _candidates(text)
        for i, value in enumerate(slots):
            as_text = value if isinstance(value, str) else _number_text(value)
            self.seen[(sid, i)].add(as_text)
            for tok, before in cands:
                if tok == as_text:
                    self.rules[(sid, i)][(shape(tok), before)] += 1
                    break

    def answer(self, messages: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], float]:
        text = last_user_text(messages)
        if not self.nb.class_count:
            return {"role": "assistant", "content": "", "tool_calls": None}, 0.0
        post = self.nb.posterior(features(text))
        label, p = post[0]
        if comparator_of(self.task) == "label":
            return {"role": "assistant", "content": label, "tool_calls": None}, p
        # The likeliest skeletons, each filled from the text; the best posterior x fill confidence wins.
        cands = _candidates(text)
        best: tuple[float, dict[str, Any]] | None = None
        for sid, prob in post[:5]:
            values, fill = self._fill_slots(sid, cands)
            msg = _message(self.task, _fill(copy.deepcopy(self.skeletons[sid]), values), text)
            if best is None or prob * fill > best[0]:
                best = (prob * fill, msg)
        assert best is not None
        return best[1], min(1.0, max(0.0, best[0]))

    def _fill_slots(self, sid: str, cands: list[tuple[str, str]]) -> tuple[dict[int, Any], float]:
        values: dict[int, Any] = {}
        conf = 1.0
        for i, kind in enumerate(self.kinds[sid]):
            rule, seen = self.rules.get((sid, i), Counter()), self.seen.get((sid, i), set())
            shapes = {s for s, _ in rule}
            # A slot is a closed set when its values repeat in training (currencies, cities): then an unseen
            # value is most likely the wrong token.
            closed = sum(rule.values()) >= 3 * len(seen)
            # Prefer a value seen in training for this slot, then the commonest context, then the first.
            scored = [
                (t in seen, rule.get((shape(t), b), 0), -j, t)
                for j, (t, b) in enumerate(cands)
                if shape(t) in shapes
            ]
            if not scored:
                values[i], conf = ("" if kind == "s" else 0), conf * 0.05
                continue
            top = max(scored)
            rivals = [c for c in scored if c[0] == top[0]]
            total = sum(c[1] for c in rivals) or 1
            conf *= 1.0 if len(rivals) == 1 else top[1] / total
            if closed and not top[0]:
                conf *= 0.05
            values[i] = top[3] if kind == "s" else _to_number(top[3])
        return values, conf


def _to_number(text: str) -> float | int:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return 0


class FastStudent:
    """A version of the fast learner: one `_TaskModel` per task, trained on one night's ``train.jsonl``."""

    def __init__(self, models: dict[str, _TaskModel], digest: str) -> None:
        self.models = models
        self.digest = self.weights = digest

    @classmethod
    def train(cls, train_jsonl: str | Path) -> FastStudent:
        """Learn from the rows of ``train.jsonl`` (rows of unknown tasks are skipped)."""
        data = Path(train_jsonl).read_bytes()
        models: dict[str, _TaskModel] = {}
        for line in data.splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            messages = row["messages"]
            task = detect_task(messages[:-1], row.get("tools"), row.get("response_format"))
            if task is None:
                continue
            models.setdefault(task, _TaskModel(task)).add(messages[:-1], messages[-1])
        # The learner is deterministic in its data, so the data's digest names the "adapter".
        return cls(models, sha256_hex(b"fast-student-v1\n" + data))

    def answer(
        self,
        task: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        response_format: Mapping[str, Any] | None = None,
    ) -> tuple[dict[str, Any], float]:
        model = self.models.get(task)
        if model is None:
            return {"role": "assistant", "content": "", "tool_calls": None}, 0.0
        return model.answer(messages)


class CorruptedStudent:
    """A version that serves badly: a wrong answer on `share` of the requests.

    Which requests is a hash of the request id (deterministic); the wrong answer keeps the version's confidence,
    so the cascade cannot catch it and only audits can. By default it passed its certificate (the night evaluated
    the clean version: a bad deploy); with ``evaluated`` it is wrong on its share of the golden rows too (a
    version certified at a low target that is worse than the live one: what the paired gate is for).
    """

    def __init__(self, inner: Student, share: float = 0.3, evaluated: bool = False) -> None:
        self.inner = inner
        self.share = share
        self.evaluated = evaluated
        self.digest, self.weights = inner.digest, inner.weights

    def hit(self, request_id: str) -> bool:
        h = sha256_hex(f"corrupt:{request_id}".encode())
        return int(h[:8], 16) / 2**32 < self.share

    def answer_for(
        self, request_id: str, task: str, messages: Any, tools: Any, response_format: Any
    ) -> tuple[dict[str, Any], float]:
        message, conf = self.inner.answer(task, messages, tools, response_format)
        if not self.hit(request_id):
            return message, conf
        return _wrong(task, message), conf

    def answer(
        self, task: str, messages: Any, tools: Any, response_format: Any
    ) -> tuple[dict[str, Any], float]:
        return self.inner.answer(task, messages, tools, response_format)

    def evaluate(
        self, example_key: str, task: str, messages: Any, tools: Any, response_format: Any
    ) -> tuple[dict[str, Any], float]:
        """Its answer to golden row `example_key` in the night's evaluation (module docstring)."""
        if self.evaluated:
            return self.answer_for(f"golden:{example_key}", task, messages, tools, response_format)
        return self.answer(task, messages, tools, response_format)


def _wrong(task: str, message: dict[str, Any]) -> dict[str, Any]:
    """A plausible but wrong answer for the task's comparator."""
    out = copy.deepcopy(message)
    if comparator_of(task) == "tool_call":
        for call in out.get("tool_calls") or []:
            call["function"]["name"] = call["function"]["name"] + "_v2"
        return out
    content = out.get("content") or ""
    out["content"] = (
        ("unknown" if content != "unknown" else "billing") if comparator_of(task) == "label" else "{}"
    )
    return out


class LoraStudent:
    """The real student: a LoRA adapter on the demo base, answering by greedy generation in this process."""

    def __init__(self, base_path: Path, adapter_dir: Path, digest: str, weights: str, trained: Any) -> None:
        import torch
        from peft import PeftModel
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.digest = digest
        self.weights = weights
        self.trained = trained  # the night's TrainResult
        self.tokenizer = AutoTokenizer.from_pretrained(str(base_path))
        base = AutoModelForCausalLM.from_pretrained(str(base_path), torch_dtype=torch.float32)
        self.model = PeftModel.from_pretrained(base, str(adapter_dir)).eval()
        self._torch = torch

    @classmethod
    def train(
        cls,
        base_path: Path,
        train_jsonl: Path,
        out_dir: Path,
        config: Any,
        row_tasks: Sequence[str] | None = None,
        init_adapter: Path | None = None,
        held_out: Sequence[bool] | None = None,
    ) -> LoraStudent:
        """Train on ``train_jsonl`` with ``config`` (a ``LoraTrainConfig``; the simulator's is the night's,
        ``sim.engine.lora_night_config``), as the night's training job calls the trainer: ``row_tasks`` per row,
        and on a warm night the parent's folder (``init_adapter``) and the split's rows (``held_out``)."""
        from ratchet_assets.night.adapter import weights_digest
        from ratchet_assets.night.lora_trainer import train_lora

        result = train_lora(
            base_path,
            train_jsonl,
            out_dir,
            config,
            row_tasks=row_tasks,
            init_adapter=init_adapter,
            held_out=held_out,
        )
        return cls(
            base_path, Path(result.adapter_dir), result.adapter_sha256, weights_digest(result.files), result
        )

    def answer(
        self,
        task: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        response_format: Mapping[str, Any] | None = None,
        max_new_tokens: int = 160,
    ) -> tuple[dict[str, Any], float]:
        """The adapter's greedy answer, its prompt rendered by the base's chat template as the student server
        renders it (``response_format`` is not part of it; this in-process student does not constrain decoding)."""
        from ratchet_core.chat_encoding import encode
        from ratchet_core.chat_format import render_prompt
        from ratchet_core.confidence import answer_confidence
        from ratchet_core.tool_calls import answer_message

        torch = self._torch
        prompt = render_prompt(
            self.tokenizer, [dict(m) for m in messages], [dict(t) for t in tools or []] or None
        )
        ids = torch.tensor([encode(self.tokenizer, prompt)])
        with torch.no_grad():
            out = self.model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                output_scores=True,
                return_dict_in_generate=True,
                eos_token_id=self.tokenizer.eos_token_id,
                pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
            )
        new = out.sequences[0, ids.shape[1] :]
        logprobs = [
            float(torch.log_softmax(score[0], -1)[tok]) for score, tok in zip(out.scores, new, strict=False)
        ]
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        return answer_message(text, list(tools) if tools else None), answer_confidence(logprobs)
