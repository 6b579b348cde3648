# Two commands do all the set-up: `make run` (dashboard) and `make test` (test suite).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PORT ?= 8501
# pytest-xdist processes for `make test`: three on CI's two cores, one thread each, since the suite waits much of the
# time (on its browser, its apps, its processes), which a third process fills; 0 runs one process
TEST_WORKERS ?= 3
# the datasets: $CAPSNET_DATA_DIR if set and not empty, else ../shared/datasets where it exists, else ./data
ifeq ($(strip $(CAPSNET_DATA_DIR)),)
CAPSNET_DATA_DIR := $(firstword $(wildcard $(abspath ../shared/datasets)) $(CURDIR)/data)
endif
export CAPSNET_DATA_DIR

.PHONY: run test check lint types bench screenshots clean

$(BIN)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --no-compile -e '.[dev]' -c constraints.txt
	@# byte-compiled on every core: pip compiles on one (the whole set-up takes 12-19 s longer on 2 cores). A file
	@# that does not compile is left as pip leaves it (torch ships a Python 3.12 test fixture), so compileall's exit
	@# status is not checked
	$(BIN)/python -m compileall -qq -j 0 $(VENV)/lib || true
	touch $@

run: $(BIN)/.installed  ## start the dashboard on the shipped model
	$(BIN)/streamlit run dashboard/app.py --server.port $(PORT)

test: $(BIN)/.installed  ## run the whole test suite (real data from $$CAPSNET_DATA_DIR, browser tests), a file per worker
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

check: $(BIN)/.installed  ## the fast tier (under 2 minutes): the whole suite less its browser and slow tests
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal -m "not browser and not slow"

lint: $(BIN)/.installed
	$(BIN)/ruff check capsnet dashboard tests benchmarks docs
	$(BIN)/ruff format --check capsnet dashboard tests benchmarks docs
	$(BIN)/python tests/function_length.py capsnet dashboard benchmarks docs

types: $(BIN)/.installed  ## type-check the package and the dashboard (mypy; its settings are in pyproject.toml)
	$(BIN)/mypy capsnet dashboard

screenshots: $(BIN)/.installed  ## retake the README's screenshots (docs/*.png) with the shipped model
	CAPSNET_SCREENSHOTS_DIR=docs CAPSNET_SCREENSHOTS_CHECKPOINT=checkpoints/mnist.safetensors $(BIN)/python -m pytest -m browser

bench: $(BIN)/.installed
	$(BIN)/python benchmarks/bench_model.py
	$(BIN)/python benchmarks/bench_dashboard.py

clean:
	rm -rf $(VENV) .pytest_cache
