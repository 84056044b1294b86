"""The night at scale: bounded memory without changing a byte.

Streamed writers and commitments give the files and roots the in-memory definitions give; a small memory budget
(DuckDB spilling to disk) and the example-key-range split give the same artifacts as the default, unsplit run.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ratchet_assets.night.budget import Budget, PeakRSS, key_ranges
from ratchet_assets.night.evaluate import golden_commitments, load_golden
from ratchet_assets.night.examples import build_examples
from ratchet_assets.night.fixtures import write_day
from ratchet_assets.night.split import GOLDEN_ROW_GROUP_ROWS, split_golden
from ratchet_assets.night.traffic import consolidate_traffic
from ratchet_assets.night.training_set import build_training_set
from ratchet_core.layout import ArtifactLayout
from ratchet_stats import merkle
from ratchet_stats.commitment import key_commitment

DAYS = ("2026-02-01", "2026-02-02")


def _night(home: Path, budget: Budget | None) -> dict[str, str]:
    """Run the four steps over both days; sha256 of every artifact written (spill folders excluded)."""
    art = home / "art"
    for day in DAYS:
        consolidate_traffic(home / "lake", art, day, budget=budget)
        build_examples(art, day, budget=budget)
        split_golden(art, day, floor=20, budget=budget)
        build_training_set(art, day, budget=budget)
    return {
        str(p.relative_to(art)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(art.rglob("*"))
        if p.is_file() and not p.name.startswith(".") and ".spill" not in p.parts
    }


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("lake")
    for i, day in enumerate(DAYS):
        write_day(home / "lake", day, 600, seed=11 + i, day_index=i)
    return home / "lake"


def _home(tmp_path: Path, lake: Path, name: str) -> Path:
    home = tmp_path / name
    shutil.copytree(lake, home / "lake")
    return home


def test_streamed_files_and_roots_equal_the_in_memory_definitions(tmp_path: Path, lake: Path) -> None:
    home = _home(tmp_path, lake, "a")
    _night(home, None)
    layout, day = ArtifactLayout(home / "art"), DAYS[-1]
    # Registry and golden set: the bytes pq.write_table gives for the same rows.
    for path, kw in (
        (layout.golden_registry(), {}),
        (layout.golden_file(day), {"row_group_size": GOLDEN_ROW_GROUP_ROWS}),
    ):
        table = pq.read_table(path)
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="zstd", **kw)
        assert path.read_bytes() == buf.getvalue(), path
    # Golden commitments: the Python definition (GoldenRow.leaf over parsed rows) gives the same roots.
    keys_c, rows_c = golden_commitments(load_golden(home / "art", day))
    written = json.loads(layout.golden_commitment(day).read_text())
    assert (written["keys"]["root"], written["rows"]["root"]) == (keys_c.root, rows_c.root)
    assert written["rows"]["size"] == rows_c.size > 20
    # Training set: key tree and row tree from the files written.
    lines = layout.train_jsonl(day).read_bytes().splitlines()
    keys = layout.train_keys(day).read_text().split()
    commitment = json.loads(layout.train_commitment(day).read_text())
    assert commitment["rows"]["root"] == merkle.root(lines).hex()
    assert commitment["keys"]["root"] == key_commitment(keys).root and len(keys) == len(lines) > 100


def test_key_ranges_cover_every_key_once() -> None:
    assert key_ranges(1) == [("00000000", None)]
    ranges = key_ranges(3)
    assert [r[0] for r in ranges] == ["00000000", "55555556", "aaaaaaab"] and ranges[-1][1] is None
    for key in ("0" * 64, "5" * 8 + "0" * 56, "55555554" + "f" * 56, "f" * 64):
        assert sum(lo <= key and (hi is None or key < hi) for lo, hi in ranges) == 1
    assert PeakRSS().mb() > 10


def test_shard_of_and_key_ranges_agree() -> None:
    import numpy as np

    from ratchet_assets.night.budget import shard_of

    keys = [f"{p:08x}" + "0" * 56 for p in (0, 1, 0x55555555, 0x55555556, 0xAAAAAAAA, 0xAAAAAAAB, 0xFFFFFFFF)]
    got = shard_of(np.array([int(k[:8], 16) for k in keys], dtype=np.uint64), 3).tolist()
    ranges = key_ranges(3)
    want = [next(i for i, (lo, hi) in enumerate(ranges) if lo <= k and (hi is None or k < hi)) for k in keys]
    assert got == want == [0, 0, 0, 1, 1, 2, 2]


@pytest.mark.slow
def test_split_path_in_a_small_budget_equals_the_unsplit_path(tmp_path: Path) -> None:
    """~50k requests over two days: the default run (one key range, 2 GB) and a run split into 4 example-key
    ranges finished by 2 worker processes in a 512 MB budget (DuckDB spilling) write the same bytes."""
    lake = tmp_path / "lake"
    for i, day in enumerate(DAYS):
        write_day(lake, day, 25_000, seed=21 + i, day_index=i)
    unsplit, split = _home(tmp_path, lake, "unsplit"), _home(tmp_path, lake, "split")
    plain = _night(unsplit, None)
    small = Budget(memory_mb=512, shards=4, workers=2)
    assert not (split / "art" / ".spill").exists()
    split_files = _night(split, small)
    assert len(plain) >= 18 and split_files == plain
    assert not list((split / "art" / ".spill").iterdir())  # spill folders go with their connections
    # How much memory the budget holds the night to is a measurement, not a behaviour: `make bench` records the
    # peak RSS per step under the budget (benchmarks/bench_night.py), on whatever machine runs it.


@pytest.mark.slow
def test_dagster_runs_the_key_ranges_as_parallel_steps_of_the_multiprocess_executor(tmp_path: Path) -> None:
    """`dagster asset materialize` (multiprocess executor) with the day split into 3 key ranges: each range is its
    own step (``examples_range[range_i]``, a separate process), and the artifacts equal the unsplit run's."""
    import os
    import subprocess
    import sys

    import dagster as dg

    from ratchet_assets.defs.examples import examples
    from ratchet_assets.defs.golden_split import golden_split
    from ratchet_assets.defs.resources import night_resources
    from ratchet_assets.defs.traffic import traffic
    from ratchet_assets.defs.training_set import training_set

    day = DAYS[0]
    select = "traffic,examples,golden_split,training_set"
    homes = {}
    for name in ("inprocess", "multiprocess"):
        homes[name] = tmp_path / name
        write_day(homes[name] / "lake", day, 600, seed=5)
    # In process, one key range (a small day): examples written directly by examples_prepare.
    result = dg.materialize(
        [traffic, examples, golden_split, training_set],
        partition_key=day,
        instance=dg.DagsterInstance.ephemeral(),
        resources=night_resources(homes["inprocess"]),
    )
    assert result.success
    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("RATCHET_")},
        "DAGSTER_HOME": str(dagster_home),
        "RATCHET_HOME": str(homes["multiprocess"]),
    }
    config = {"resources": {"night": {"config": {"key_ranges": 3}}}}
    cmd = [
        str(Path(sys.executable).with_name("dagster")),
        "asset",
        "materialize",
        "-m",
        "ratchet_assets.definitions",
    ]
    cmd += ["--select", select, "--partition", day, "--config-json", json.dumps(config)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]

    def artifacts(home: Path) -> dict[str, str]:
        art = home / "artifacts"
        return {
            str(p.relative_to(art)): hashlib.sha256(p.read_bytes()).hexdigest()
            for sub in ("traffic", "examples", "golden", "train")
            for p in sorted((art / sub).rglob("*"))
            if p.is_file() and not p.name.startswith(".")
        }

    assert artifacts(homes["multiprocess"]) == artifacts(homes["inprocess"])
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        [run] = instance.get_runs()
        starts = {
            e.dagster_event.step_key: e.dagster_event.pid
            for e in instance.all_logs(run.run_id)
            if e.dagster_event and e.dagster_event.event_type_value == "STEP_START"
        }
    ranges = {k: pid for k, pid in starts.items() if k.startswith("examples.examples_range[")}
    assert sorted(ranges) == [f"examples.examples_range[range_{i}]" for i in range(3)], sorted(starts)
    assert len(set(ranges.values())) == 3  # one process per step: the executor may run them side by side
    merge = [k for k in starts if k.startswith("examples.examples_merge")]
    assert merge and starts[merge[0]] not in ranges.values()


def test_golden_and_training_sets_by_key_range_equal_one_pass_with_erasures(
    tmp_path: Path, lake: Path
) -> None:
    """golden_split and training_set in 4 forced key ranges write the bytes one range writes: day 1 (one examples
    file: the plain scan, erasures applied in Arrow) and day 2 (two files: deduplicated per range), with a key and
    a request id erased."""
    import duckdb

    from ratchet_assets.night.erasures import Erasures

    home = _home(tmp_path, lake, "base")
    art = home / "art"
    for day in DAYS:
        consolidate_traffic(home / "lake", art, day)
        build_examples(art, day)
    first = ArtifactLayout(art).examples_file(DAYS[0])
    rows = duckdb.connect().execute(f"SELECT example_key, request_id FROM '{first}' ORDER BY 1").fetchall()
    erasures = Erasures(example_keys=frozenset({rows[3][0]}), request_ids=frozenset({rows[7][1]}))
    # people's labels (night.labels): a demonstration and a bad teacher label on keys of both days
    from ratchet_assets.night.labels import Labels

    second = ArtifactLayout(art).examples_file(DAYS[1])
    more = duckdb.connect().execute(f"SELECT example_key FROM '{second}' ORDER BY 1").fetchall()
    demo = '{"content":"people say so","role":"assistant","tool_calls":null}'
    labels = Labels({rows[10][0]: demo, more[5][0]: demo}, frozenset({rows[12][0], more[9][0]}), 4)
    sums = {}
    for name, budget, labelled in (
        ("one", Budget(), None),
        ("four", Budget(shards=4), None),
        ("one-labelled", Budget(), labels),
        ("four-labelled", Budget(shards=4), labels),
    ):
        copy = tmp_path / name
        shutil.copytree(art, copy)
        for day in DAYS:
            split_golden(copy, day, floor=20, erasures=erasures, budget=budget, labels=labelled)
            t = build_training_set(copy, day, erasures=erasures, budget=budget, labels=labelled)
            assert t.erased >= 2 and t.golden_overlap == 0
        sums[name] = {
            str(p.relative_to(copy)): hashlib.sha256(p.read_bytes()).hexdigest()
            for sub in ("golden", "train")
            for p in sorted((copy / sub).rglob("*"))
            if p.is_file() and not p.name.startswith(".")
        }
    # per day: golden (set, keys, commitment) and train (lines, keys, labels, commitment), and the registry
    assert len(sums["one"]) == 15 and sums["four"] == sums["one"]
    assert sums["four-labelled"] == sums["one-labelled"] != sums["one"]
    train_keys = set(ArtifactLayout(tmp_path / "one").train_keys(DAYS[0]).read_text().split())
    assert rows[3][0] not in train_keys and rows[7][0] not in train_keys


def test_planned_key_ranges_start_at_row_groups_of_the_days_file(tmp_path: Path, monkeypatch) -> None:
    """Without a forced number of ranges, each range starts at a row group's first key, so every row group of the
    day's examples file is read by exactly one range; the ranges cover every key once."""
    import pyarrow as pa

    from ratchet_assets.night import ranges

    keys = sorted(hashlib.sha256(str(i).encode()).hexdigest() for i in range(1000))
    path = tmp_path / "examples.parquet"
    pq.write_table(pa.table({"example_key": keys}), path, row_group_size=100)
    monkeypatch.setattr(ranges, "RANGE_ROWS", 250)
    planned = ranges.plan_ranges(Budget(), [path], path)
    assert len(planned) == 4 and planned[0][0] == "" and planned[-1][1] is None
    assert {lo for lo, _ in planned[1:]} <= {keys[i] for i in range(0, 1000, 100)}
    for g in range(10):
        group = keys[g * 100 : (g + 1) * 100]
        inside = [
            i for i, (lo, hi) in enumerate(planned) if lo <= group[0] and (hi is None or group[-1] < hi)
        ]
        assert len(inside) == 1, g
    assert ranges.plan_ranges(Budget(shards=3), [path], path) == key_ranges(3)
    assert ranges.range_sql("k", "", None) == "TRUE" and ranges.range_sql("k", "00000000", "8") == "k < '8'"
