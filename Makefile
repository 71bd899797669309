# `make demo` and `make test` set everything up on a machine with only Python 3.10+.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test fuzz bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/npusim run examples/mlp.yaml --chip bm1684 --trace out/run.json --plots out
	@echo
	@echo "npusim is installed in $(VENV). To run it yourself:"
	@echo "  source $(VENV)/bin/activate     # then: npusim --help, npusim chips, npusim run GRAPH --chip NAME"
	@echo "  $(VENV)/bin/npusim --help       # or call it by its path, without activating"

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(PY) -m pytest -n auto

# The fuzz tests with many more inputs of each kind than `make test` tries (tests/test_fuzz.py).
FUZZ_EXAMPLES ?= 2000
fuzz: $(STAMP)
	NPUSIM_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest tests/test_fuzz.py --hypothesis-show-statistics

bench: $(STAMP)
	$(PY) bench/sim_speed.py

clean:
	rm -rf $(VENV) out build *.egg-info .pytest_cache .hypothesis
