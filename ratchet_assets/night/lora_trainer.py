"""The LoRA trainer: train the student's adapter on the teacher's answers (train.jsonl, OpenAI chat fine-tuning format).

Each row ``{"messages": [..., final assistant message], "tools": ..., "response_format": ...}`` is rendered by the
base's own chat template (``ratchet_core.chat_format.training_pair``: the prompt as vLLM renders the request,
``response_format`` left out as vLLM leaves it out; the target what the template renders for the answer turn, tool
calls in the template's native format) and tokenised as the server does (``ratchet_core.chat_encoding``: the
target up to and including its EOS token). The loss is the mean token cross-entropy over the target tokens only;
prompt tokens are masked (label -100). A base without a chat template is refused (``ChatTemplateError``).

Context window: nothing is cut. A row whose prompt and target together exceed ``max_len`` tokens (0 = the base's
context, ``max_position_embeddings``; set it to the serving endpoint's ``--max-model-len``) is left out and counted
(``rows_left_out`` in ``ratchet_train.json`` and the result): vLLM takes a prompt whole or refuses it, so training
on a cut prompt would teach the adapter a prompt it never sees. The resolved ``max_len`` is saved there too.

Schedule: ``epochs_run = max(epochs, ceil(min_steps / steps_per_epoch))`` with ``steps_per_epoch =
ceil(rows / batch_size)``: a small training set (an early night: 179 rows are 12 steps an epoch, 48 steps in 4
epochs, measured to leave the demo adapter at loss ~1.8, writing garbage) gets enough steps to learn; a large one
runs exactly ``epochs``. ``min_steps = 0`` turns this off.

Early stopping (``validation_share > 0``; the night's default, ``night.adapter.NIGHT_TRAINING``): the rows whose
group (below) hashes below ``validation_share`` are held out (never golden rows: the training set has none); the schedule
is ``max(epochs_run above, max_epochs)`` epochs; after each epoch the held-out rows are scored (exact answer,
teacher-forced, and mean target-token loss); the best epoch (higher accuracy, then a loss lower by ``min_loss_delta``) is kept, and the run
stops after ``patience`` epochs without progress (counted only once the fixed schedule's ``epochs_run`` above
is done: a small set's split is a handful of rows, too noisy to cut it shorter), at the end of the schedule, or
past ``time_budget_s``. Progress is a better epoch, and with ``patience_on_loss`` (the night's setting) also an
epoch whose validation loss is the lowest of the run by ``min_loss_delta``: a slow task's split wobbles while it
climbs, and counting only better epochs stopped `departments` night 2 at 0.59 on its split (77/194 golden) two
epochs into a climb to 0.90 (187/194) (``patience_state``).
Stopping at the first all-right epoch was measured too early: a five-label task at 68/68 on its validation split
answered 173/184 golden rows (0.94); trained on while the loss fell, 184/184. ``row_tasks`` gives the accuracy per
task. Nothing here depends on the clock except the time budget (a run it cuts says so in ``stopped``).

Validation split (``validation_groups``): ``near_duplicate`` (default) hashes each row's ``near_duplicate_key`` (the
request text without system prompt, lowercased, digits ``0``, placeholders one word, punctuation dropped, as a set
of words), so near-duplicates (a resent request with another ticket number or case) are held out or trained on
together and the validation accuracy predicts fresh requests; ``prompt`` hashes each rendered prompt, the older
split, which put near-duplicates on both sides and overstated it (``tests/night/test_validation_split.py``).

Warm start (``init_adapter``): the weights start from a parent adapter of the same LoRA shape (``night.warm_start``
decides whether and picks the rows), loaded trainable; its score on the validation split is measured before the
first epoch (``initial_accuracy``/``initial_loss``) and an epoch must beat it by the rule above, else the parent's
weights are kept
(``best_epoch`` 0); the peak learning rate is ``warm_lr``; the ``min_steps`` floor, meant for a fresh LoRA, does
not apply: patience counts past half of ``max_epochs`` instead (``epochs`` without a validation split).

Refit (``refit``): the split chooses, then every row teaches, on a COLD night. Once the selection run above has
chosen its best epoch, a fresh LoRA is built again from the same seed and trained on every row, the held-out ones
included, for as many optimiser steps as the selection took up to that epoch, on the selection's learning-rate
schedule step for step (every step at the learning rate the selection took it at, so the refit ends at the rate
the chosen epoch ended at); those weights are saved. Golden rows are never in train.jsonl, so the certificate stays
honest; the split only picked a number. The same steps, not the same epochs: an epoch over every row is 1/(1 -
share) times longer, so the same epochs cost a cold night that much more (``make demo``'s night 1: 207 refit steps
where the selection's 9 epochs took 162). ``validation.refit`` reports rows, passes over every row begun, steps
and the selection's steps. With ``refit_floor`` (the night's setting) the refit trains at least the fixed
schedule's floor (``epochs_run`` above), as patience never stops a selection run before it (``floor_steps`` in the
report when it did): the pretrained demo base's split peaks early, at epochs where its held-out groups (whole
phrasings it never saw) stop improving, and a 300-request ``tickets`` night refit for the chosen 56 and 72 steps
answered 50/59 and 42/59 golden rows; at the floor's 152 and 153, 54/59 and 53/59
(``benchmarks/measured/pretrained_base.json``, ``demo_base``).
A refit can fall short: it ends at the learning rate the chosen epoch ended at, which on a long budget's schedule
(the step budget's x4) is still most of the peak, and one sample of weights there is not the split's best of many.
``ratchet sim --student lora`` measured one: `extract` night 3, 0.99 on its split at epoch 11, refit 792 steps,
answered 119/150 of its own training rows and 264/352 golden. So the refit is scored on the split's rows, which it
trained on: a task it answers significantly worse (``refit_short_on``: exact McNemar, one-sided, 0.05) than the
chosen epoch answered them unseen means the refit failed, and the chosen epoch's weights are saved instead
(``validation.refit.kept`` "selection", ``short_on`` the tasks; ``split_accuracy`` is the refit's score either
way). Re-run with the guard, that night saved its chosen epoch: 351/352 golden, certified.
A WARM night is never refit: the weights saved are the selection's best epoch, the one that beat the parent on the
held-out groups ``night.warm_start`` passes (the new rows' and the old ones'), or the parent's own, kept. A refit of a warm night trains on those rows too, so nothing
is left to show that what it saves beats the parent (``make demo`` saved such refit adapters that scored 167/182,
200/211 and 188/215 golden rows against their parent's 100 %).
A warm night's parent that answers some training row differently from its label is trained even when it is all
right on the split (``initial_train_accuracy``): those rows are worth steps.

Short of steps (``extend_below``, ``extend_delta``, ``extend_by``, ``max_extensions``): a cold selection run whose
schedule ran out (every epoch ran: no patience stop before the last epoch, no time budget) while some task's
validation accuracy had never reached its threshold and had risen by at least ``STILL_LEARNING_RISE`` since the
schedule's halfway epoch (``short_of_steps``) was short of steps. The threshold is the accuracy the task's own split
would need to certify ``extend_below`` at ``extend_delta`` (``certify_accuracy``, the certificate's Clopper-Pearson
bound; the night's 0.95 at 0.05: every row on a split under 94 rows, 99/100, 196/200), or ``extend_below`` itself
with ``extend_delta`` 0: a split at 0.95 cannot certify 0.95, and the golden set the certificate reads is about the
split's size (``make demo``'s nights of 600 requests: 76-91 split rows, 106-111 golden rows). A task named in
``extend_targets`` (the night fills in those whose policy or night target differs) is held to its own target and
delta instead. With ``extend_by`` "rerun" it runs again from the same seed and data order on a schedule twice as
long (``min_steps`` and ``max_epochs`` doubled), at most ``max_extensions`` times; the last run is the selection
(its best epoch, and the refit's steps and schedule), and it is the one a night started at 2x trains. With "refit"
(the night's setting) there is no second selection run: the split has said the schedule was short, and the refit
trains every row for the whole doubled schedule (``validation.refit.schedule`` "doubled"). Measured on the ten
nights of ``stop_4`` (``benchmarks/measured/learner_issue36.json``, ``stop_5``): golden rows right 931 -> 945 of
956, fresh 2375 -> 2415 of 2444, certified 5 -> 6, each doubled night ~0.6x as long (the second selection run was
~40% of it). A task at or above its threshold is done, a flat one (``extract`` on the demo base: 0 at every epoch)
gains nothing from steps; ``validation.short_of_steps`` lists the shorter runs (schedule, steps, accuracy per epoch,
the tasks still learning). Measured: ``benchmarks/measured/learner_issue36.json``, ``stop_3`` to ``stop_5``.

PII surrogates (``pii_surrogates``, default 0 = off): the ledger, and so train.jsonl and the golden set, holds
redacted text (``<EMAIL_1a2b3c4d>``), but the gateway sends the student the client's real text. A demo adapter
trained only on placeholders was measured 100 % right on golden yet 29 % wrong on live tickets carrying an e-mail
address (45/153 shadow answers; 0/347 without PII). With ``pii_surrogates = p``, each row is picked with
probability p (seeded) and every ``<EMAIL_h>`` / ``<PHONE_h>`` placeholder in its prompt AND target is replaced by
a made-up value derived from ``h`` alone (same placeholder, same value; ``surrogate``), so the adapter learns both
forms and copies a value from prompt to answer as the teacher did. The other rows keep their placeholders (the
golden set is evaluated in that form).

Optimiser: AdamW, linear warm-up over the first 5 % of steps then linear decay to 0; seeds fixed (torch, data
order), so the same data and config give the same adapter on the same machine.

Shared prompt prefix (``_forward``): the rows of a batch usually begin with the same tokens (the template's system
turn and the application's system prompt: 148 of a `tickets` row's ~230 tokens on the demo base). That prefix is
run once, its keys and values repeated for every row, and only each row's own tokens after it are run; the loss,
its gradients and the validation scores are those of running every row whole (a test checks both against the plain
batch: the same to float rounding, ``tests/night/test_shared_prefix.py``), at about half the compute per step
(measured 0.36-0.39 s -> 0.16-0.17 s a `tickets` step of 16 rows on one thread). The prefix stops before any row's
first answer token, so every predicted token is predicted by the per-row pass; it is used only when it is at least
``SHARED_PREFIX_MIN`` tokens long and never with LoRA dropout (one dropout mask for the shared tokens would not be
the plain batch's). Like the thread count it changes the last bits of the weights, not the config hash.

Files saved: the standard PEFT pair ``adapter_config.json`` + ``adapter_model.safetensors`` (plus
``ratchet_train.json``), loadable with ``PeftModel.from_pretrained`` and by vLLM's ``/v1/load_lora_adapter``.

``modules_to_save`` and vLLM (checked against vLLM's docs and issue tracker): vLLM does NOT load adapters
that carry fully trained ``embed_tokens``/``lm_head`` weights (peft ``modules_to_save``) — see vllm-project/vllm
issue #9280 (closed unresolved) and the unmerged PRs #8082 / #11714 ("LoRA with lm_head and embed_tokens fully
trained"); the older ``lora_extra_vocab_size`` path only covered added tokens. So ``modules_to_save`` is used
only for a demo base with random weights (one a home built before the demo base was pretrained: its embeddings and
head must be learnt, and it is served by Ratchet's own student server), and is empty by default for a real base,
whose adapters must stay vLLM-loadable (the adapter reconciler checks it before loading into vLLM:
``ratchet_assets.release.vllm_compat``), and for the pretrained demo base, whose embeddings and head already know
bytes: trained in full at the LoRA's rate they gave up part of what the pretraining taught (measured on the ten
judged nights, ``benchmarks/measured/pretrained_base.json``, ``lora_only``).

torch/transformers/peft are imported inside the functions: importing this module stays light.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ratchet_core.chat_encoding import TRAIN_META_FILE, context_length, encode, encode_answer
from ratchet_core.chat_format import training_pair
from ratchet_stats.certificate import adapter_digest, adapter_file_hashes

DEMO_MODULES_TO_SAVE = ["embed_tokens", "lm_head"]


@dataclass
class LoraTrainConfig:
    """Hyper-parameters of one LoRA training run (all of them end up in the adapter's metadata)."""

    # Defaults: the settings that certified `tickets` on the demo base (118/118 golden rows after ~520 examples);
    # (3 epochs, lr 5e-3, rank 16) did not.
    rank: int = 32
    alpha: int = 32
    dropout: float = 0.0
    lr: float = 4e-3
    epochs: int = 4
    batch_size: int = 16
    # The longest sequence (prompt + answer, in tokens) trained on; longer rows are left out, never cut (module
    # docstring, "Context window"). 0 = the base's context (its max_position_embeddings).
    max_len: int = 0
    seed: int = 0
    # At least this many optimiser steps: a small training set runs more epochs (module docstring, "Schedule").
    # 0 = exactly `epochs`. Part of the config (and so of the config hash) like every hyper-parameter.
    min_steps: int = 150
    target_modules: str | list[str] = "all-linear"
    # None = decide from the base: DEMO_MODULES_TO_SAVE for a demo base with random weights, none for the
    # pretrained demo base and for a real base (vLLM).
    modules_to_save: list[str] | None = None
    weight_decay: float = 0.0
    warmup_fraction: float = 0.05
    # Share of rows whose e-mail/phone placeholders become realistic made-up values (module docstring).
    pii_surrogates: float = 0.0
    # None = leave torch's thread count alone (the caller's process may be serving too); 0 = every CPU this process
    # may use (``cpu_threads``). On a CPU shared with other busy processes, 1 is far faster than 2 (measured 6x:
    # OpenMP threads spin waiting for each other) unless the threads wait passively (``train_job`` sets
    # OMP_WAIT_POLICY=PASSIVE for more than one: the demo base's 48 steps took 19.7 s on one thread, 11.6 s on two
    # spinning, 13.7 s on two passive on an idle 2-core machine, and 19.1 / 57.5 / 20.8 s with the other core
    # busy). The thread count changes the last bits of the weights (floating-point sums split differently), so the
    # adapter's ``ratchet_train.json`` records it (``torch_threads``); it stays out of the config hash: a rerun
    # reuses the adapter the ledger holds rather than retraining.
    num_threads: int | None = None
    # Adaptive schedule (issue 16), off at 0: hold out this share of the training rows (chosen by a hash of the
    # prompt, never golden rows: those are not in the training set) as a validation split; after each epoch measure
    # exact-answer accuracy on it (teacher-forced: every target token is the argmax) and, to break ties, its mean
    # target-token loss; keep the best epoch's weights and stop after `patience` epochs without improvement, after
    # `max_epochs` (the learning rate decays linearly over them), or when `time_budget_s` is spent.
    validation_share: float = 0.0
    patience: int = 2
    # A tie in validation accuracy counts as better only when the mean target-token loss falls by at least this
    # much (nats per target token; Keras' ``min_delta``): below it the answers the split checks no longer change,
    # and the demo's warm nights 3 and 4 ran 4 more epochs each for drops of 0.0003-0.003 that changed none.
    min_loss_delta: float = 0.005
    max_epochs: int = 12
    time_budget_s: float = 0.0  # 0 = no time budget
    # How the validation split is drawn (module docstring, "Validation split"): "near_duplicate" holds out whole
    # groups of near-duplicate prompts (`near_duplicate_key`), "prompt" is the older split by a hash of each prompt.
    validation_groups: str = "near_duplicate"
    # Where the weights start (module docstring, "Warm start"): "cold" = a fresh LoRA; "warm" = the night may start
    # from a parent adapter (``night.warm_start`` decides, and trains on the new rows plus a replay sample: a row of
    # the parent's days is replayed iff sha256("replay:" key) falls below `replay_share`, at most `replay_cap` rows,
    # lowest hashes first).
    start: str = "cold"
    replay_share: float = 0.25
    replay_cap: int = 1000
    # the peak learning rate of a warm start: the parent's weights are already good, and `lr` (meant for a fresh
    # LoRA) was measured to knock them off (tickets night 2: no epoch beat the parent on its validation split)
    warm_lr: float = 1e-3
    # "The split chooses, then every row teaches" (module docstring, "Refit"): once the validation split has chosen
    # the number of steps, a cold night trains again from the same seed on every row, held-out rows included, for
    # that many steps; the adapter saved is that one. A warm night is never refit: it saves the epoch that beat its
    # parent on held-out rows. Off = the selection run's best epoch is saved, and the held-out rows never teach.
    refit: bool = False
    # The validation split's floor in rows (module docstring, "Validation split"): a split of `validation_share`
    # of a small night is a handful of rows that a good parent answers all right; the share rises to hold out at
    # least this many rows (never more than MAX_SIZED_SHARE of them). 0 = exactly `validation_share`.
    validation_min_rows: int = 0
    # Short of steps (module docstring): a cold selection run whose schedule ran out while a task's validation
    # accuracy was below `extend_below` and still rising runs again on a schedule twice as long, at most
    # `max_extensions` times (2: up to 4x the steps; `time_budget_s` still ends a run). 0 = off.
    extend_below: float = 0.0
    max_extensions: int = 2
    # 0: `extend_below` is the split accuracy a task must reach. > 0: `extend_below` is a certificate's target and
    # this its delta; a task must reach the accuracy its own split would need to certify that target
    # (``certify_accuracy``: the least k/rows whose Clopper-Pearson lower bound reaches it, 1.0 on a split too small
    # to certify; a split of ~100 rows needs 0.99, not 0.95).
    extend_delta: float = 0.0
    # task -> [target, delta] of the certificate that will judge it (its policy's, else the night's; the night
    # fills it in, ``night.adapter.extend_targets``): with `extend_delta` > 0 such a task must reach the accuracy its
    # split would need to certify that target at that delta instead of `extend_below` at `extend_delta`. Only the
    # tasks whose pair differs from those two are named, so a night at the defaults keeps its config hash.
    extend_targets: dict[str, list[float]] = field(default_factory=dict)
    # How a run short of steps gets them: "rerun" = a new selection run on the doubled schedule (which chooses the
    # refit's steps, and may double again); "refit" = no second selection run: the refit trains every row for the
    # whole doubled schedule (needs `refit`; a night without it reruns).
    extend_by: str = "rerun"
    # A refit trains at least the fixed schedule's floor (`epochs`, `min_steps`: enough steps for a fresh LoRA),
    # as patience never stops a selection run before it; off = exactly the epochs the split chose, which on a
    # pretrained base can be a third of the floor: its split peaks early (module docstring, "Refit").
    refit_floor: bool = False
    # Patience counts epochs without progress: with this on, an epoch whose validation loss is the lowest of the run
    # by `min_loss_delta` is progress too, though the best epoch is still chosen by accuracy, then loss. Off =
    # only a better epoch resets patience, which stopped a slow task mid-climb (module docstring, "Early stopping").
    patience_on_loss: bool = False

    def __post_init__(self) -> None:
        if self.validation_groups not in VALIDATION_GROUPS:
            raise ValueError(
                f"validation_groups {self.validation_groups!r} is not one of {', '.join(VALIDATION_GROUPS)}"
            )
        if self.extend_by not in EXTEND_BY:
            raise ValueError(f"extend_by {self.extend_by!r} is not one of {', '.join(EXTEND_BY)}")
        if self.start not in STARTS:
            raise ValueError(f"start {self.start!r} is not one of {', '.join(STARTS)}")
        if not 0.0 <= self.extend_below <= 1.0:
            raise ValueError(
                f"extend_below is a validation accuracy in [0, 1] (0 = off), got {self.extend_below}"
            )
        if not 0.0 <= self.extend_delta < 1.0:
            raise ValueError(
                f"extend_delta is a certificate's delta in [0, 1) (0 = extend_below is a split accuracy), "
                f"got {self.extend_delta}"
            )
        for task, pair in self.extend_targets.items():
            if (
                not isinstance(pair, list | tuple)
                or len(pair) != 2
                or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in pair)
                or not (0.0 < pair[0] <= 1.0 and 0.0 < pair[1] < 1.0)
            ):
                raise ValueError(
                    f"extend_targets[{task!r}] is a certificate's [target in (0, 1], delta in (0, 1)], got {pair!r}"
                )
        if self.max_extensions < 0:
            raise ValueError(
                f"max_extensions must be 0 (never) or a number of doublings, got {self.max_extensions}"
            )
        if self.validation_min_rows < 0:
            raise ValueError(
                f"validation_min_rows must be 0 (off) or a number of rows, got {self.validation_min_rows}"
            )

    def to_dict(self) -> dict:
        return asdict(self)


VALIDATION_GROUPS = ("near_duplicate", "prompt")
STARTS = ("cold", "warm")
EXTEND_BY = ("rerun", "refit")


@dataclass
class TrainResult:
    """What a training run produced: where the adapter is, how training went, and the SHA-256 of each file."""

    adapter_dir: Path
    steps: int
    final_loss: float
    seconds: float
    files: dict[str, str] = field(default_factory=dict)
    examples: int = 0
    target_tokens: int = 0
    max_len: int = 0  # the resolved max_len (config 0 = the base's context)
    rows_left_out: int = 0  # rows longer than max_len, never trained on
    losses: list[float] = field(default_factory=list)
    epochs_run: int = 0
    # with validation_share > 0: epochs run, best epoch, validation accuracy per epoch, why it stopped
    validation: dict = field(default_factory=dict)

    @property
    def adapter_sha256(self) -> str:
        """The adapter digest of its files (``ratchet_stats.certificate.adapter_digest``: a sha256sum manifest)."""
        return adapter_digest(self.files)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["adapter_dir"] = str(self.adapter_dir)
        d["adapter_sha256"] = self.adapter_sha256
        return d


def read_train_jsonl(path: str | Path, tokenizer) -> list[tuple[str, str]]:
    """(prompt, target) texts of a train.jsonl file, rendered by `tokenizer`'s chat template; a bad line raises
    ValueError naming its line number (a base without a template: ``ChatTemplateError``, at once)."""
    return [pair for pair, _row in read_train_rows(path, tokenizer)]


def read_train_rows(path: str | Path, tokenizer) -> list[tuple[tuple[str, str], dict]]:
    """((prompt, target), row) of each line of a train.jsonl file, as ``read_train_jsonl`` renders them."""
    from ratchet_core.chat_format import ChatTemplateError, chat_template

    chat_template(tokenizer)
    out = []
    with Path(path).open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                out.append((training_pair(tokenizer, row), row))
            except ChatTemplateError:
                raise
            except (ValueError, AttributeError, TypeError) as exc:
                raise ValueError(f"{path}:{lineno}: not a chat fine-tuning row ({exc})") from exc
    if not out:
        raise ValueError(f"{path}: no training rows; write one JSON object per line with 'messages'")
    return out


_WORD = re.compile(r"\w+")
_DIGITS = re.compile(r"\d+")


def near_duplicate_key(row: dict) -> str:
    """The group a training row's prompt belongs to for the validation split: its request text without the
    system prompt and the answer, lowercased, every e-mail/phone placeholder one word, every run of digits ``0``,
    punctuation and whitespace dropped, as the sorted set of its words. Two prompts that differ only in case,
    numbers, punctuation, spacing, word order or repeated words (a resent request, a templated message with
    another order number) share a key, so they land on the same side of the split."""
    parts: list[str] = []
    for message in (row.get("messages") or [])[:-1]:
        if message.get("role") == "system":
            continue
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [str(p.get("text", "")) for p in content if isinstance(p, dict)]
    text = PLACEHOLDER.sub(lambda m: f" {m.group(1).lower()} ", " ".join(parts)).lower()
    words = {_DIGITS.sub("0", w) for w in _WORD.findall(text)}
    return " ".join(sorted(words)) or json.dumps(row.get("messages"), sort_keys=True)


# The most a floor raises the validation share to: the selection run keeps most rows. Measured on 300 tickets
# requests (198 rows; benchmarks/measured/learner_issue36.json): held out at 0.5, 150 + 299 steps and 39/43 golden;
# at 0.3, 150 + 182 steps and 40/43.
MAX_SIZED_SHARE = 0.3


def sized_share(rows: int, share: float, min_rows: int) -> float:
    """The validation share a set of ``rows`` rows is split at: ``share``, raised to hold out about ``min_rows``
    rows (never above ``MAX_SIZED_SHARE``); ``share`` itself when it is 0 (no split) or ``min_rows`` is 0."""
    if share <= 0 or min_rows <= 0 or rows <= 0:
        return share
    return max(share, min(MAX_SIZED_SHARE, min_rows / rows))


def validation_mask(rows: Sequence[dict], prompts: Sequence[str], share: float, groups: str) -> list[bool]:
    """Which training rows are held out: by near-duplicate group (`near_duplicate_key` hashed below `share`), or,
    with ``groups="prompt"``, by each rendered prompt's own hash (the older split, kept for comparison)."""
    if groups == "prompt":
        return [_held_out(p, share) for p in prompts]
    return [_held_out(near_duplicate_key(r), share) for r in rows]


def epochs_to_run(rows: int, config: LoraTrainConfig) -> int:
    """``max(epochs, ceil(min_steps / ceil(rows / batch_size)))``: enough epochs for ``min_steps`` steps."""
    steps_per_epoch = max(1, math.ceil(rows / config.batch_size))
    return max(config.epochs, math.ceil(max(0, config.min_steps) / steps_per_epoch))


PLACEHOLDER = re.compile(r"<(EMAIL|PHONE)_([0-9a-f]{8})>")
_FIRST = ("alex", "sam", "maria", "chen", "priya", "jonas", "fatima", "li", "noah", "elena", "omar", "yuki")
_LAST = ("smith", "garcia", "kim", "novak", "okafor", "berg", "rossi", "tanaka", "silva", "dubois", "ali")
_DOMAINS = ("example.com", "mail.example.net", "example.org", "post.example")


def surrogate(kind: str, hex8: str) -> str:
    """A made-up value for placeholder ``<KIND_hex8>``, a pure function of (kind, hex8)."""
    h = int(hex8, 16)
    if kind == "EMAIL":
        first, last = _FIRST[h % len(_FIRST)], _LAST[(h // 16) % len(_LAST)]
        return f"{first}.{last}{(h // 256) % 97 + 1}@{_DOMAINS[(h // 65536) % len(_DOMAINS)]}"
    area, line = 201 + h % 780, (h // 1024) % 10000
    style = (h // (1 << 24)) % 3
    return (f"+1 {area}-555-{line:04d}", f"({area}) 555-{line:04d}", f"+44 7700 900{line % 1000:03d}")[style]


def with_surrogates(text: str) -> str:
    """``text`` with every e-mail/phone placeholder replaced by its ``surrogate``."""
    return PLACEHOLDER.sub(lambda m: surrogate(m.group(1), m.group(2)), text)


def resolve_modules_to_save(base_path: str | Path, config: LoraTrainConfig) -> list[str] | None:
    from ratchet_core.student_model import is_demo_base, is_pretrained_demo_base

    if config.modules_to_save is not None:
        return list(config.modules_to_save) or None
    random_demo = is_demo_base(base_path) and not is_pretrained_demo_base(base_path)
    return list(DEMO_MODULES_TO_SAVE) if random_demo else None


def train_lora(
    base_path: str | Path,
    train_jsonl: str | Path,
    out_dir: str | Path,
    config: LoraTrainConfig | None = None,
    on_progress: Callable[[int, int, float], None] | None = None,
    row_tasks: Sequence[str] | None = None,
    init_adapter: str | Path | None = None,
    held_out: Sequence[bool] | None = None,
) -> TrainResult:
    """Train a LoRA adapter on `train_jsonl` over the base at `base_path`; save it in `out_dir`.

    `on_progress(step, total_steps, loss)` is called after every optimiser step (loss of that batch).
    `row_tasks`: the task of each train.jsonl row (same order), for the validation accuracy per task; None = one
    group ``"all"``. `init_adapter`: a PEFT adapter folder of the same LoRA shape to start from (a warm start,
    module docstring); None = a fresh LoRA. `held_out`: which train.jsonl rows (same order) form the validation split
    (a warm night's, chosen by ``night.warm_start``); None = the split of ``validation_share`` (sized by
    ``validation_min_rows``) and ``validation_groups``.
    """
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = config or LoraTrainConfig()
    started = time.perf_counter()
    threads = resolved_threads(config.num_threads)
    if threads is not None:
        torch.set_num_threads(threads)
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)

    tokenizer = AutoTokenizer.from_pretrained(base_path)
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    rows_read = read_train_rows(train_jsonl, tokenizer)
    pairs = [pair for pair, _ in rows_read]
    if config.pii_surrogates > 0:
        pick = random.Random(f"{config.seed}:pii")
        pairs = [
            (with_surrogates(p), with_surrogates(t)) if pick.random() < config.pii_surrogates else (p, t)
            for p, t in pairs
        ]
    encoded = [(encode(tokenizer, p), encode_answer(tokenizer, t)) for p, t in pairs]
    max_len = config.max_len or context_length(AutoConfig.from_pretrained(base_path))
    tasks = list(row_tasks) if row_tasks is not None else ["all"] * len(encoded)
    if len(tasks) != len(encoded):
        raise ValueError(
            f"row_tasks has {len(tasks)} entries for {len(encoded)} training rows in {train_jsonl}"
        )
    fits = [len(p) + len(t) <= max_len for p, t in encoded]
    if not any(fits):
        raise ValueError(
            f"every row of {train_jsonl} is longer than max_len {max_len} tokens (prompt + answer, shortest "
            f"{min(len(p) + len(t) for p, t in encoded)}): raise max_len (up to the endpoint's --max-model-len)"
        )
    rows = [row for _, row in rows_read]
    if held_out is not None and len(held_out) != len(rows):
        raise ValueError(
            f"held_out has {len(held_out)} entries for {len(rows)} training rows in {train_jsonl}"
        )
    given = list(held_out) if held_out is not None else [False] * len(rows)
    pairs, tasks, encoded, rows, given = (
        [x for x, keep in zip(items, fits, strict=True) if keep]
        for items in (pairs, tasks, encoded, rows, given)
    )
    examples = [(p + t, [-100] * len(p) + t) for p, t in encoded]
    every_row = list(examples)  # what a refit trains on: held-out rows included
    validation: list[tuple[list[int], list[int]]] = []
    validation_tasks: list[str] = []
    if config.validation_share > 0:
        held = (
            given
            if held_out is not None
            else validation_mask(
                rows,
                [prompt for prompt, _ in pairs],
                sized_share(len(rows), config.validation_share, config.validation_min_rows),
                config.validation_groups,
            )
        )
        validation = [e for e, h in zip(examples, held, strict=True) if h]
        validation_tasks = [t for t, h in zip(tasks, held, strict=True) if h]
        kept = [e for e, h in zip(examples, held, strict=True) if not h]
        if validation and kept:
            examples = kept
        else:
            validation, validation_tasks = [], []

    def start_model():
        """The weights a run starts from: the parent adapter (warm) or a fresh LoRA, seeded: a refit starts from
        exactly where the selection run started."""
        torch.manual_seed(config.seed)
        base_model = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32)
        if init_adapter is not None:
            m = PeftModel.from_pretrained(base_model, str(init_adapter), is_trainable=True)
        else:
            lora = LoraConfig(
                r=config.rank,
                lora_alpha=config.alpha,
                lora_dropout=config.dropout,
                target_modules=config.target_modules,
                modules_to_save=resolve_modules_to_save(base_path, config),
                task_type="CAUSAL_LM",
            )
            m = get_peft_model(base_model, lora)
        m.train()
        return m

    lr = config.lr if init_adapter is None else config.warm_lr

    def optimiser_for(m, total_steps: int):
        """AdamW over the trainable weights and its schedule: linear warm-up, then linear decay to 0."""
        trainable = [p for p in m.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(trainable, lr=lr, weight_decay=config.weight_decay)
        warm_steps = max(1, int(total_steps * config.warmup_fraction))

        def factor(k: int) -> float:  # k counts from 0
            if k < warm_steps:
                return (k + 1) / warm_steps
            return max(0.0, (total_steps - k) / max(1, total_steps - warm_steps))

        return trainable, opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)

    def run_epoch(m, trainable, opt, sched, data, order_rng, on_step, max_steps: int | None = None) -> int:
        """One pass over ``data`` in a seeded order, one optimiser step per batch (at most ``max_steps`` of them);
        returns the steps taken."""
        order = list(range(len(data)))
        order_rng.shuffle(order)
        taken = 0
        for begin in range(0, len(order), config.batch_size):
            if max_steps is not None and taken >= max_steps:
                break
            taken += 1
            batch = [data[i] for i in order[begin : begin + config.batch_size]]
            batch_loss = _forward(m, batch, pad, share=config.dropout == 0, with_labels=True)[0].loss
            opt.zero_grad(set_to_none=True)
            batch_loss.backward()
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            opt.step()
            sched.step()
            on_step(float(batch_loss.detach()))
        return taken

    steps_per_epoch = math.ceil(len(examples) / config.batch_size)
    # Short of steps (module docstring, "Short of steps"): a cold selection run whose schedule ran out while a
    # task was still learning runs again from the same start on a schedule twice as long (`min_steps`, `max_epochs`
    # doubled), at most `max_extensions` times; `schedule` is the config of the run in hand.
    schedule = config
    extensions: list[dict] = []
    doubled_total = 0  # extend_by "refit": the steps of the doubled schedule the refit trains

    def trained_state() -> dict:
        """The trained weights of the model in hand (the LoRA, and the demo base's saved modules)."""
        return {
            k: v.detach().clone()
            for k, v in model.state_dict().items()
            if "lora_" in k or "modules_to_save" in k
        }

    def selection_step(loss_value: float) -> None:
        nonlocal step
        step += 1
        losses.append(loss_value)
        if on_progress is not None:
            on_progress(step, total, loss_value)

    while True:
        model = start_model()
        rng = random.Random(config.seed)  # the data order a fresh run at this schedule would take
        # a warm start already knows the task: `min_steps` (enough steps for a fresh LoRA) does not apply; with a
        # validation split its floor is half of `max_epochs` (the first epochs at the peak learning rate were measured
        # to score below the parent, and patience from epoch 1 stopped tickets nights 3 and 4 with the parent's weights)
        if init_adapter is None:
            floor = epochs_to_run(len(examples), schedule)
        else:
            floor = max(1, config.epochs, math.ceil(config.max_epochs / 2) if validation else 0)
        epochs = floor
        if validation:
            epochs = max(epochs, schedule.max_epochs)
        total = steps_per_epoch * epochs
        params, optimiser, scheduler = optimiser_for(model, total)
        losses: list[float] = []
        step = 0
        history: list[float] = []
        per_task_history: list[dict[str, float]] = []
        loss_history: list[float] = []
        best: int | None = None
        best_state: dict | None = None
        best_right: list[bool] = []
        stopped = "epochs"
        epochs_run = 0

        initial: tuple[float, float] | None = None
        if validation and init_adapter is not None:
            # the parent's own score on this split: the epochs must beat it, else the parent's weights are kept
            right, val_loss = _validate(model, validation, pad, config.batch_size)
            initial = (sum(right) / len(right), val_loss)
            best_state = trained_state()
            # rows the parent answers wrong are worth steps: the shortcut below is taken only when it answers every
            # training row (the night's new rows, the replay sample) as the teacher did, too
            parent_train_right = _validate(model, examples, pad, config.batch_size)[0]
            initial_train = sum(parent_train_right) / max(1, len(parent_train_right))
            if unbeatable(*initial, config.min_loss_delta) and initial_train >= 1.0:
                # no epoch can beat it (accuracy cannot rise, the loss cannot fall by min_loss_delta) and no training
                # row disagrees with it: keep it untrained
                epochs = 0
                stopped = (
                    f"the parent is all right on the split with a loss {val_loss:.4g} under min_loss_delta "
                    f"{config.min_loss_delta:g}, and on every training row: no epoch can beat it"
                )

        for _ in range(epochs):
            epochs_run += 1
            run_epoch(model, params, optimiser, scheduler, examples, rng, selection_step)
            if validation:
                right, val_loss = _validate(model, validation, pad, config.batch_size)
                history.append(sum(right) / len(right))
                loss_history.append(val_loss)
                per_task_history.append(_by_task(right, validation_tasks))
                # the best epoch and the epochs since the last progress (`patience_state`: what better means, and
                # why a parent is beaten by the same rule)
                best, since_best = patience_state(
                    history, loss_history, initial, config.min_loss_delta, config.patience_on_loss
                )
                if best == len(history) - 1:
                    best_state = trained_state()
                    # per split row: the chosen epoch's answers (the refit is checked against them)
                    best_right = right
                # patience counts only past the fixed schedule's floor (`epochs`, `min_steps`): a small set's
                # validation split is a handful of rows, too noisy to cut a run shorter than that
                if len(history) >= floor and since_best >= config.patience:
                    stopped = f"no improvement for {config.patience} epochs"
                    break
                if config.time_budget_s and time.perf_counter() - started > config.time_budget_s:
                    stopped = f"time budget {config.time_budget_s:g} s"
                    break
                stopped = f"all {epochs} epochs"
        # the schedule ran out: every epoch ran and no time budget cut it (patience running out at the last epoch
        # is the schedule's end too: it stopped nothing)
        ran_out = epochs_run == epochs and not stopped.startswith("time budget")
        still = (
            short_of_steps(
                per_task_history,
                ran_out,
                config.extend_below,
                dict(Counter(validation_tasks)),  # the split's rows per task
                config.extend_delta,
                config.extend_targets,
            )
            if validation and init_adapter is None and len(extensions) < config.max_extensions
            else []
        )
        if not still:
            break
        extensions.append(
            {
                "min_steps": schedule.min_steps,
                "max_epochs": schedule.max_epochs,
                "steps": step,
                "accuracy_per_epoch": [round(a, 6) for a in history],
                "still_learning": still,
            }
        )
        schedule = dataclasses.replace(
            schedule, min_steps=2 * schedule.min_steps, max_epochs=2 * schedule.max_epochs
        )
        if config.extend_by == "refit" and config.refit:
            # no second selection run: the refit below trains every row for the whole doubled schedule
            doubled_total = steps_per_epoch * max(epochs_to_run(len(examples), schedule), schedule.max_epochs)
            break
        del model, optimiser, scheduler
    refit: dict = {}
    if validation and config.refit and best is not None and init_adapter is None:
        # the split chose the selection's first `best + 1` epochs, `chosen` optimiser steps; every row (held-out
        # groups included) now teaches for as many steps, from the same start, on the same learning-rate schedule
        # step for step (over the selection schedule's `total` steps), so each step is taken at the learning rate
        # the split chose it at. A warm night is never refit: its saved weights are the epoch that beat its parent
        # on held-out rows (module docstring, "Refit").
        chosen = (best + 1) * steps_per_epoch
        # the split's choice, validated on rows it never trained on: what is saved if the refit falls short (below)
        selection_state, selection_steps_kept = best_state, chosen
        selection_loss = losses[chosen - 1] if len(losses) >= chosen else (losses[-1] if losses else 0.0)
        floored = config.refit_floor and chosen < floor * steps_per_epoch
        if floored:
            chosen = floor * steps_per_epoch
        if doubled_total:
            total = chosen = doubled_total
        del model, optimiser, scheduler
        model = start_model()
        params, optimiser, scheduler = optimiser_for(model, total)
        refit_rng = random.Random(config.seed)
        refit_losses: list[float] = []
        selection_steps = step

        def refit_step(loss_value: float) -> None:
            refit_losses.append(loss_value)
            if on_progress is not None:
                on_progress(selection_steps + len(refit_losses), selection_steps + chosen, loss_value)

        passes = 0
        while len(refit_losses) < chosen:
            passes += 1
            run_epoch(
                model,
                params,
                optimiser,
                scheduler,
                every_row,
                refit_rng,
                refit_step,
                chosen - len(refit_losses),
            )
        best_state = trained_state()
        refit = {
            "rows": len(every_row),
            "epochs": passes,  # passes over every row begun (the last one may stop part-way)
            "steps": len(refit_losses),
            "selection_steps": selection_steps,
        }
        if doubled_total:  # extend_by "refit": the steps are the doubled schedule's, not a selection's choice
            refit["schedule"] = "doubled"
        elif floored:  # refit_floor: the split chose fewer steps than the fixed schedule's floor
            refit["floor_steps"] = chosen
        losses = refit_losses
        step = len(refit_losses)
        # The refit trained on the split's rows too, so it must not answer a task's rows significantly worse than
        # the chosen epoch answered them unseen; else it fell short (module docstring, "Refit") and the chosen
        # epoch's weights are saved instead.
        right, _ = _validate(model, validation, pad, config.batch_size)
        refit["split_accuracy"] = round(sum(right) / len(right), 6)
        short = refit_short_on(best_right, right, validation_tasks)
        if short:
            refit["kept"] = "selection"
            refit["short_on"] = short
            best_state = selection_state
            step = selection_steps_kept
            losses = [selection_loss]
    # the last batch's loss; with no step (a parent no epoch can beat), the kept weights' validation loss
    final_loss = losses[-1] if losses else (initial[1] if initial is not None else 0.0)
    report: dict = {}
    if validation:
        assert best_state is not None
        model.load_state_dict(best_state, strict=False)
        kept = (history[best], per_task_history[best]) if best is not None else (initial[0], {})  # type: ignore[index]
        report = {
            "rows": len(validation),
            "groups": config.validation_groups,
            "accuracy_per_epoch": [round(a, 6) for a in history],
            "loss_per_epoch": [round(x, 6) for x in loss_history],
            # 0 = no epoch beat the parent adapter's weights (a warm start), which are kept
            "best_epoch": 0 if best is None else best + 1,
            "final_accuracy": round(kept[0], 6),
            "per_task": {
                task: {"rows": validation_tasks.count(task), "accuracy": round(acc, 6)}
                for task, acc in sorted(kept[1].items())
            },
            "epochs_run": epochs_run,
            "stopped": stopped,
        }
        if initial is not None:
            report["initial_accuracy"] = round(initial[0], 6)
            report["initial_loss"] = round(initial[1], 6)
            report["initial_train_accuracy"] = round(initial_train, 6)
        if refit:
            report["refit"] = refit  # every row, the chosen steps; saved unless `kept` says "selection"
        # the shorter runs before the one reported (only when there were any, so other runs keep their bytes)
        if extensions:
            report["short_of_steps"] = extensions

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    # peft writes a generic model card; it says nothing about this adapter and only adds noise to its hash.
    (out / "README.md").unlink(missing_ok=True)
    from ratchet_core.student_model import base_identity

    identity = base_identity(base_path)
    normalise_adapter_config(out / "adapter_config.json", identity["name"])
    meta = {
        # the thread count is not part of the config asked for (night.adapter.config_hash) but does move the last
        # bits of the weights: recorded apart (LoraTrainConfig.num_threads)
        "config": {k: v for k, v in config.to_dict().items() if k != "num_threads"},
        "torch_threads": torch.get_num_threads(),
        "max_len": max_len,
        "rows_left_out": {"longer_than_max_len": fits.count(False)},
        "examples": len(every_row) if refit else len(examples),
        "steps": step,
        "epochs_run": epochs_run,
        "final_loss": final_loss,
        **({"validation": report} if report else {}),
        "base": {k: v for k, v in identity.items() if k not in ("files", "path")},
    }
    (out / TRAIN_META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True))
    files = adapter_file_hashes(out)
    return TrainResult(
        adapter_dir=out,
        steps=step,
        final_loss=final_loss,
        seconds=time.perf_counter() - started,
        files=files,
        examples=len(every_row) if refit else len(examples),
        target_tokens=sum(len(t) for _, t in encoded),
        max_len=max_len,
        rows_left_out=fits.count(False),
        losses=losses,
        epochs_run=epochs_run,
        validation=report,
    )


def _held_out(prompt: str, share: float) -> bool:
    """A training row is in the validation split iff sha256(prompt) falls below `share` (deterministic)."""
    return int.from_bytes(hashlib.sha256(f"validation:{prompt}".encode()).digest()[:4], "big") / 2**32 < share


def normalise_adapter_config(path: Path, base_name: str) -> None:
    """Rewrite peft's ``adapter_config.json`` so its bytes depend on the adapter only, not on where it was trained.

    peft writes the base's absolute folder (``base_model_name_or_path``: the home folder) and ``target_modules``
    as a list in set order (``"all-linear"`` expands to a set, whose order changes with PYTHONHASHSEED), so the
    same data gave a different file, digest and version in another home or process. Written instead: the base's
    name (``base_identity``; peft only reads it when no base model is passed, and Ratchet always passes one),
    ``target_modules`` sorted, keys sorted. ``PeftModel.from_pretrained`` and vLLM load it as before."""
    data = json.loads(path.read_text(encoding="utf-8"))
    data["base_model_name_or_path"] = base_name
    if isinstance(data.get("target_modules"), list):
        data["target_modules"] = sorted(data["target_modules"])
    if isinstance(data.get("modules_to_save"), list):
        data["modules_to_save"] = sorted(data["modules_to_save"])
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def cpu_threads() -> int:
    """The CPUs this process may run on (its affinity mask; a container's cpuset too), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity call on this platform
        return max(1, os.cpu_count() or 1)


def resolved_threads(num_threads: int | None) -> int | None:
    """The torch thread count ``num_threads`` asks for: None leaves torch alone, 0 is every CPU (``cpu_threads``)."""
    if num_threads is None:
        return None
    return num_threads or cpu_threads()


def unbeatable(accuracy: float, loss: float, min_loss_delta: float) -> bool:
    """Whether no epoch can beat a score by ``_better``: every answer right and the loss too small to fall by
    ``min_loss_delta`` (a loss is never below 0)."""
    return accuracy >= 1.0 and min_loss_delta > 0 and loss < min_loss_delta


# A task is still learning when its validation accuracy rose by at least this much over the second half of the
# schedule: a row or two of noise on a split of ~100 rows is 0.01-0.02; `departments` night 1 rose 0.30 -> 0.52.
STILL_LEARNING_RISE = 0.1


def certify_accuracy(rows: int, target: float, delta: float) -> float:
    """The least accuracy k/rows whose Clopper-Pearson lower bound at ``delta`` reaches ``target`` (the bound the
    certificate takes, ``ratchet_stats.bounds``); 1.0 where even rows/rows does not (fewer than 59 rows for 0.95 at
    0.05). 100 rows need 99 right (0.99), 102 rows 101, 200 rows 196 (0.98)."""
    from ratchet_stats.bounds import max_errors_certified

    if rows <= 0:
        return 1.0
    return (rows - max(0, max_errors_certified(rows, target, delta))) / rows


def short_of_steps(
    per_task_per_epoch: Sequence[dict[str, float]],
    ran_out: bool,
    below: float,
    rows: dict[str, int] | None = None,
    delta: float = 0.0,
    targets: dict[str, Sequence[float]] | None = None,
) -> list[str]:
    """The tasks a cold selection run left still learning (module docstring, "Short of steps"): the run went to
    the end of its schedule (``ran_out``: no patience stop, no time budget), the task's best validation accuracy
    over the run is below its threshold, and its accuracy at the last epoch is at least ``STILL_LEARNING_RISE`` above
    its accuracy at the halfway epoch. The threshold is ``below`` itself (``delta`` 0), or, with ``delta`` > 0, the
    accuracy the task's split of ``rows[task]`` rows would need to certify ``below`` at ``delta``
    (``certify_accuracy``); ``targets`` names tasks judged at another ``[target, delta]`` (their policy's, or the
    night's certificate target) in that mode. A task that reached its threshold at some epoch is done (``tickets``
    700 requests: 0.957 at epoch 7, 0.936 at its last, against 0.95); one that stays flat (``extract`` on the demo
    base: 0 at every epoch) would not gain from more steps. Empty when ``below`` is 0 (off) or fewer than two epochs
    ran."""
    if below <= 0 or not ran_out or len(per_task_per_epoch) < 2:
        return []
    last, half = per_task_per_epoch[-1], per_task_per_epoch[len(per_task_per_epoch) // 2 - 1]

    def threshold(task: str) -> float:
        if delta <= 0:
            return below
        target, task_delta = (targets or {}).get(task, (below, delta))
        return certify_accuracy((rows or {}).get(task, 0), target, task_delta)

    return sorted(
        task
        for task, accuracy in last.items()
        if max(epoch.get(task, 0.0) for epoch in per_task_per_epoch) < threshold(task)
        and accuracy - half.get(task, 0.0) >= STILL_LEARNING_RISE
    )


# A refit is short on a task when exact McNemar, one-sided, says it answers the split's rows of that task worse than
# the chosen epoch did at this level: a row or two either way on a small split is noise (a tiny test's 7/21 -> 6/21),
# `extract`'s broken refit (0.99 -> 0.77 on 299 rows) is not. A guard on which weights are saved, not a claim: the
# certificate, on golden rows neither run trained on, spends no error budget on it.
REFIT_SHORT_P = 0.05


def refit_short_on(chosen: Sequence[bool], refit: Sequence[bool], tasks: Sequence[str]) -> list[str]:
    """The tasks whose split rows the refit answers significantly worse than the chosen epoch did (``REFIT_SHORT_P``,
    exact McNemar, one-sided). Per row: the chosen epoch's exact answer (a row it never trained on), the refit's
    (which trained on it), the row's task. A refit short on any task is not saved (module docstring, "Refit")."""
    from ratchet_stats.mcnemar import mcnemar_exact

    discordant: dict[str, list[int]] = {}
    for was, now, task in zip(chosen, refit, tasks, strict=True):
        counts = discordant.setdefault(task, [0, 0])
        if now and not was:
            counts[0] += 1  # b: the refit right, the chosen epoch wrong
        elif was and not now:
            counts[1] += 1  # c: the refit wrong where the chosen epoch was right
    return sorted(
        task for task, (b, c) in discordant.items() if mcnemar_exact(b, c, "less").p_value < REFIT_SHORT_P
    )


def patience_state(
    accuracy: Sequence[float],
    losses: Sequence[float],
    initial: tuple[float, float] | None,
    min_loss_delta: float,
    on_loss: bool,
) -> tuple[int | None, int]:
    """(the best epoch so far, as an index, or None while none beat ``initial``; the epochs since the last progress)
    of a run whose validation split scored ``accuracy`` and ``losses`` per epoch. Better = higher exact accuracy,
    then (equal accuracy) a validation loss lower by ``min_loss_delta`` (``_better``): a split that is all right after
    a few epochs does not stop the run while the answers still get surer. A warm start's parent (``initial``, its
    accuracy and loss on the split) is beaten by the same rule: letting a tie go to the epoch (its weights learned
    the night's new rows) was tried and certified nothing on the demo's night 2 (epoch 2: 1.0 on the split and a
    lower loss than the parent, 169/180 golden; the parent's weights 176/179). Progress = a better epoch, or with
    ``on_loss`` (``patience_on_loss``) an epoch whose loss is the lowest yet (the parent's included) by
    ``min_loss_delta``: `departments` night 2 scored 0.59, 0.58, 0.58 on its split while the loss fell 0.121 ->
    0.115, and patience 2 stopped it at 77/194 golden; counting the loss it climbed on to 0.90, 187/194."""
    best: int | None = None
    progress = -1
    lowest = None if initial is None else initial[1]
    for i, (a, loss) in enumerate(zip(accuracy, losses, strict=True)):
        to_beat = initial if best is None else (accuracy[best], losses[best])
        if to_beat is None or _better(a, loss, *to_beat, min_loss_delta):
            best = progress = i
        if on_loss and (lowest is None or lowest - loss >= max(min_loss_delta, 0.0)):
            progress = i
        lowest = loss if lowest is None else min(lowest, loss)
    return best, len(accuracy) - 1 - progress


def _better(
    accuracy: float, loss: float, best_accuracy: float, best_loss: float, min_loss_delta: float
) -> bool:
    """An epoch beats the best so far: higher exact accuracy, or the same with a loss lower by ``min_loss_delta``."""
    if accuracy != best_accuracy:
        return accuracy > best_accuracy
    return best_loss - loss >= max(min_loss_delta, 0.0) and loss < best_loss


def _by_task(right: list[bool], tasks: list[str]) -> dict[str, float]:
    """Accuracy per task of the per-row outcomes `right` (rows tagged by `tasks`)."""
    out: dict[str, list[int]] = {}
    for ok, task in zip(right, tasks, strict=True):
        out.setdefault(task, []).append(int(ok))
    return {task: sum(v) / len(v) for task, v in out.items()}


def scoring_rows(tokenizer, pairs: Sequence[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
    """(input ids, labels) of rendered (prompt, target) pairs as training encodes them (the prompt whole, the target
    up to its EOS, prompt tokens labelled -100), for ``_exact_rows``/``_validate`` on rows scored outside a run."""
    out = []
    for prompt, target in pairs:
        p, t = encode(tokenizer, prompt), encode_answer(tokenizer, target)
        out.append((p + t, [-100] * len(p) + t))
    return out


def _exact_rows(model, rows: list[tuple[list[int], list[int]]], pad: int, batch_size: int) -> list[bool]:
    """Per row: whether every target token is the model's argmax (teacher-forced exact answer = what greedy
    decoding would write, EOS included)."""
    return _validate(model, rows, pad, batch_size)[0]


def _validate(
    model, rows: list[tuple[list[int], list[int]]], pad: int, batch_size: int
) -> tuple[list[bool], float]:
    """(per row: exact answer, as ``_exact_rows``; mean cross-entropy over all target tokens) in one pass."""
    import torch

    model.eval()
    right: list[bool] = []
    loss_sum, tokens = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(rows), batch_size):
            batch = rows[start : start + batch_size]
            out, skip = _forward(model, batch, pad, share=True, with_labels=False)
            pred = out.logits.argmax(-1)
            logp = torch.log_softmax(out.logits.float(), dim=-1)
            for row, (_ids, lab) in enumerate(batch):
                # the logits at (full-row) position i - 1 predict token i; the batch's run began at `skip`
                positions = [i for i, t in enumerate(lab) if t != -100 and i > 0]
                right.append(all(int(pred[row, i - 1 - skip]) == lab[i] for i in positions))
                loss_sum -= sum(float(logp[row, i - 1 - skip, lab[i]]) for i in positions)
                tokens += len(positions)
    model.train()
    return right, loss_sum / max(1, tokens)


# The shortest shared prefix worth its own pass (module docstring, "Shared prompt prefix"): below it the two passes
# cost more than they save.
SHARED_PREFIX_MIN = 16


def shared_prefix(batch: Sequence[tuple[list[int], list[int]]]) -> int:
    """The tokens every row of ``batch`` begins with, cut so that each row's first answer token (its first label
    other than -100) and the token before it stay in the row's own part; 0 for a single row."""
    if len(batch) < 2:
        return 0
    first = batch[0][0]
    n = min(len(ids) for ids, _ in batch)
    for ids, _ in batch[1:]:
        k = 0
        while k < n and ids[k] == first[k]:
            k += 1
        n = k
    answers = min(next((i for i, t in enumerate(lab) if t != -100), len(lab)) for _, lab in batch)
    return max(0, min(n, answers - 1))


def _forward(
    model, batch: Sequence[tuple[list[int], list[int]]], pad: int, *, share: bool, with_labels: bool
):
    """(the model's output for ``batch``, the position its logits begin at): the rows right-padded, with the
    labels' mean token loss when ``with_labels``. With ``share`` and a :func:`shared_prefix` of at least
    ``SHARED_PREFIX_MIN`` tokens, the prefix runs once and each row runs only from there (module docstring,
    "Shared prompt prefix"): its logits begin at the prefix's length."""
    import torch

    skip = shared_prefix(batch) if share else 0
    if skip < SHARED_PREFIX_MIN:
        skip = 0
    cache = None
    if skip:
        cache = model(input_ids=torch.tensor([batch[0][0][:skip]]), use_cache=True).cache
        cache.batch_repeat_interleave(len(batch))
    width = max(len(ids) for ids, _ in batch) - skip
    input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    mask = torch.zeros((len(batch), skip + width), dtype=torch.long)
    for row, (ids, lab) in enumerate(batch):
        input_ids[row, : len(ids) - skip] = torch.tensor(ids[skip:])
        labels[row, : len(lab) - skip] = torch.tensor(lab[skip:])
        mask[row, : len(ids)] = 1
    kwargs = {"labels": labels} if with_labels else {}
    if cache is not None:
        kwargs.update(cache=cache, use_cache=False)
    return model(input_ids=input_ids, attention_mask=mask, **kwargs), skip
