# vlaunch — everyday entry points. `make install` once, then `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
VLAUNCH := $(VENV)/bin/vlaunch
PROFILE ?= llama8b-32k
LOG ?=

.PHONY: install test lint format plan serve check e2e demo bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

install: $(PY)  ## create .venv and install vlaunch with its dev tools
	$(PY) -m pip install -q -e '.[dev]'

test: ## the unit and CLI tests (no network, no GPU, no vLLM)
	$(PY) -m pytest -q -m "not e2e"

lint: ## ruff (lint + format check) and mypy --strict on the package
	$(VENV)/bin/ruff check launcher tests bench
	$(VENV)/bin/ruff format --check launcher tests bench
	$(VENV)/bin/mypy

format:
	$(VENV)/bin/ruff format launcher tests bench
	$(VENV)/bin/ruff check --fix launcher tests bench

plan: ## predict the buckets and vLLM's pool for PROFILE
	$(VLAUNCH) plan profiles/$(PROFILE).yaml

serve: ## plan, guard, launch vLLM for PROFILE and check the prediction live
	$(VLAUNCH) serve profiles/$(PROFILE).yaml

check: ## read a vLLM startup log: make check LOG=path/to/vllm.log
	@test -n "$(LOG)" || (echo "usage: make check LOG=path/to/vllm.log" >&2; exit 2)
	$(VLAUNCH) check $(LOG)

e2e: ## real vLLM (CPU build) end to end
	$(PY) -m pytest -q -m e2e

demo: ## a tiny real vLLM server on this machine's CPU
	$(VLAUNCH) serve profiles/tiny-cpu.yaml

bench: ## cold-start timings of the CLI
	$(PY) bench/cold_start.py

clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache build *.egg-info
