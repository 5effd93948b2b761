# Two commands: `make demo` and `make test`. Both create .venv when missing and install the project into it.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

# What ruff and mypy read: the product's four import roots, the benchmarks (package and scripts) and the tests.
LINTED := sentinel collectors models migrations benchmarks tests
TYPED  := sentinel collectors/sentinel_collectors models/sentinel_models migrations/sentinel_migrations \
          benchmarks/sentinel_bench

.PHONY: demo test check lint bench dist image clean model

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(TEST_STAMP): pyproject.toml benchmarks/pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test,dev]' -e benchmarks
	touch $@ $(STAMP)

demo: $(STAMP)
	$(BIN)/sentinel demo

# tests/services.sh starts the real services the tests use (PostgreSQL, tansu, Slurm) and stops exactly what it
# started. Two pytest-xdist workers; the tests on the shared services run on one of them (tests/conftest.py).
# pytest exits 5 when it collected no test: that fails the target too.
test: lint
	@bash tests/debian-deps.sh
	@bash -c 'set -e; trap "bash tests/services.sh stop" EXIT; bash tests/services.sh start; \
		eval "$$(bash tests/services.sh env)"; $(BIN)/python -m pytest -n 2 $(PYTEST_ARGS)'

# Retrain the shipped hazard model by its recipe (sentinel.sim.trainset.train_shipped, ~2 min on 2 cores) and
# rewrite its pinned SHA-256 in models/sentinel_models/shipped.py; needed after a change to the simulator, the
# features or the training code.
model: $(STAMP)
	$(BIN)/sentinel train --recipe shipped --ship

# An sdist and a wheel in dist/ (units, rules, dashboard and samples go to <prefix>/share/sentinel).
dist: $(TEST_STAMP)
	$(BIN)/python -m build --no-isolation --outdir dist .

# The container image deploy/kubernetes runs: sentinel:<version>, built from the wheel (CONTAINER=podman works too).
CONTAINER ?= docker
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
image: dist
	$(CONTAINER) build -f deploy/container/Containerfile --build-arg VERSION=$(VERSION) -t sentinel:$(VERSION) .

lint: $(TEST_STAMP)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/mypy $(TYPED)

# The inner loop: lint, types and the tests that need no service and run quickly (not marked slow).
check: lint
	$(BIN)/python -m pytest -q -n 2 -m "not slow" $(PYTEST_ARGS)

# The benchmarks' own distribution (sentinel-bench), installed beside the product; `sentinel-bench --help` lists them.
bench: $(TEST_STAMP)
	$(BIN)/sentinel-bench --help

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache .ruff_cache sentinel-demo.db* dist build *.egg-info
