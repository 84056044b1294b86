"""The night's memory budget: how much memory one step may use, and how that is enforced and measured.

A step is a Python process driving an in-memory DuckDB connection. The budget (``RATCHET_NIGHT_MEMORY_MB``,
default 2048) is split between them: DuckDB gets ``duckdb_share`` (half) of it as ``memory_limit`` and spills
what does not fit (sorts, joins, windows, aggregates) to a folder under ``spill_dir`` (default
``<artifacts>/.spill``; removed with the connection). The rest is for what DuckDB allocates beyond its limit
(measured: up to ~0.8 GB at 10M rows), the interpreter (~150-300 MB), Arrow batches in flight and the Parquet
writers' row groups. Python never holds a day's rows: results stream from DuckDB in batches
(``stream_batches``), files are written row group by row group, and where a step needs the whole day in key
order (``examples``) it can work one example-key range at a time (``shard_of``, ``key_ranges``), each range in
its own process (``run_shards``, ``workers``), so its working set is ``1/shards`` of the day's.

``PeakRSS`` measures a step's peak resident memory (Linux ``VmHWM``, reset at the start), which the assets report
as ``peak_rss_mb`` and the benchmark per step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import resource
import shutil
import tempfile
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

DEFAULT_MEMORY_MB = 2048
MIN_MEMORY_MB = 256
# Rows of a key range (shard) the steps aim for: sorting ~250k wide example rows stays well inside 1 GB.
ROWS_PER_SHARD = 250_000
MAX_SHARDS = 256


@dataclass(frozen=True)
class Budget:
    """Memory (MB) one night step may use, DuckDB's share of it and where DuckDB spills; ``shards`` = 0 lets each
    step choose its number of example-key ranges from the day's size, n > 0 forces n (tests, benchmarks)."""

    memory_mb: int = DEFAULT_MEMORY_MB
    spill_dir: Path | None = None
    duckdb_share: float = 0.5
    shards: int = 0
    threads: int = 0  # 0: DuckDB's default (one per core)
    workers: int = 1  # key ranges finished at once, each in its own process with 1/workers of the budget

    def __post_init__(self) -> None:
        if self.memory_mb < MIN_MEMORY_MB:
            raise ValueError(
                f"the night's memory budget is {self.memory_mb} MB; it needs at least {MIN_MEMORY_MB} MB "
                "(set RATCHET_NIGHT_MEMORY_MB higher)"
            )
        if not 0.1 <= self.duckdb_share <= 0.9:
            raise ValueError(f"duckdb_share must be in [0.1, 0.9], got {self.duckdb_share}")
        if self.shards < 0 or self.shards > MAX_SHARDS:
            raise ValueError(f"shards must be in 0..{MAX_SHARDS}, got {self.shards}")
        if self.workers < 1 or self.memory_mb // self.workers < MIN_MEMORY_MB:
            raise ValueError(
                f"{self.workers} workers need at least {MIN_MEMORY_MB} MB each of the {self.memory_mb} MB budget"
            )

    @property
    def duckdb_mb(self) -> int:
        return max(128, int(self.memory_mb * self.duckdb_share))

    def shards_for(self, rows: int) -> int:
        """Example-key ranges for a step over `rows` rows (forced by ``shards``, else ~ROWS_PER_SHARD each)."""
        if self.shards:
            return self.shards
        return max(1, min(MAX_SHARDS, -(-rows // ROWS_PER_SHARD)))


def resolve(budget: Budget | int | None) -> Budget:
    """A Budget from a Budget, a number of MB or None (the default budget)."""
    if budget is None:
        return Budget()
    if isinstance(budget, Budget):
        return budget
    return Budget(memory_mb=int(budget))


def connect(budget: Budget | int | None, artifacts_root: str | Path, step: str) -> duckdb.DuckDBPyConnection:
    """``ratchet_assets.night.connect()`` held to the budget: DuckDB's ``memory_limit`` is its share, and it spills
    to a fresh folder under ``<spill_dir or artifacts/.spill>`` named after `step`, removed with the connection."""
    from ratchet_assets.night import connect as night_connect

    b = resolve(budget)
    root = Path(b.spill_dir) if b.spill_dir else Path(artifacts_root) / ".spill"
    root.mkdir(parents=True, exist_ok=True)
    folder = tempfile.mkdtemp(prefix=f"{step}-", dir=root)
    con = night_connect()
    con.execute(f"SET memory_limit = '{b.duckdb_mb}MB'")
    con.execute(f"SET temp_directory = '{folder}'")
    if b.threads:
        con.execute(f"SET threads = {int(b.threads)}")
    weakref.finalize(con, shutil.rmtree, folder, True)
    return con


def shard_of(prefix: np.ndarray, shards: int) -> np.ndarray:
    """The key range (0 .. shards-1) of example keys given their first 32 bits (``int(key[:8], 16)``, uint64):
    ``floor(prefix * shards / 2**32)``, so ranges are contiguous in key order and, keys being SHA-256 hex, of
    equal expected size."""
    return (prefix.astype(np.uint64) * np.uint64(shards)) >> np.uint64(32)


def key_ranges(shards: int) -> list[tuple[str, str | None]]:
    """The key ranges ``shard_of`` assigns, as half-open text bounds ``[lo, hi)`` of 8-hex-digit prefixes (the
    last one open, ``hi`` None): ``lo <= key < hi`` compares as text."""
    if shards < 1:
        raise ValueError("shards must be >= 1")
    bounds = [f"{-(-(i << 32) // shards):08x}" for i in range(shards)]
    return [(bounds[i], bounds[i + 1] if i + 1 < shards else None) for i in range(shards)]


def run_shards(fn: Any, plan: Any, budget: Budget) -> list[Any]:
    """``[fn(plan, shard, budget) for shard in range(plan.shards)]``, in ``budget.workers`` processes at once
    (each with its share of the budget and one DuckDB thread); results in shard order."""
    return list(iter_shards(fn, plan, budget))


def iter_shards(fn: Any, plan: Any, budget: Budget) -> Iterator[Any]:
    """``run_shards``, each result yielded as soon as it and every range before it are done (so the caller can
    consume range i while the workers finish the later ones)."""
    if budget.workers <= 1 or plan.shards <= 1:
        for shard in range(plan.shards):
            yield fn(plan, shard, budget)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    share = dataclasses.replace(budget, memory_mb=budget.memory_mb // budget.workers, threads=1, workers=1)
    # spawn: a forked child would inherit DuckDB's threads and locks mid-flight
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=budget.workers, mp_context=ctx) as pool:
        n = plan.shards
        yield from pool.map(_measured, [fn] * n, [plan] * n, range(n), [share] * n)


def _measured(fn: Any, plan: Any, shard: int, budget: Budget) -> Any:
    """``fn(plan, shard, budget)`` in a worker process, its peak RSS set on the result (``peak_rss_mb``)."""
    rss = PeakRSS()
    out = fn(plan, shard, budget)
    out.peak_rss_mb = rss.mb()
    return out


class PeakRSS:
    """Peak resident memory of this process since ``start()`` (MB): Linux ``VmHWM`` after resetting it through
    ``/proc/self/clear_refs``; elsewhere the process's lifetime peak (``ru_maxrss``)."""

    def __init__(self) -> None:
        self.start()

    def start(self) -> None:
        with contextlib.suppress(OSError):
            Path("/proc/self/clear_refs").write_text("5")

    def mb(self) -> float:
        try:
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
        except OSError:
            pass
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
