# `make demo` and `make test` each build the virtual environment from nothing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test protos clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/mlxnet demo

test: $(VENV)/.installed
	$(PY) -m protos.generate --check
	$(PY) -m pytest -q $(PYTEST_ARGS)

protos: $(VENV)/.installed
	$(PY) -m protos.generate

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
