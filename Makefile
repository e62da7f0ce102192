# `make demo` and `make test` each build the virtual environment from nothing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test protos lint-protos browser clean compile anvil

# Installing compiles the placement planner with mypyc (setup.py), so a change to its source installs again.
$(VENV)/.installed: pyproject.toml setup.py $(wildcard coordinator/placement/*.py)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

compile: $(VENV)/.installed

demo: $(VENV)/.installed $(ANVIL)
	$(VENV)/bin/mlxnet demo

BUF := .tools/node_modules/.bin/buf
BUF_VERSION := 1.75.0

$(BUF):
	npm install --silent --no-audit --no-fund --prefix .tools @bufbuild/buf@$(BUF_VERSION)

# The embedded payout chain (ledger/anvil.py): Foundry's anvil, whose npm platform package ships the binary.
ANVIL := .tools/node_modules/.bin/anvil
ANVIL_VERSION := 1.7.1

$(ANVIL):
	npm install --silent --no-audit --no-fund --prefix .tools @foundry-rs/anvil@$(ANVIL_VERSION)

anvil: $(ANVIL)

lint-protos: $(BUF)
	$(BUF) lint --path protos

# MLX World's browser tests drive Debian's chromium (never a downloaded browser).
browser:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && apt-get install -y -q chromium; \
	  else echo "MLX World's browser tests need chromium: sudo apt-get install chromium" >&2; exit 1; fi; }

test: $(VENV)/.installed lint-protos browser $(ANVIL)
	$(PY) -m protos.generate --check
	$(PY) -m ledger.contracts.build --check
	$(PY) -m pytest -q $(PYTEST_ARGS)

protos: $(VENV)/.installed
	$(PY) -m protos.generate

clean:
	rm -rf $(VENV) .tools .pytest_cache .hypothesis
