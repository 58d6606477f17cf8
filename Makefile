# The two commands of the README: `make demo` and `make test`. Each does its own setup.
VENV := .venv
BIN := $(VENV)/bin
GPUS ?= 2

# Slurm release sources (release tarballs + SHA256SUMS) beside the checkout, if there.
SLURM_SOURCES_HERE := $(abspath ../shared/slurm-src)
ifneq ($(wildcard $(SLURM_SOURCES_HERE)/SHA256SUMS),)
export ACBSLURM_SLURM_SOURCES ?= $(SLURM_SOURCES_HERE)
endif
# `make test DOCKER=28.5`: the whole suite on that Docker (`sandbox up --docker`: 20.10,
# 26.1 or 28.5), on a sandbox of its own; with SLURM= too, one of both.
DOCKER ?=
ifneq ($(DOCKER),)
export ACBSLURM_SANDBOX_DOCKER := $(DOCKER)
ifneq ($(SLURM),)
export ACBSLURM_SANDBOX_DIR ?= /var/lib/acbslurm/sandbox-$(SLURM)-d$(DOCKER)
else
export ACBSLURM_SANDBOX_DIR ?= /var/lib/acbslurm/sandbox-docker-$(DOCKER)
endif
export ACBSLURM_SANDBOX_PORT_BASE ?= 16897
endif
# `make test SLURM=25.11.7`: the whole suite on that release, on a sandbox of its own
# (its directory and ports), so that it never meets the default 22.05 one.
SLURM ?=
ifneq ($(SLURM),)
export ACBSLURM_SANDBOX_SLURM := $(SLURM)
export ACBSLURM_SANDBOX_DIR ?= /var/lib/acbslurm/sandbox-slurm-$(SLURM)
export ACBSLURM_SANDBOX_PORT_BASE ?= 16857
endif

.PHONY: setup demo test sandbox-tests lint unit integration sandbox-up sandbox-down proto clean matrix guide deb deb-install

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
	$(BIN)/python scripts/check_commits.py

unit: setup
	$(BIN)/pytest tests/unit -q

integration: setup
	$(BIN)/pytest tests/integration -q

# Line coverage of acbslurm in the test process and in every process the tests start
# (the hooks slurmd runs, the commands the sandbox's users run, `acbslurm run` in a job,
# the broker, the pool's workers: tests/processcoverage.py), combined. The floor only
# rises (tests/unit/test_coverage_floor.py holds it to the highest it has been in this
# file's history): raise it when the figure is a point above. Measured on the default
# leg from a clean clone: 91.1% with 1798 processes (83.7-84.1% when only the test
# process counted).
COV_FLOOR ?= 90
test: lint
	$(BIN)/pytest tests -q --durations=25 --cov=acbslurm --cov-report=term:skip-covered --cov-fail-under=$(COV_FLOOR)

# CI's second leg (`make sandbox-tests SLURM=25.11.7 DOCKER=28.5`): what depends on the
# Slurm and Docker releases, the integration and fault tests on the sandbox. Not the lint
# or the unit tests (no Slurm or Docker of the sandbox's in them) nor the coverage floor,
# which the default leg checks; nor the vLLM pool jobs, whose Slurm side (a pool job's
# srun over two nodes) test_serve_nodes_sandbox.py checks on every release; nor the
# pool's fault tests that run no Slurm (builtin engine, limits on 127.0.0.1), nor the
# budget's requeue test (the pool's side; requeue itself is the preemption tests'): this
# keeps CI under its hour. --durations: the slowest tests in CI's log, to cut from.
sandbox-tests: setup
	$(BIN)/pytest tests/integration tests/faults -q --durations=25 \
		--deselect tests/integration/test_serve_vllm_sandbox.py \
		--deselect tests/faults/test_fault_serve_builtin.py \
		--deselect tests/faults/test_fault_serve_limits.py \
		--deselect tests/integration/test_serve_job_sandbox.py::test_a_budget_survives_a_requeue_and_shows_in_the_report

# The Debian package, dist/acbslurm_<version>_all.deb (docs/admin-guide.md, "Install";
# scripts/build_deb.py). deb-install installs it on this host (root, Debian 12), as CI's
# second leg does before it runs the sandbox's tests on it (ACBSLURM_INSTALLED=1).
deb: setup
	$(BIN)/python scripts/build_deb.py
deb-install: deb
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
		--allow-downgrades "$$(ls -t ./dist/acbslurm_*_all.deb | head -1)"

sandbox-up: setup
	$(BIN)/acbslurm sandbox up --gpus $(GPUS)

sandbox-down: setup
	$(BIN)/acbslurm sandbox down

# The integration suite on every supported release, and the 22.05 -> 23.11 -> 25.11
# upgrade path; writes docs/compatibility.md.
matrix: lint
	$(BIN)/python scripts/matrix.py

# docs/admin-guide.md "Install on a site, step by step", followed on a sandbox of its own
# (a wheel of this checkout into /opt/acbslurm-guide, hooks through chaining wrappers,
# doctor, test jobs as user1); leaves that sandbox down and the venv removed.
GUIDE_SANDBOX ?= /var/lib/acbslurm/sandbox-guide
GUIDE_PORT_BASE ?= 16937
guide: setup
	ACBSLURM_PYTHON=$(abspath $(BIN)/python) bash scripts/admin_guide_walkthrough.sh \
		$(GUIDE_SANDBOX) $(GUIDE_PORT_BASE)

clean:
	rm -rf $(VENV) build dist *.egg-info
