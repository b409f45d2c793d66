# Two commands do everything on a fresh machine with Python 3.11+ and the package registries:
#   make quickstart   set up .venv from uv.lock (the lab alone), run the quickstart experiment end to end, build the report site
#                     (outside the checkout, under the reports_dir setting: `marin report build` prints where)
#   make test         set up .venv from uv.lock (the lab + the dev and compare groups), check the export, run the notebooks' tests and pytest
# Every target syncs with --inexact: it installs what it needs and removes nothing another target installed, and with
# --compile-bytecode: the .pyc files are written once at install, so that a process started on a machine with
# PYTHONDONTWRITEBYTECODE set (containers often set it) does not compile pandas, Ray and torch again each time
# (import pandas 5.2 s -> 1.3 s, import ray 10.4 s -> 5.2 s here; the suite starts hundreds of processes).
SHELL := /bin/bash
UV_VERSION := 0.13.9
PY ?= python3
UV := $(shell command -v uv 2>/dev/null || echo .bootstrap/bin/uv)
VENV := .venv
BIN := $(VENV)/bin
export WANDB_MODE ?= offline
export HF_HUB_OFFLINE ?= 1
export JAX_PLATFORMS ?= cpu
# libtpu (the test environment's TPU compiler) lets one process hold it at a time through /tmp/libtpu_lockfile, a
# guard against two programs sharing one TPU; a CPU-only machine compiling for TPU (pytest's workers, the notebooks'
# tests) has no TPU to share.
export ALLOW_MULTIPLE_LIBTPU_LOAD ?= 1
# XLA's persistent compilation cache, shared by every process of a test run (pytest workers, subprocesses, Ray
# workers, the notebooks' tests): the tiny test models compile the same programs many times over, and compiling is
# most of the suite's time. Under the checkout (ignored by git), so a clean clone starts cold and reruns start warm.
export JAX_COMPILATION_CACHE_DIR ?= $(CURDIR)/.cache/jax
export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS ?= 0.1
export JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES ?= 0
export JAX_COMPILATION_CACHE_MAX_SIZE ?= 2000000000
# pytest processes (pytest-xdist, one test file per worker at a time, so module fixtures such as a Ray cluster start once)
TEST_WORKERS ?= 2

.PHONY: venv venv-test quickstart test test-slow export-check nbtest pytest duplicates chromium espeak lab export readme bench gpu tpu

.bootstrap/bin/uv:
	$(PY) -m venv .bootstrap && .bootstrap/bin/pip install -q uv==$(UV_VERSION)

# the main job's environment: the lab's own dependencies, none of the test-only comparison stack (torch, transformers, lm-eval)
venv: | $(UV)
	$(UV) sync --frozen --inexact --compile-bytecode --no-default-groups

# the test environment: the lab + the `dev` and `compare` dependency groups (torch from the registry, pinned)
venv-test: | $(UV)
	$(UV) sync --frozen --inexact --compile-bytecode

quickstart: venv
	$(BIN)/marin run experiments_nb/quickstart.ipynb
	$(BIN)/marin report build

test: venv-test chromium espeak export-check nbtest pytest duplicates

# marin/ must equal a fresh nbdev-export of nbs/
export-check: venv-test
	$(BIN)/nbdev-export
	@if [ -n "$$(git status --porcelain -- marin/)" ]; then git status --porcelain -- marin/; git diff --stat -- marin/; \
	  echo "marin/ differs from a fresh nbdev-export of nbs/: run 'make export' and commit"; exit 1; fi

# with the suite's compile-time XLA flags (tests/conftest.py: COMPILE_FAST_XLA_FLAGS, and why) and its Python start-up
# folder (tests/conftest.py: PYTHON_STARTUP, written when the flags are read): jsonschema's IRI parsers built when first
# used, not in every process that imports ray or nbformat (4 notebooks' tests: 19-25 -> 11-12 CPU s)
nbtest: venv-test
	XLA_FLAGS="$$(cd tests && ../$(BIN)/python -c 'from conftest import COMPILE_FAST_XLA_FLAGS as f; print(f)') $${XLA_FLAGS:-}" \
	  PYTHONPATH="$(CURDIR)/.cache/python-startup$${PYTHONPATH:+:$$PYTHONPATH}" $(BIN)/nbdev-test --n-workers 2 --timing

# tests marked `slow` (a real pretrained model end to end: minutes and GBs each) run with `make test-slow`
pytest: venv-test
	t="$$(mktemp -d /tmp/marin-pytest.XXXXXX)"; rc=0; \
	  $(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=40 -m "not slow" --basetemp="$$t" tests/ || rc=$$?; \
	  rm -rf "$$t"; exit $$rc

test-slow: venv-test
	$(BIN)/pytest -q -s -m slow --durations=5 tests/

# where the tree repeats itself: a report for reviewers, not a gate (the `duplicates` tool always exits 0; machines
# without it skip this). tests/test_house.py is the gate: import cycles, layer direction, formatting.
duplicates:
	@if command -v duplicates >/dev/null; then duplicates --most 20; else echo "duplicates: not installed here (skipped)"; fi

# headless Chromium for the report test (Debian package); installed when missing and we may install packages
chromium:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  { if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	    else echo "chromium missing: install Debian's 'chromium' package (the report test needs it)"; exit 1; fi; }

# espeak-ng, the speech synthesizer of the audio–text data (Debian package; nbs/17a_speech, tests/test_audio.py)
espeak:
	@command -v espeak-ng >/dev/null || \
	  { if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq espeak-ng >/dev/null; \
	    else echo "espeak-ng missing: install Debian's 'espeak-ng' package (the audio tests need it)"; exit 1; fi; }

export: venv
	$(BIN)/nbdev-export
	$(BIN)/nbdev-clean
	$(BIN)/nbdev-clean --fname experiments_nb
	$(MAKE) readme

# README.md is nbs/index.ipynb rendered to Markdown (tests/test_readme.py checks they agree)
readme: venv
	$(BIN)/jupyter nbconvert --to markdown --log-level=ERROR --stdout nbs/index.ipynb > README.md

lab: venv
	$(BIN)/marin lab

bench: venv
	$(BIN)/python bench/core_executor.py

gpu: | $(UV)
	$(UV) sync --frozen --inexact --no-default-groups --extra gpu
tpu: | $(UV)
	$(UV) sync --frozen --inexact --no-default-groups --extra tpu
