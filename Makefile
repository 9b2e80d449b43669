# pasture: the two commands a newcomer needs are `make demo` and `make test`.
# Everything they need is installed by the targets themselves (apt packages, the venv,
# the podman base image), so they work on a fresh machine.
# The venv's packages are compiled to bytecode when installed (uv sync --compile-bytecode),
# and our own package (editable, which uv never compiles) whenever one of its sources
# changed since (`make venv` and every target that needs the venv): so `pasture` and the
# tests do not recompile on every start, even where PYTHONDONTWRITEBYTECODE is set
# (nothing here sets it; `python -m scheduler.bench cli` reports the compiled share).

SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: help deps venv collections base-image lint test test-python test-ansible test-e2e demo demo-down bench clean

help:
	@echo "make demo       local cluster (podman) provisioned by site.yml, runs a distributed training job"
	@echo "make demo-down  remove the local cluster"
	@echo "make test       everything: lint, unit, property, stacks, service, molecule, end-to-end"

deps: .state/system-deps.stamp
.state/system-deps.stamp: scripts/install-system-deps.sh scripts/containers.conf
	@mkdir -p .state
	bash scripts/install-system-deps.sh
	@touch $@

venv: $(VENV)/.synced $(VENV)/.compiled
$(VENV)/.synced: pyproject.toml
	@command -v uv >/dev/null || { echo "==> pip install uv"; python3 -m pip install -q uv; }
	@echo "==> python venv in $(VENV) (uv sync, all dependency groups, bytecode compiled)"
	@[ -x $(PY) ] || uv venv -q $(VENV) --python "$$(command -v python3)"
	UV_LINK_MODE=copy uv sync -q --all-groups --extra sim --compile-bytecode
	@touch $@

# the project's own package too: uv compiles site-packages, never the editable install;
# compileall rewrites only the bytecode older than its source (~1 s when little changed)
$(VENV)/.compiled: $(VENV)/.synced $(shell find scheduler -name '*.py' 2>/dev/null)
	$(PY) -m compileall -q -j 0 scheduler
	@touch $@

# The Ansible collections the roles use, pinned in collections/requirements.yml (a no-op
# when the venv's ansible package already ships those versions).
collections: venv
	$(VENV)/bin/ansible-galaxy collection install -r collections/requirements.yml

# The hosts' base image (debootstrap, ~1-2 min once): the container executor's tests run
# tasks in it, so test-python needs it too (without it they would be skipped).
base-image: deps
	bash scripts/build-base-image.sh

# lint: ruff (check and format), mypy --strict over scheduler/ and scripts/ (its settings:
# [tool.mypy] in pyproject.toml), so a changed return type fails here in every caller, and
# the import contracts of scheduler/'s layers ([tool.importlinter] in pyproject.toml).
lint: venv
	$(VENV)/bin/ruff check scheduler stacks tests
	$(VENV)/bin/ruff format --check scheduler stacks tests
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# test-e2e: a fresh podman cluster converged twice by site.yml (second run changed=0), the
# demo's own job half (scripts/demo-job.sh with its report: red whenever `make demo` would
# be) across two nodes, and a node stopped mid-job (about 10 minutes).
# test: every stage below through scripts/test-stages.sh, which runs e2e and the molecule
# scenarios side by side (different podman networks) and prints each stage's wall time at
# the end, also when a stage fails (issue 33).
test:
	bash scripts/test-stages.sh

# test-python: pytest-xdist with PYTEST_WORKERS workers (tests that share a module-scoped
# fixture or the real podman stay on one worker: tests/conftest.py), then the `serial`
# tests (chaos and fault rounds with leases of seconds; schemathesis' per-operation items,
# which xdist cannot tell apart) alone. Both parts always run.
PYTEST_WORKERS ?= 3
test-python: deps venv base-image
	@rc=0; \
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup -m "not serial" tests --ignore=tests/e2e || rc=1; \
	$(PY) -m pytest -q -m serial tests --ignore=tests/e2e || rc=1; \
	exit $$rc

test-ansible: deps venv
	@if [ -x scripts/test-ansible.sh ]; then bash scripts/test-ansible.sh; else echo "no ansible tests yet"; fi

test-e2e: deps venv
	@if [ -d tests/e2e ]; then $(PY) -m pytest -q tests/e2e; else echo "no e2e tests yet"; fi

demo: deps venv collections
	bash scripts/demo.sh

demo-down: venv
	$(VENV)/bin/ansible-playbook playbooks/local-cluster.yml -e state=absent

clean:
	rm -rf .state $(VENV)
