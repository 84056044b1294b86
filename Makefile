# Ratchet: the two commands a newcomer needs are `make demo` and `make test` (after `make install`).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: install test test-fast durations lint bench bench-scale reference demo clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip setuptools wheel

install: $(BIN)/python  ## .venv with Ratchet, its dev and scale extras (CPU torch), and the Debian packages the tests use
	$(BIN)/pip install --quiet -e '.[dev,scale]'
	$(BIN)/python -m tests.system_packages
	@$(BIN)/ratchet --version

# `make test`: pytest-xdist workers (one per CPU and one more: many tests wait on a server or a subprocess part of
# the time, and the extra worker uses it; WORKERS=1 runs in this process), each file whole on one worker,
# the longest files first (tests/xdist_layout.py, tests/durations.json); then the tests marked `timing` alone, so
# that nothing else runs beside the latencies they measure. The timing tests run even when the first part failed
# (one failure never hides them); make fails when either part failed (pytest's exit code 5: none collected).
WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 2) + 1 )))
PARALLEL := $(if $(filter 1,$(WORKERS)),,-n $(WORKERS) --dist loadfile --no-loadscope-reorder)
# $(call two_parts,<first part's pytest arguments>,<timing part's -m expression>)
two_parts = first=0; $(BIN)/pytest -q $(1) || first=$$?; \
	timing=0; $(BIN)/pytest -q -m '$(2)' || timing=$$?; [ $$timing -eq 5 ] && timing=0; \
	echo "make: tests $$first (exit code), timing tests $$timing"; [ $$first -eq 0 ] && [ $$timing -eq 0 ]

# The suites write bytecode even where the environment says not to (PYTHONDONTWRITEBYTECODE): pytest then keeps
# each test module's rewritten asserts, so the timing part's collection of 1,500 tests takes ~8 s, not ~15 s, and
# every subprocess a test starts (a Dagster step, the CLI, a server) reads the project's compiled modules. The
# __pycache__ folders are ignored by git.
test test-fast durations: export PYTHONDONTWRITEBYTECODE :=

test: $(BIN)/python  ## the whole suite, slow end-to-end tests included
	@$(call two_parts,$(PARALLEL) -m 'not timing',timing)

test-fast: $(BIN)/python  ## everything but the tests marked slow (timing tests included, run alone at the end)
	@$(call two_parts,$(PARALLEL) -m 'not slow and not timing',timing and not slow)

durations: $(BIN)/python  ## `make test`'s first part, measuring each file's seconds into tests/durations.json (its order)
	$(BIN)/pytest -q $(PARALLEL) -m 'not timing' --record-durations tests/durations.json

lint: $(BIN)/python  ## ruff, and the layer check (tests/layers.py: imports go down the layers, no cycles)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m tests.layers

bench: $(BIN)/python  ## benchmarks; JSON results under benchmarks/results/ (BENCH_ARGS=--scale adds 10M rows)
	$(BIN)/python -m benchmarks.run --out benchmarks/results $(BENCH_ARGS)

bench-scale: $(BIN)/python  ## make bench plus the night at 10M requests a day (slow: ~10+ min on 2 cores)
	$(BIN)/python -m benchmarks.run --out benchmarks/results --scale $(BENCH_ARGS)

reference: $(BIN)/python  ## pinned `ratchet sim` runs reproduce byte for byte (REFERENCE_ARGS="--write --note '...'" rewrites)
	$(BIN)/python -m benchmarks.sim_reference $(REFERENCE_ARGS)

demo: $(BIN)/python  ## the whole loop on this machine (Ctrl-C stops it; run again to resume)
	$(BIN)/ratchet demo --days 4 --day-seconds 50 $(DEMO_ARGS)

clean:
	rm -rf .ratchet .pytest_cache benchmarks/results/*.json
