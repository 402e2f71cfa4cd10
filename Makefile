# One-command set-up: every target below creates .venv on first use (torch pinned first: an unpinned torch
# pulls several GB of CUDA wheels on a CPU machine).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup browser demo test test-fast lint bench clean

# Each step says what it installs and why, and pip (not -q) shows what it collects, downloads and builds, so minutes of work
# are never silent.
$(STAMP): pyproject.toml
	@echo "setup 1/4: a virtual environment in $(VENV) ($(PYTHON))"
	$(PYTHON) -m venv $(VENV)
	@echo "setup 2/4: an up-to-date pip"
	$(BIN)/pip install --upgrade pip
	@echo "setup 3/4: torch 2.13.0 alone first, pinned: an unpinned torch would pull several GB of CUDA wheels on a CPU machine"
	$(BIN)/pip install torch==2.13.0
	@echo "setup 4/4: bertstream itself, editable, with the trainer's and the tests' extras (Beam, pyarrow, tokenizers, transformers, ...; a few minutes)"
	$(BIN)/pip install -e '.[train,test]'
	touch $(STAMP)
	@echo "setup done: $(VENV) is ready"

setup: $(STAMP)

# Opt-in, never part of set-up: Debian's chromium (about 330 MB, installed as root with apt-get) for the one
# test that renders `bertprep report` pages headless. Without it that test skips and names this target.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; }; } || \
	echo "browser: chromium not installed (needs root and apt-get); the report's browser test will skip"

# The main job on the embedded default (in-process Beam runner, local files, CPU).
demo: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" bash scripts/recipes/demo.sh

# Every test, slow end-to-end ones included (what CI runs).
test: $(STAMP) lint
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n 2 -m "slow or not slow" -q --durations=25

# Style holds by itself: lint and format check (ruff), types of the packages' modules (mypy). Part of `make test`.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The quick loop while editing: slow end-to-end tests deselected.
test-fast: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n 2 -q

bench: $(STAMP)
	$(BIN)/python benchmarks/pipeline_throughput.py
	$(BIN)/python benchmarks/pipeline_scale.py
	$(BIN)/python benchmarks/stage_speed.py --instances
	$(BIN)/python benchmarks/loader_throughput.py
	$(BIN)/python benchmarks/train_step.py

clean:
	rm -rf $(VENV) demo .pytest_cache
