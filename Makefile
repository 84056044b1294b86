# Ratchet: the two commands a newcomer needs are `make demo` and `make test` (after `make install`).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: install test test-fast lint bench bench-scale reference demo clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip setuptools wheel

install: $(BIN)/python  ## create .venv and install Ratchet with its dev and scale extras (CPU torch)
	$(BIN)/pip install --quiet -e '.[dev,scale]'
	@$(BIN)/ratchet --version

test: $(BIN)/python  ## the whole suite, slow end-to-end tests included
	$(BIN)/pytest -q

test-fast: $(BIN)/python  ## everything but the tests marked slow
	$(BIN)/pytest -q -m 'not slow'

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
	$(BIN)/ratchet demo --days 4 --day-seconds 60 $(DEMO_ARGS)

clean:
	rm -rf .ratchet .pytest_cache benchmarks/results/*.json
