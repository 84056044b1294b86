"""Where a night's adapter starts: from its tasks' parent adapter (warm) or from a fresh LoRA (cold).

Plain functions (no Dagster), called by ``night.adapter.train_adapter`` before a launch.

The parent: the newest version, by launch rank, that is live for a task of the training set in the newest verified
release manifest or that the versions registry holds as certified for one of those tasks (any status but
``rejected`` and ``rolled_back``: a version still in shadow or canary counts); ``chosen_as`` says which. The newest
certified version has trained on the most days, so a warm night trains on fewer new rows: starting from the live
version instead, the demo's nights 3 and 4 trained on every row since day 1 (306 and 322 new rows, 75 s each) while
the certified v2 and v3 had seen all but a day's. Its record is the ``training.launch`` result in the effect ledger
(``night.adapter``).

Warm only when all of these hold, else cold, with the reason recorded:

- the night's config asks for it (``start="warm"``; ``start="cold"`` forces a fresh LoRA);
- there is a parent, its folder is there, and it was trained for an earlier day than this night;
- the base is the same bytes (the identity's sha256 covers weights, config and tokenizer files, so the chat
  template too);
- the LoRA's shape is the same (rank, alpha, target modules, modules to save), so the weights load;
- the validation split is drawn alike (``validation_share``, ``validation_groups``, ``validation_min_rows``), so
  the night's choice is made on the same terms as the parent's;
- the signed policies of the set's tasks are the ones the parent was trained under (``policies_sha256``);
- neither the parent nor any adapter it descends from trained on a row that is golden on this night's day (their
  ``train/day=P/keys.txt`` against ``golden/day=D/keys.txt``; the golden registry never turns a trained key golden,
  and this checks it).

Rows of a warm night (``select_rows``): the training set of the day (its 7-day window, no golden key) split by the
day each example first appeared: every row after the parent's day is new and trained on; a row of the parent's day
or before is replayed iff ``sha256("replay:" + example key)`` read as a fraction falls below ``replay_share``, at
most ``replay_cap`` of them, lowest hashes first. The replay rows come from the day's own training set, so none is
golden on the day being certified. The validation split is every held-out group of the window, new rows and old
(the share sized by ``validation_min_rows`` from the new rows' count), and never trained on: the new rows' groups
show whether the night learnt the new days, the old ones whether it forgot what the parent knew. A cold parent
(``refit``) has trained on its own days' held-out rows, so it is near all right on the old ones and a child must
keep them to beat it. Validating on the new rows alone was measured to miss forgetting: ``moods`` night 2 (700
requests) saved an epoch that was 77/77 on the new rows' split against its parent's 76/77 and scored 176/184
golden rows against the parent's 183/184 (every loss a "praise" request of a template whose variants had nearly all
been seen on day 1, so few were new on day 2); on every held-out group (183 rows) the same night chose epoch 3
(183/183 against the parent's 182/183) and scored 182/184 golden, bound 0.966: certified, and 241/243 fresh
requests (``benchmarks/measured/learner_issue36.json``). A cold night reads every row.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ratchet_core.layout import ArtifactLayout

# the fields that fix the shape of the LoRA weights: a parent with other values cannot be loaded
SHAPE_FIELDS = ("rank", "alpha", "target_modules", "modules_to_save")
# the fields that choose the validation split: with other values the parent may have trained on today's held-out rows
SPLIT_FIELDS = ("validation_share", "validation_groups", "validation_min_rows")


@dataclass(frozen=True)
class Parent:
    """The adapter a warm night starts from, and why it was chosen (``live`` or ``certified``)."""

    version: str
    adapter_sha256: str
    train_day: str
    chosen_as: str
    record: dict[str, Any]


@dataclass(frozen=True)
class StartPlan:
    """How the night's adapter starts: ``mode`` warm | cold, why, the parent and the rows trained on."""

    mode: str
    reason: str
    parent: Parent | None = None
    rows: tuple[int, ...] | None = None  # indices into train.jsonl; None = every row
    new_rows: int = 0
    replay_rows: int = 0
    # which of ``rows`` (same order) the validation split holds out: every held-out group, new rows' and old
    held: tuple[bool, ...] | None = None

    def to_record(self, replay_share: float, replay_cap: int) -> dict[str, Any]:
        """The adapter record's ``start`` (and so the BOM's ``ratchet:start:*`` properties)."""
        out: dict[str, Any] = {"mode": self.mode, "reason": self.reason}
        if self.parent is not None and self.mode == "warm":
            out["parent"] = {
                "version": self.parent.version,
                "adapter_sha256": self.parent.adapter_sha256,
                "train_day": self.parent.train_day,
                "chosen_as": self.parent.chosen_as,
            }
            out.update(
                new_rows=self.new_rows,
                replay_rows=self.replay_rows,
                replay_rule=f'sha256("replay:" key) < {replay_share:g}, at most {replay_cap} rows, '
                f"of the days up to {self.parent.train_day}",
            )
        return out


def cold(reason: str) -> StartPlan:
    return StartPlan("cold", reason)


def policies_sha256(policies: dict[str, Any], tasks: Iterable[str]) -> str:
    """Digest of the signed policies of ``tasks`` (a task without a policy counts as none)."""
    from ratchet_stats.canonical import digest

    return digest(
        {
            t: (p.model_dump(mode="json") if (p := policies.get(t)) is not None else None)
            for t in sorted(tasks)
        }
    )


def version_rank(version: str) -> int:
    """N of ``v<N>-<hex>`` (0 for a name of another form)."""
    head = version.split("-", 1)[0]
    return int(head[1:]) if head[:1] == "v" and head[1:].isdigit() else 0


def launch_records(effects: Any, effect_type: str) -> dict[str, dict[str, Any]]:
    """Every trained adapter's record in the effect ledger (the launch effect's results), by version."""
    out = {}
    for row in effects.list_effects(effect_type=effect_type, limit=1_000_000):
        result = row.result or {}
        if row.status == "done" and result.get("version"):
            out[result["version"]] = result
    return out


def find_parent(
    tasks: Sequence[str], live: dict[str, str | None], certified: Sequence[tuple[str, str]], records: dict
) -> Parent | None:
    """The parent (module docstring): ``live`` maps task -> live version; ``certified`` is (version, task) of the
    registry's certified rows; ``records`` the launch records by version (a version without one is skipped)."""
    live_names = {v for t in tasks if (v := live.get(t))}
    names = live_names | {v for v, t in certified if t in tasks}
    known = sorted((v for v in names if v in records), key=version_rank, reverse=True)
    if not known:
        return None
    r = records[known[0]]
    chosen_as = "live" if known[0] in live_names else "certified"
    return Parent(known[0], r["adapter_sha256"], r.get("train_day", ""), chosen_as, r)


def sorted_overlap(a: Path, b: Path) -> int:
    """How many lines two files of ascending keys share (a merge walk: neither file is held in memory)."""
    shared = 0
    with a.open(encoding="ascii") as fa, b.open(encoding="ascii") as fb:
        x, y = fa.readline(), fb.readline()
        while x and y:
            if x.strip() == y.strip():
                shared += 1
                x, y = fa.readline(), fb.readline()
            elif x.strip() < y.strip():
                x = fa.readline()
            else:
                y = fb.readline()
    return shared


def ancestors_trained_on_golden(
    layout: ArtifactLayout, parent: Parent, records: dict, day: str
) -> str | None:
    """The first adapter of the parent's line that trained on a key golden on ``day`` (None when none did)."""
    golden = layout.golden_keys(day)
    record: dict[str, Any] | None = parent.record
    seen: set[str] = set()
    while record is not None and record.get("version") not in seen:
        seen.add(record["version"])
        keys = layout.train_keys(record.get("train_day", ""))
        if golden.exists() and keys.exists() and sorted_overlap(keys, golden):
            return record["version"]
        up = ((record.get("start") or {}).get("parent") or {}).get("version")
        record = records.get(up) if up else None
    return None


def check_parent(
    parent: Parent | None,
    *,
    layout: ArtifactLayout,
    day: str,
    base_sha256: str,
    train_config: dict[str, Any],
    policies_digest: str,
    records: dict,
) -> str | None:
    """Why the night cannot start from ``parent`` (None when it can): the conditions of the module docstring."""
    if train_config.get("start", "cold") != "warm":
        return "the night's config asks for a cold start (start=cold)"
    if parent is None:
        return "no adapter is live or certified for the training set's tasks yet"
    p = parent.record
    if not layout.resolve(p.get("adapter_dir") or layout.adapter_dir(parent.version)).is_dir():
        return f"the parent {parent.version}'s folder is gone"
    if not parent.train_day or parent.train_day >= day:
        return f"the parent {parent.version} was trained for {parent.train_day or 'an unknown day'}, not before {day}"
    if (p.get("base") or {}).get("sha256") != base_sha256:
        return f"the base changed since {parent.version} (base identity, chat template included)"
    theirs = p.get("hyperparameters") or p.get("config") or {}
    ours = _complete(train_config)
    for name in SHAPE_FIELDS:
        if _shape(theirs.get(name)) != _shape(ours.get(name)):
            if name == "modules_to_save" and ours.get(name) is None:
                continue  # None = decided from the base, which is unchanged (checked above)
            return f"the LoRA's {name} differs from {parent.version}'s"
    for name in SPLIT_FIELDS:
        if theirs.get(name) != ours.get(name):
            return f"the validation split ({name}) differs from {parent.version}'s: it may have trained on its rows"
    if p.get("policies_sha256") != policies_digest:
        return f"the tasks' signed policies changed since {parent.version} was trained"
    culprit = ancestors_trained_on_golden(layout, parent, records, day)
    if culprit is not None:
        return f"{culprit} (the parent's line) trained on rows that are golden on {day}"
    return None


def _complete(train_config: dict[str, Any]) -> dict[str, Any]:
    """``train_config`` with the trainer's defaults for the fields it leaves out."""
    from dataclasses import fields

    from ratchet_assets.night.lora_trainer import LoraTrainConfig

    names = {f.name for f in fields(LoraTrainConfig)}
    return LoraTrainConfig(**{k: v for k, v in train_config.items() if k in names}).to_dict()


def _shape(value: Any) -> Any:
    return sorted(value) if isinstance(value, list) else value


def replay_score(key: str) -> float:
    """``sha256("replay:" + key)`` as a fraction in [0, 1): the replay sample's order."""
    return int.from_bytes(hashlib.sha256(f"replay:{key}".encode()).digest()[:8], "big") / 2**64


def select_rows(
    keys: Sequence[str],
    first_days: Sequence[str],
    parent_day: str,
    share: float,
    cap: int,
    held: Sequence[bool] | None = None,
) -> tuple[tuple[int, ...], int, int]:
    """(indices of the rows a warm night reads, in file order; new rows trained on; replayed rows): the rule of
    the module docstring. ``first_days``: the day each row's example first appeared (same order as ``keys``).
    ``held``: the rows the validation split holds out; they are kept, for validation (new and old alike: the old
    ones show forgetting), and neither counted nor sampled as new or replayed rows."""
    held = held if held is not None else [False] * len(keys)
    new = [i for i, d in enumerate(first_days) if d > parent_day and not held[i]]
    old = [
        (replay_score(k), i)
        for i, (k, d) in enumerate(zip(keys, first_days, strict=True))
        if d <= parent_day and not held[i]
    ]
    replay = sorted(i for s, i in sorted(x for x in old if x[0] < share)[: max(0, cap)])
    validation = [i for i, h in enumerate(held) if h]
    return tuple(sorted(new + replay + validation)), len(new), len(replay)


def row_first_days(artifacts: str | Path, day: str) -> list[str]:
    """The day each row of ``train/day=D/train.jsonl`` first appeared (``keys.txt`` order): the earliest day of
    its example key among the window's examples; an imported row's import day; ``day`` for a key found nowhere."""
    from ratchet_assets.night import connect, sql_list

    layout = ArtifactLayout(artifacts)
    keys = layout.train_keys(day).read_text(encoding="ascii").split()
    days = json.loads(layout.train_commitment(day).read_text()).get("days") or [day]
    first: dict[str, str] = {}
    files = [p for d in days if (p := layout.examples_file(d)).exists()]
    con = connect()
    try:
        if files:
            first.update(
                con.execute(
                    f"SELECT example_key, CAST(min(day) AS VARCHAR) FROM read_parquet({sql_list(files)}, union_by_name = true) "
                    "GROUP BY example_key"
                ).fetchall()
            )
        for path in layout.import_files(until=day):
            imported = con.execute(
                f"SELECT DISTINCT example_key FROM read_parquet({sql_list([path])})"
            ).fetchall()
            for (k,) in imported:
                first.setdefault(k, path.parent.name[:10])
    finally:
        con.close()
    return [first.get(k, day) for k in keys]


def plan_start(
    artifacts: str | Path,
    day: str,
    *,
    base: str | Path,
    tasks: Sequence[str],
    base_sha256: str,
    train_config: dict[str, Any],
    policies_digest: str,
    records: dict[str, dict[str, Any]],
    live: dict[str, str | None],
    certified: Sequence[tuple[str, str]],
) -> StartPlan:
    """Warm or cold for night ``day``, and the rows a warm night trains on (module docstring). ``records``: the
    launch records by version (``launch_records``)."""
    layout = ArtifactLayout(artifacts)
    parent = find_parent(tasks, live, certified, records)
    why_not = check_parent(
        parent,
        layout=layout,
        day=day,
        base_sha256=base_sha256,
        train_config=train_config,
        policies_digest=policies_digest,
        records=records,
    )
    if why_not is not None:
        return cold(why_not)
    assert parent is not None
    keys = layout.train_keys(day).read_text(encoding="ascii").split()
    first_days = row_first_days(artifacts, day)
    held = held_out(
        layout.train_jsonl(day), train_config, base, sized_for=sum(d > parent.train_day for d in first_days)
    )
    rows, new, replay = select_rows(
        keys,
        first_days,
        parent.train_day,
        float(train_config.get("replay_share", 0.25)),
        int(train_config.get("replay_cap", 1000)),
        held,
    )
    if not new:
        return cold(f"no row is newer than the parent {parent.version}'s day {parent.train_day}")
    return StartPlan(
        "warm",
        f"from {parent.chosen_as} {parent.version}",
        parent,
        rows,
        new,
        replay,
        tuple(held[i] for i in rows),
    )


def held_out(
    train_jsonl: Path, train_config: dict[str, Any], base: str | Path, sized_for: int | None = None
) -> list[bool]:
    """The rows of ``train_jsonl`` the trainer's validation split holds out under ``train_config`` (prompts
    rendered by the chat template of ``base``): a function of each row and the share, the share sized by
    ``validation_min_rows`` for ``sized_for`` rows (default: every row of the file; a warm night: its new rows)."""
    from transformers import AutoTokenizer

    from ratchet_assets.night.lora_trainer import read_train_rows, sized_share, validation_mask

    rows = read_train_rows(train_jsonl, AutoTokenizer.from_pretrained(base))
    share = float(train_config.get("validation_share", 0.0))
    if share <= 0:
        return [False] * len(rows)
    share = sized_share(
        len(rows) if sized_for is None else sized_for, share, int(train_config.get("validation_min_rows", 0))
    )
    groups = str(train_config.get("validation_groups", "near_duplicate"))
    return validation_mask([r for _, r in rows], [p for (p, _), _ in rows], share, groups)


def write_subset(train_jsonl: Path, rows: Sequence[int], out: Path) -> None:
    """The lines ``rows`` (indices, ascending) of ``train_jsonl`` to ``out``, bytes unchanged."""
    wanted = set(rows)
    with train_jsonl.open("rb") as src, out.open("wb") as dst:
        for i, line in enumerate(line for line in src if line.strip()):
            if i in wanted:
                dst.write(line)
