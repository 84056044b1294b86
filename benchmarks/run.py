"""`make bench`: run every benchmark listed in BENCHES and write one JSON file per benchmark.

Each module has ``run(out_dir: Path, **kwargs) -> dict``; its result is written to ``<out>/<name>.json`` and
summarised. ``--scale`` (``make bench-scale``) adds the slow at-scale runs in SCALE_BENCHES (the night at 10M
requests a day: ~10 minutes on 2 cores, synthesis included).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import time
from pathlib import Path
from typing import Any

# (result name, module, keyword arguments of its run())
BENCHES: list[tuple[str, str, dict[str, Any]]] = [
    ("merkle", "benchmarks.bench_merkle", {}),
    ("gateway", "benchmarks.bench_gateway", {}),
    ("student", "benchmarks.bench_student", {}),
    ("night", "benchmarks.bench_night", {}),
]
SCALE_BENCHES: list[tuple[str, str, dict[str, Any]]] = [
    ("merkle_10m", "benchmarks.bench_merkle", {"n": 10_000_000, "old_size": 7_500_000, "in_memory": False}),
    ("night_10m", "benchmarks.bench_night", {"n": 10_000_000}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--only", default="", help="comma-separated benchmark names (e.g. night,night_10m)")
    parser.add_argument("--scale", action="store_true", help="also run the 10M-row benchmarks (slow)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    only = {s for s in args.only.split(",") if s}
    benches = BENCHES + (SCALE_BENCHES if args.scale or only & {b[0] for b in SCALE_BENCHES} else [])
    for name, module_name, kwargs in benches:
        if only and name not in only:
            continue
        if importlib.util.find_spec(module_name) is None:
            continue
        started = time.perf_counter()
        result = importlib.import_module(module_name).run(out, **kwargs)
        result.setdefault("wall_s", round(time.perf_counter() - started, 3))
        (out / f"{name}.json").write_text(json.dumps(result, indent=2, sort_keys=True))
        print(f"{name}: {json.dumps(result.get('summary', result), sort_keys=True)[:600]}")


if __name__ == "__main__":
    main()
