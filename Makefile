# The two commands of the README: `make demo` and `make test`. Each does its own setup.
VENV := .venv
BIN := $(VENV)/bin
GPUS ?= 2

.PHONY: setup demo test lint unit integration sandbox-up sandbox-down proto clean

setup:
	@bash scripts/setup.sh

demo: setup
	$(BIN)/acbslurm sandbox up --gpus $(GPUS)
	$(BIN)/acbslurm demo

lint: setup
	$(BIN)/ruff check acbslurm tests bench
	$(BIN)/ruff format --check acbslurm tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: setup
	$(BIN)/pytest tests/unit -q

integration: setup
	$(BIN)/pytest tests/integration -q

test: lint
	$(BIN)/pytest tests -q

sandbox-up: setup
	$(BIN)/acbslurm sandbox up --gpus $(GPUS)

sandbox-down: setup
	$(BIN)/acbslurm sandbox down

clean:
	rm -rf $(VENV) build dist *.egg-info
