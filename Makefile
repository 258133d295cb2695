# Two commands do all the set-up on a fresh machine:
#   make demo   - create .venv, install, run the main job on built-in defaults
#   make test   - create .venv, install, run the default test suite
# CPU torch is pinned by default (its wheel is small and needs no GPU). GPU users override it:
#   make test TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu126"
PYTHON     ?= python3
VENV       ?= .venv
TORCH_SPEC ?= torch==2.13.0
TL_SPEC    ?= transformer-lens==3.9.0
PYTEST_ARGS ?=
BIN   := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-slow lint format test-tl4 docs clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(TORCH_SPEC)
	$(BIN)/python -m pip install -q -e '.[test,cluster,docs]' '$(TL_SPEC)'
	touch $@

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/interp study-a demo

# The default suite: at most 12 minutes on 2 idle cores (README); --durations shows where it goes.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 -m "not slow" --durations=30 $(PYTEST_ARGS)

# What cannot fit the default suite's budget (full-size runs, signal and kill tests): CI runs it too.
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 -m slow --durations=30 $(PYTEST_ARGS)

# ruff: lint rules and formatting (pyproject.toml [tool.ruff]); CI fails on either.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The model unit tests and the TransformerBridge oracle (tests/tl4) under TransformerLens 4.x
# (4.x removed 3.x's HookedTransformer, whose oracle runs in `make test` only).
test-tl4:
	$(MAKE) VENV=.venv-tl4 TL_SPEC='transformer-lens>=4,<5' install
	.venv-tl4/bin/python -m pytest -q -n 2 tests/unit/models tests/tl4

# The docs site (Sphinx + MyST-NB + furo, installed with the rest: the tests build a tutorial
# page), tutorials executed, warnings as errors.
docs: $(STAMP)
	$(BIN)/sphinx-build -W --keep-going -b html docs docs/_build/html

clean:
	rm -rf $(VENV) .venv-tl4 .pytest_cache .hypothesis
