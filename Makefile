# CNN-parallel: `make compare` runs every framework on the default data and prints
# the table; `make test` runs the test suite. Both build the main env first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
REQ_HASH := $(shell sha1sum requirements.txt | cut -c1-12)
STAMP := $(VENV)/.installed-$(REQ_HASH)
ARGS ?=

.PHONY: all setup compare test clean-results
all: compare

# The main virtual environment, rebuilt when requirements.txt changes.
$(STAMP): requirements.txt
	@echo "[setup] creating $(VENV) (TensorFlow, Keras 3, PyTorch, JAX; about 2 minutes the first time)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	rm -f $(VENV)/.installed-*
	touch $@

setup: $(STAMP)

compare: setup
	$(PY) run_all.py $(ARGS)

test: setup
	$(PY) -m pytest -q tests $(ARGS)

clean-results:
	rm -rf results/*.csv results/predictions results.log
