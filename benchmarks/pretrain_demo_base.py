"""Pretrain the demo base on a generic synthetic corpus, on the CPU, from a seed (issue 36 point 4).

    .venv/bin/python -m benchmarks.pretrain_demo_base --out DIR --steps 2400 --repeat-first 1400 --copy-only
    .venv/bin/python -m benchmarks.pretrain_demo_base --out F.json --evaluate DATA --base DIR --tasks extract,tools

The demo base's weights (``ratchet_core/demo_base.safetensors``) were made by this script in two stages, on this
project's 2-core machine (``benchmarks/measured/pretrained_base.json``, ``demo_base``: 760 s + 486 s):

    .venv/bin/python -m benchmarks.pretrain_demo_base --out r7 --lr 1e-3 --copy-only --repeat-first 2800 --steps 3800
    OMP_NUM_THREADS=2 .venv/bin/python -m benchmarks.pretrain_demo_base --out r8 --init r7 --steps 2500 \
        --repeat-first 0 --threads 2 --lr 1e-3

The seeds fix the corpus and the start; the last bits of the weights depend on the machine's float arithmetic (and
the thread count), so a rerun elsewhere makes a base that behaves alike, not the same file: the file in the tree is
the demo base, and its SHA-256 is checked when a base is built (``student_model.DEMO_WEIGHTS_SHA256``).

Measured (``benchmarks/measured/pretrained_base.json``, the report of issue 36 point 4): at lr 3e-3 the copy task
stays at chance; at 1e-3 (the default now) ``repeat`` items alone with ``--copy-only`` go through the induction phase
change at 1,500-2,500 steps (held-out repeats exact 16/40 at 2,500, 40/40 at 4,000: 605 s on one thread). A base
that left the copy phase at 1,400 steps (``--repeat-first 1400``, then the mix) copies no value after a night
(``extract``/``tools`` 0 exact) but learns the labels better than the random base; the demo base's two stages (past
the phase change, then 2,500 mixed steps) answer ``extract`` 126/131 and ``tools`` 119/128 exactly after one night.

The random demo base (``ratchet_core.student_model.build_demo_base(pretrained=False)``: a 2-layer Llama with random
weights and the ByT5 byte tokenizer) has never learnt to copy, and one night's LoRA does not teach it (README, "The learner's settings,
swept": 0 exact `extract`/`tools` answers in 19 runs). This script builds that random base, then trains ALL its
weights (AdamW, one torch thread) on a corpus generated here from ``--seed``, and saves the result as a Hugging Face
folder with the demo base's own tokenizer, chat template and marker file (so the night treats it as the demo base:
embeddings and head trained alongside LoRA, served by Ratchet's student server).

The corpus is generic: words of a vocabulary generated from syllables, values of many made-up shapes (codes such as
``QX-0412`` or ``7731-K``, numbers with or without a symbol or a generated unit, capitalised names), keys and tool
names generated too; nothing of the built-in workloads (their phrases, labels, schemas or tool names). Kinds of item
(``KINDS``), every chat item rendered through the base's chat template as the trainer renders a row
(``ratchet_core.chat_format.render_prompt``/``render_answer``, loss on the answer's tokens):

- ``typed``: a text with values of several shapes; the system prompt names JSON keys (generated words), each with
  the shape it takes ("the code", "the number", ...); the answer is the JSON object (keys sorted, no spaces, as
  structured decoding writes it) whose values are copied from the text.
- ``keyed``: the text says ``key: value`` (or ``key value``, ``key=value``) for a few generated keys among other
  words; the answer is the JSON object of the keys asked for.
- ``tool``: generated tools rendered by the template as signatures; the text asks for one of them by its verb and
  carries its arguments' values in the signature's order; the answer is the template's ``<tool_call>``.
- ``choice``: "which of these words does the text use"; the answer is the word.
- ``span``: copy the sentence of the text that starts with a given word.
- ``repeat``: random printable characters in which one random segment repeats (plain text, loss on every token).
- ``induction``: plain text (no template) in which random segments repeat; loss on every token (the classic
  set-up in which a two-layer attention model learns "find the earlier occurrence, copy what followed").

Prints the loss every ``--log-every`` steps and the seconds, then the exact-answer rate (teacher-forced argmax over
the whole answer, EOS included: what greedy decoding writes) per kind on held-out items (another seed), and writes
``pretrain.json`` beside the weights.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import string
import sys
import time
from pathlib import Path
from typing import Any

KINDS = ("typed", "keyed", "tool", "choice", "span", "induction", "repeat")
DEFAULT_MIX = {"typed": 3, "keyed": 2, "tool": 2, "choice": 1, "span": 1, "induction": 2, "repeat": 4}
_PRINTABLE = string.ascii_letters + string.digits + "!#$%&*+-./:;=?@_~"

_CONSONANTS = "bcdfghjklmnprstvwz"
_VOWELS = "aeiou"
_SHAPES = ("code", "number", "name", "word")
_SHAPE_WORDS = {
    "code": ("the code", "the id", "the reference"),
    "number": ("the number", "the figure", "the quantity"),
    "name": ("the name", "the capitalised word"),
    "word": ("the word after the colon",),
}


class Corpus:
    """Items of the generic corpus, drawn from one ``random.Random`` (deterministic from its seed)."""

    def __init__(self, seed: int, vocab_seed: int = 0):
        vocab_rng = random.Random(f"vocab:{vocab_seed}")
        words: set[str] = set()
        while len(words) < 1500:
            n = vocab_rng.choice((1, 2, 2, 2, 3, 3))
            w = "".join(vocab_rng.choice(_CONSONANTS) + vocab_rng.choice(_VOWELS) for _ in range(n))
            if vocab_rng.random() < 0.4:
                w += vocab_rng.choice(_CONSONANTS)
            words.add(w)
        self.words = sorted(words)
        # a Zipf-like frequency, so that some words are common as in any text
        self.weights = [1.0 / (i + 10) for i in range(len(self.words))]
        vocab_rng.shuffle(self.words)
        self.units = sorted(
            {"".join(vocab_rng.choice(string.ascii_uppercase) for _ in range(3)) for _ in range(12)}
        )
        self.rng = random.Random(f"corpus:{seed}")

    # values ---------------------------------------------------------------------------------------------------
    def word(self) -> str:
        return self.rng.choices(self.words, self.weights)[0]

    def code(self) -> str:
        r = self.rng
        up, dig = string.ascii_uppercase, string.digits

        def s(chars: str, n: int) -> str:
            return "".join(r.choice(chars) for _ in range(n))

        shape = r.randrange(8)
        if shape == 0:
            return f"{s(up, 1)}-{s(dig, r.randint(3, 6))}"
        if shape == 1:
            return f"{s(up, 2)}-{s(dig, r.randint(3, 5))}"
        if shape == 2:
            return s(dig, r.randint(5, 8))
        if shape == 3:
            return f"{s(up, r.randint(2, 3))}{s(dig, r.randint(2, 4))}"
        if shape == 4:
            return f"{s(dig, r.randint(2, 4))}-{s(up, r.randint(1, 3))}"
        if shape == 5:
            return f"#{s(dig, r.randint(3, 6))}"
        if shape == 6:
            return s("0123456789abcdef", r.randint(6, 8))
        return f"{s(up, 1)}{s(dig, 2)}-{s(up, 1)}{s(dig, 2)}"

    def number(self) -> tuple[str, Any]:
        """(as written in the text, the JSON value)."""
        r = self.rng
        if r.random() < 0.6:
            whole, cents = r.randint(0, 9999) if r.random() < 0.3 else r.randint(1, 999), r.randint(0, 99)
            text = f"{whole}.{cents:02d}"
            value: Any = float(text)
        else:
            value = r.randint(1, 99999)
            text = str(value)
        form = r.randrange(5)
        if form == 0:
            text = f"{r.choice('$£€')}{text}"
        elif form == 1:
            text = f"{text} {r.choice(self.units)}"
        elif form == 2:
            text = f"{r.choice(self.units)} {text}"
        return text, value

    def name(self) -> str:
        w = self.word().capitalize()
        return w if self.rng.random() < 0.7 else f"{w} {self.word().capitalize()}"

    def value(self, shape: str) -> tuple[str, Any]:
        if shape == "code":
            v = self.code()
            return v, v
        if shape == "number":
            return self.number()
        if shape == "name":
            v = self.name()
            return v, v
        v = self.word()
        return v, v

    def filler(self, lo: int, hi: int) -> list[str]:
        return [self.word() for _ in range(self.rng.randint(lo, hi))]

    def text_with(self, pieces: list[str], lo: int = 3, hi: int = 9) -> str:
        """Generated words with `pieces` inserted in order, in one to three sentences."""
        out = self.filler(1, 4)  # a filler word first: the capital never falls on a piece
        for piece in pieces:
            out.append(piece)
            out += self.filler(lo // 2, hi // 2)
        out += self.filler(0, 3)
        text, sentence = [], []
        for i, w in enumerate(out):
            sentence.append(w)
            if len(sentence) > 4 and self.rng.random() < 0.15 and i < len(out) - 1:
                text.append(" ".join(sentence) + self.rng.choice((".", ",", ";", "?")))
                sentence = []
        text.append(" ".join(sentence) + self.rng.choice((".", ".", "!", "?")))
        s = " ".join(text)
        return s[0].upper() + s[1:]

    # items: (system, user, tools, answer message) or ("", plain text) ------------------------------------------
    def keys(self, n: int) -> list[str]:
        """`n` distinct generated names (uniform over the vocabulary, unlike the text's Zipf-like words)."""
        out: list[str] = []
        pick = self.rng.choice
        while len(out) < n:
            k = pick(self.words) if self.rng.random() < 0.6 else f"{pick(self.words)}_{pick(self.words)}"
            if k not in out:
                out.append(k)
        return out

    def typed(self) -> dict:
        r = self.rng
        shapes = r.sample(_SHAPES[:3], r.randint(1, 3))
        keys = self.keys(len(shapes))
        values = [self.value(s) for s in shapes]
        order = list(range(len(shapes)))
        r.shuffle(order)
        text = self.text_with([values[i][0] for i in order])
        asked = ", ".join(f"{k} ({r.choice(_SHAPE_WORDS[s])})" for k, s in zip(keys, shapes, strict=True))
        system = r.choice(
            (
                f"Write the text's values as JSON with {asked}.",
                f"Return JSON: {asked}.",
                f"Read the message. Answer with a JSON object of {asked}.",
            )
        )
        answer = {k: v for k, (_, v) in zip(keys, values, strict=True)}
        return self._chat(system, text, None, _json_content(answer))

    def keyed(self) -> dict:
        r = self.rng
        keys = self.keys(r.randint(2, 5))
        shapes = [r.choice(_SHAPES) for _ in keys]
        values = [self.value(s) for s in shapes]
        sep = r.choice((": ", " ", "=", " is "))
        pieces = [f"{k}{sep}{v[0]}" for k, v in zip(keys, values, strict=True)]
        text = self.text_with(pieces, 1, 5)
        asked = r.sample(range(len(keys)), r.randint(1, min(3, len(keys))))
        system = r.choice(
            (
                "Answer with the JSON of " + ", ".join(keys[i] for i in asked) + ".",
                "Copy " + " and ".join(keys[i] for i in asked) + " from the message as JSON.",
            )
        )
        answer = {keys[i]: values[i][1] for i in asked}
        return self._chat(system, text, None, _json_content(answer))

    def tool(self) -> dict:
        r = self.rng
        verbs = self.keys(r.randint(2, 5))
        tools, signatures = [], []
        for verb in verbs:
            args = self.keys(r.randint(1, 3))
            shapes = [r.choice(_SHAPES[:3]) for _ in args]
            signatures.append((verb, args, shapes))
            tools.append(
                {
                    "type": "function",
                    "function": {
                        "name": verb,
                        "description": "",
                        "parameters": {
                            "type": "object",
                            "properties": {a: {"type": "string"} for a in args},
                            "required": args,
                        },
                    },
                }
            )
        verb, args, shapes = r.choice(signatures)
        values = [self.value(s) for s in shapes]
        text = self.text_with([verb.replace("_", " ")] + [v[0] for v in values], 1, 6)
        arguments = {a: v[1] for a, v in zip(args, values, strict=True)}
        call = {
            "id": "call_0",
            "type": "function",
            "function": {"name": verb, "arguments": json.dumps(arguments)},
        }
        system = r.choice(("Call the function the message asks for.", "Use one tool.", ""))
        return self._chat(system, text, tools, {"role": "assistant", "content": None, "tool_calls": [call]})

    def choice(self) -> dict:
        r = self.rng
        options = self.keys(r.randint(3, 6))
        pick = r.choice(options)
        text = self.text_with([pick], 4, 12)
        system = r.choice(
            (
                f"Which of these words does the message use: {', '.join(options)}? Answer with the word only.",
                f"Name the word of the text that is one of {', '.join(options)}.",
            )
        )
        return self._chat(system, text, None, {"role": "assistant", "content": pick})

    def span(self) -> dict:
        r = self.rng
        sentences = []
        for _ in range(r.randint(2, 5)):
            s = " ".join(self.filler(3, 9))
            if r.random() < 0.4:
                s += " " + self.value(r.choice(_SHAPES[:3]))[0]
            sentences.append(s[0].upper() + s[1:] + ".")
        firsts = [s.split()[0] for s in sentences]
        i = r.randrange(len(sentences))
        if firsts.count(firsts[i]) > 1:
            i = firsts.index(firsts[i])
        system = f"Copy the sentence that starts with {firsts[i]}."
        return self._chat(system, " ".join(sentences), None, {"role": "assistant", "content": sentences[i]})

    def induction(self) -> dict:
        r = self.rng
        segments = [
            " ".join(self.filler(2, 6)) if r.random() < 0.5 else self.value(r.choice(_SHAPES))[0]
            for _ in range(4)
        ]
        parts: list[str] = []
        while sum(len(p) + 1 for p in parts) < r.randint(150, 380):
            parts.append(r.choice(segments) if r.random() < 0.5 else " ".join(self.filler(1, 4)))
        return {"plain": " ".join(parts)}

    def repeat(self) -> dict:
        """Random printable characters in which one random segment comes back two or three times: with so many
        symbols the earlier occurrence of the current character is nearly unique, the easiest case to learn
        "find it, copy what followed" from, which the word-level kinds then need over several characters. With
        ``copy_only`` the loss is on the repeats alone (the rest is noise no model can predict)."""
        r = self.rng
        segment = "".join(r.choice(_PRINTABLE) for _ in range(r.randint(8, 40)))
        text, spans = "", []
        for n in range(r.randint(2, 3)):
            noise = "".join(r.choice(_PRINTABLE) for _ in range(r.randint(1, 30)))
            text += noise + " "
            if n:
                spans.append((len(text), len(text) + len(segment)))
            text += segment + " "
        return {"plain": text.rstrip(), "copy_spans": spans}

    def _chat(self, system: str, user: str, tools: list | None, answer: dict) -> dict:
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": user}
        ]
        return {"messages": messages, "tools": tools, "answer": answer}

    def item(self, kind: str) -> dict:
        out = getattr(self, kind)()
        out["kind"] = kind
        return out


def _json_content(obj: dict) -> dict:
    return {
        "role": "assistant",
        "content": json.dumps(dict(sorted(obj.items())), separators=(",", ":"), ensure_ascii=False),
    }


def encode_item(tokenizer, item: dict, copy_only: bool = False) -> tuple[list[int], list[int]]:
    """(input ids, labels): a chat item as the trainer encodes a row (prompt masked), plain text on every token."""
    from ratchet_core.chat_encoding import encode, encode_answer
    from ratchet_core.chat_format import render_answer, render_prompt

    if "plain" in item:
        ids = encode(tokenizer, item["plain"]) + [tokenizer.eos_token_id]
        if copy_only and "copy_spans" in item:  # ASCII through a byte tokenizer: a character is a token
            labels = [-100] * len(ids)
            for lo, hi in item["copy_spans"]:
                labels[lo + 1 : hi] = ids[lo + 1 : hi]  # the segment's first character cannot be known
            return ids, labels
        return ids, list(ids)
    p = encode(tokenizer, render_prompt(tokenizer, item["messages"], item["tools"]))
    t = encode_answer(tokenizer, render_answer(tokenizer, item["messages"], item["tools"], item["answer"]))
    return p + t, [-100] * len(p) + t


def batch_tensors(batch: list[tuple[list[int], list[int]]], pad: int):
    import torch

    width = max(len(ids) for ids, _ in batch)
    ids_t = torch.full((len(batch), width), pad, dtype=torch.long)
    lab_t = torch.full((len(batch), width), -100, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, (ids, lab) in enumerate(batch):
        ids_t[row, : len(ids)] = torch.tensor(ids)
        lab_t[row, : len(lab)] = torch.tensor(lab)
        mask[row, : len(ids)] = 1
    return ids_t, lab_t, mask


def exact_rates(model, tokenizer, items: list[dict], batch_size: int = 32) -> dict[str, str]:
    """Per kind: items whose every answer token is the argmax (teacher-forced), as "right/n", and the share of
    answer tokens that are."""
    import torch

    model.eval()
    counts: dict[str, list[int]] = {}
    rows = [
        (it["kind"], encode_item(tokenizer, it, True))
        for it in items
        if "plain" not in it or "copy_spans" in it
    ]
    with torch.no_grad():
        for begin in range(0, len(rows), batch_size):
            chunk = rows[begin : begin + batch_size]
            ids, lab, mask = batch_tensors([r for _, r in chunk], tokenizer.pad_token_id)
            pred = model(input_ids=ids, attention_mask=mask).logits.argmax(-1)
            for row, (kind, _) in enumerate(chunk):
                target = lab[row, 1:]
                scored = target != -100
                hits = (pred[row, :-1] == target) & scored
                c = counts.setdefault(kind, [0, 0, 0, 0])
                c[0] += int(bool(hits.sum() == scored.sum()))
                c[1] += 1
                c[2] += int(hits.sum())
                c[3] += int(scored.sum())
    model.train()
    return {k: f"{r}/{n} (tokens {t / max(1, m):.3f})" for k, (r, n, t, m) in sorted(counts.items())}


def pretrain(args: argparse.Namespace) -> dict:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    from ratchet_core import student_model

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    random_dir = out.parent / f"{out.name}-random"
    shape = {"num_hidden_layers": args.layers}
    default = dict(student_model.DEMO_CONFIG)
    student_model.DEMO_CONFIG = {**default, **shape}
    try:
        student_model.build_demo_base(random_dir, pretrained=False)
    finally:
        student_model.DEMO_CONFIG = default
    tokenizer = AutoTokenizer.from_pretrained(random_dir)
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM.from_pretrained(args.init or random_dir, dtype=torch.float32)
    if args.init_std:  # the same shape drawn at another scale (the demo base's is initializer_range 0.02)
        model.config.initializer_range = args.init_std
        model = LlamaForCausalLM(model.config)
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.train()
    mix = dict(DEFAULT_MIX, **json.loads(args.mix))
    kinds = [k for k in KINDS if mix.get(k, 0) > 0]
    weights = [mix[k] for k in kinds]
    corpus = Corpus(args.seed)
    held = Corpus(args.seed + 1_000_003)
    held_items = [held.item(k) for k in kinds if k != "induction" for _ in range(args.eval_items)]
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    warm = max(1, int(args.steps * 0.03))

    def factor(k: int) -> float:
        if k < warm:
            return (k + 1) / warm
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (k - warm) / max(1, args.steps - warm)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    curve, evals = [], []
    started, cpu0 = time.perf_counter(), time.process_time()
    running, tokens = 0.0, 0
    queue: list[list[tuple[list[int], list[int]]]] = []
    for step in range(1, args.steps + 1):
        if not queue:
            # 8 batches at a time from items sorted by length: far less padding than a batch of random lengths
            pool = (["repeat"], [1]) if step <= args.repeat_first else (kinds, weights)
            items = [
                encode_item(tokenizer, corpus.item(corpus.rng.choices(*pool)[0]), args.copy_only)
                for _ in range(args.batch * 8)
            ]
            items = sorted(
                ((i[: args.max_len], lab[: args.max_len]) for i, lab in items), key=lambda x: len(x[0])
            )
            queue = [items[k : k + args.batch] for k in range(0, len(items), args.batch)]
            corpus.rng.shuffle(queue)
        batch = queue.pop()
        tokens += sum(len(ids) for ids, _ in batch)
        ids, lab, mask = batch_tensors(batch, tokenizer.pad_token_id)
        loss = model(input_ids=ids, attention_mask=mask, labels=lab).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        running += float(loss.detach())
        if step % args.log_every == 0:
            row = {
                "step": step,
                "loss": round(running / args.log_every, 4),
                "seconds": round(time.perf_counter() - started, 1),
                "tokens": tokens,
            }
            running = 0.0
            curve.append(row)
            print(json.dumps(row), flush=True)
        if args.eval_every and step % args.eval_every == 0 and step < args.steps:
            rates = exact_rates(model, tokenizer, held_items)
            evals.append({"step": step, "exact": rates})
            print(json.dumps(evals[-1]), flush=True)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu0
    rates = exact_rates(model, tokenizer, held_items)
    evals.append({"step": args.steps, "exact": rates})
    print(json.dumps(evals[-1]), flush=True)

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    model.save_pretrained(out)
    for f in random_dir.iterdir():
        if f.name not in ("model.safetensors", "config.json", "generation_config.json"):
            shutil.copy2(f, out / f.name)
    doc = {
        "what": "the demo base pretrained on the generic synthetic corpus of benchmarks/pretrain_demo_base.py",
        "args": vars(args),
        "mix": mix,
        "params": sum(p.numel() for p in model.parameters()),
        "train_seconds": round(seconds, 1),
        "train_cpu_seconds": round(cpu, 1),
        "tokens": tokens,
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "curve": curve,
        "held_out_exact": evals,
    }
    (out / "pretrain.json").write_text(json.dumps(doc, indent=2))
    return doc


def evaluate(data: Path, base: Path, tasks: list[str], out: Path, overrides: dict) -> list[dict]:
    """The learner sweep's night job (``benchmarks.learner_sweep.run_job``: ``NIGHT_TRAINING``, cold, refit, one
    thread, scored exactly on the night's golden rows, per JSON key on the copy tasks) over `base`, one task after
    the other in this process, on the nights ``learner_sweep build`` wrote in `data`; appends to `out`."""
    from benchmarks.learner_sweep import run_job

    results = json.loads(out.read_text()) if out.exists() else []
    for task in tasks:
        before = [round(x, 2) for x in os.getloadavg()]
        spec = {
            "label": "night-cpu",
            "task": task,
            "base": base.name,
            "overrides": overrides,
            "device": "cpu",
            "data": str(data),
            "bases": str(base.parent),
        }
        res = run_job(spec)
        res["base_path"] = str(base)
        res["loadavg_before"], res["loadavg_after"] = before, [round(x, 2) for x in os.getloadavg()]
        print(json.dumps(res), flush=True)
        results.append(res)
        out.write_text(json.dumps(results, indent=2))
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--out",
        required=True,
        help="the pretrained base's folder (the random one goes beside it); with --evaluate: the results JSON",
    )
    ap.add_argument(
        "--evaluate", default="", help="a learner_sweep data folder: train nights over --base instead"
    )
    ap.add_argument("--base", default="", help="--evaluate: the base folder")
    ap.add_argument("--tasks", default="extract,tools", help="--evaluate: tasks of the data folder")
    ap.add_argument("--overrides", default="{}", help="--evaluate: JSON overrides of NIGHT_TRAINING")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3, help="3e-3 never left chance on the copy task")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--mix", default="{}", help="JSON: weight per kind (KINDS), over DEFAULT_MIX")
    ap.add_argument(
        "--init", default="", help="start from this pretrained base folder's weights (same shape)"
    )
    ap.add_argument("--init-std", type=float, default=0.0, help="re-draw the weights at this std (0: keep)")
    ap.add_argument("--copy-only", action="store_true", help="repeat items: loss on the repeats only")
    ap.add_argument(
        "--repeat-first", type=int, default=0, help="the first N steps train on repeat items only"
    )
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--eval-items", type=int, default=40, help="held-out items per kind")
    ap.add_argument("--show", type=int, default=0, help="print this many items of each kind and exit")
    args = ap.parse_args(argv)
    if args.show:
        from transformers import ByT5Tokenizer

        from ratchet_core.chat_format import RATCHET_CHAT_TEMPLATE, render_answer, render_prompt

        tok = ByT5Tokenizer()
        tok.chat_template = RATCHET_CHAT_TEMPLATE
        corpus = Corpus(args.seed)
        for kind in KINDS:
            for _ in range(args.show):
                it = corpus.item(kind)
                if "plain" in it:
                    print(f"--- {kind}\n{it['plain']}")
                    continue
                p = render_prompt(tok, it["messages"], it["tools"])
                print(f"--- {kind}\n{p}{render_answer(tok, it['messages'], it['tools'], it['answer'])}")
        return 0
    if args.evaluate:
        tasks = [t for t in args.tasks.split(",") if t]
        evaluate(Path(args.evaluate), Path(args.base), tasks, Path(args.out), json.loads(args.overrides))
        return 0
    pretrain(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
