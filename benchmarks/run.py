"""`make bench`: run every benchmark module listed in BENCHES and write one JSON file per benchmark.

Each module has ``run(out_dir: Path) -> dict``; its result is written to ``<out>/<name>.json`` and summarised.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import time
from pathlib import Path

BENCHES = [
    "benchmarks.bench_merkle",
    "benchmarks.bench_gateway",
    "benchmarks.bench_student",
    "benchmarks.bench_night",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--only", default="", help="comma-separated benchmark names (module suffixes)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    only = {s for s in args.only.split(",") if s}
    for module_name in BENCHES:
        name = module_name.rsplit(".", 1)[-1].removeprefix("bench_")
        if only and name not in only:
            continue
        if importlib.util.find_spec(module_name) is None:
            continue
        started = time.perf_counter()
        result = importlib.import_module(module_name).run(out)
        result.setdefault("wall_s", round(time.perf_counter() - started, 3))
        (out / f"{name}.json").write_text(json.dumps(result, indent=2, sort_keys=True))
        print(f"{name}: {json.dumps(result.get('summary', result), sort_keys=True)[:400]}")


if __name__ == "__main__":
    main()
