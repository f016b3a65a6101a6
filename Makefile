# ttj — run `make help` for the targets. Every target that needs Python builds .venv/ first.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
IMAGE_REPO ?= ghcr.io/transient-training
VERSION ?= 0.1.0
# The image scripts under images/ read both from the environment.
export IMAGE_REPO VERSION
CRD_FILE := crds/transient.training_transienttrainingjobs.yaml
PY_SOURCES := operator contract trainer-image localcluster tests bench images
PYTEST_ARGS ?=
# Test processes beside each other (pytest-xdist), a test file per process at a time, in the order of
# tests/conftest.py (the longest first): much of the suite waits on clusters and trainers rather than computing
# (docs/benchmarks.md, the suite's time). TEST_JOBS=0: one process.
TEST_JOBS ?= 3
PARALLEL := $(if $(filter 0,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder)
# The scripts under images/ need only PyYAML: the virtualenv's Python when there is one, else the host's.
IMAGE_TOOLS_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))

.PHONY: help setup test test-all lint fmt crds verify demo e2e image image-bases image-test image-push install-yaml bench clean

help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# pip speaks only on errors (-qq); `make setup PIP_VERBOSITY=` shows everything it says.
PIP_VERBOSITY ?= -qq
PIP := $(BIN)/pip install $(PIP_VERBOSITY) --disable-pip-version-check

$(STAMP): contract/pyproject.toml operator/pyproject.toml trainer-image/pyproject.toml localcluster/pyproject.toml requirements-dev.txt
	@echo "setup [1/3] virtualenv $(VENV) (Python: $$($(PYTHON) --version 2>&1))"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "setup [2/3] pip"
	@$(PIP) --upgrade pip
	@echo "setup [3/3] ttj's four distributions (editable) and the dev tools; TensorFlow is large, allow a few minutes"
	@$(PIP) -e contract -e 'operator[viz]' -e 'trainer-image[cpu]' -e 'localcluster[demo]' -r requirements-dev.txt \
	  || { echo "setup failed: run 'make setup PIP_VERBOSITY=' to see all that pip says" >&2; exit 1; }
	@touch $@

setup: $(STAMP) ## Create the development virtualenv (.venv) with the operator, trainer and local cluster
	@echo "virtualenv ready: $(VENV)"

test: $(STAMP) ## Run the test suite (all but the slow tests), with lint and CRD drift checks
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory verify
	$(BIN)/pytest -m "not slow" $(PARALLEL) $(PYTEST_ARGS)

test-all: $(STAMP) ## Run every test, the slow ones included
	$(BIN)/pytest $(PARALLEL) $(PYTEST_ARGS)

lint: $(STAMP) ## ruff, mypy --strict on the operator and the local cluster, import layering and cycles (lint-imports)
	$(BIN)/ruff check $(PY_SOURCES)
	$(BIN)/ruff format --check $(PY_SOURCES)
	$(BIN)/mypy
	$(BIN)/lint-imports

fmt: $(STAMP) ## Format and fix what ruff can
	$(BIN)/ruff format $(PY_SOURCES)
	$(BIN)/ruff check --fix $(PY_SOURCES)

crds: $(STAMP) ## Regenerate crds/ from the pydantic models
	$(BIN)/ttj crd -o $(CRD_FILE)

verify: $(STAMP) ## Fail when crds/ differs from what the models generate, or its CEL rules near kube's cost budget
	@$(BIN)/ttj crd | diff -u $(CRD_FILE) - \
	  || { echo "crds/ is out of date: run 'make crds' and commit the result" >&2; exit 1; }
	@$(BIN)/python -m ttj_localcluster.crd_cost $(CRD_FILE) \
	  || { echo "CEL rules within 2x of kube-apiserver's cost budget: add maxItems/maxProperties/maxLength or simplify the rule (docs/contract.md)" >&2; exit 1; }

demo: $(STAMP) ## Train on the embedded local cluster through injected preemptions
	$(BIN)/python -m ttj_demo $(DEMO_ARGS)

e2e: $(STAMP) ## End-to-end suite against the cluster in KUBECONFIG (skipped when none is set)
	@if [ -z "$$KUBECONFIG" ]; then echo "KUBECONFIG is not set: skipping the end-to-end suite (make test runs it on the local cluster)"; exit 0; fi; \
	$(BIN)/pytest -m e2e $(PYTEST_ARGS)

image: ## Build the operator and trainer images (Docker when its daemon answers, else podman)
	images/build.sh

# What images/bases.sh, images/build.sh and images/check.py run; images/host_tools.sh installs what is
# missing as root on Debian/Ubuntu, and elsewhere says in one line what to install.
IMAGE_BASES_TOOLS := podman debootstrap tar
IMAGE_TEST_TOOLS := $(IMAGE_BASES_TOOLS) buildah unshare mount chroot pyyaml

image-bases: ## Make local stand-ins for the base images (debootstrap, CPU TensorFlow; root; kept)
	IMAGE_TOOLS_PYTHON=$(IMAGE_TOOLS_PYTHON) images/host_tools.sh $(IMAGE_BASES_TOOLS)
	images/bases.sh

image-test: ## Build both images on the local bases and check them in chroot (root; apt-installs podman & co)
	IMAGE_TOOLS_PYTHON=$(IMAGE_TOOLS_PYTHON) images/host_tools.sh $(IMAGE_TEST_TOOLS)
	$(MAKE) --no-print-directory image-bases
	IMAGE_BASES=local images/build.sh
	$(IMAGE_TOOLS_PYTHON) images/check.py --operator $(IMAGE_REPO)/ttj-operator:$(VERSION) --trainer $(IMAGE_REPO)/ttj-trainer:$(VERSION)

image-push: ## Push both images built by `make image` (log in to the registry first)
	images/push.sh

install-yaml: ## Render manifests/base into dist/install.yaml with IMAGE_REPO/ttj-{operator,trainer}:VERSION
	$(IMAGE_TOOLS_PYTHON) images/render_install.py --image-repo $(IMAGE_REPO) --version $(VERSION) -o dist/install.yaml

bench: $(STAMP) ## Run the benchmarks under bench/ (not tests; results go to docs/benchmarks.md)
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean: ## Remove the virtualenv and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
