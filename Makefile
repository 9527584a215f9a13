# gpugate — every target a developer or CI needs. `make help` lists them.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
BIND   ?= 127.0.0.1:8443

.DEFAULT_GOAL := help
.PHONY: help demo venv dev-certs run tools fmt lint test test-fast check check-examples mutation faults image chart-sync native

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's|\$$(BIND)|$(BIND)|g' \
	    | awk -F':.*## ' '{printf "  %-15s %s\n", $$1, $$2}'

demo: venv ## the reference fleet (kwok nodes, real scheduler) with gpugate registered via its chart, until Ctrl-C
	$(BIN)/python -m tests.harness.demo $(DEMO_ARGS)

venv: $(VENV)/.installed ## create .venv and install gpugate with its dev extra

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

dev-certs: venv ## development CA + serving certificate for 127.0.0.1/localhost in certs/
	@test -f certs/tls.crt || $(BIN)/gpugate certs --service gpugate --namespace gpugate \
	    --host localhost --host 127.0.0.1 --out certs

run: venv dev-certs ## run gpugate on https://$(BIND) with the example policies and dev certificates
	@echo "gpugate on https://$(BIND); try it from another shell:"
	@echo "  curl -s --cacert certs/ca.crt -H 'Content-Type: application/json' \\"
	@echo "       --data @policies/examples/review-gpu-pod.json https://$(BIND)/mutate | python3 -m json.tool"
	@echo "  (review-fractional.json shows a denial; 'make check-examples' shows every example offline)"
	$(BIN)/gpugate serve --policies policies --cert certs/tls.crt --key certs/tls.key --bind $(BIND)

tools: venv ## test tools: promtool, and kube-apiserver/etcd/kubectl for the end-to-end suite
	./scripts/install-tools

PYTHON_SOURCES := webhook tests bench

fmt: venv ## ruff format and ruff check --fix over the Python sources
	$(BIN)/ruff format $(PYTHON_SOURCES)
	$(BIN)/ruff check --fix $(PYTHON_SOURCES)

lint: venv ## ruff (lint and format check), mypy and the import-layer contracts (import-linter)
	$(BIN)/ruff check $(PYTHON_SOURCES)
	$(BIN)/ruff format --check $(PYTHON_SOURCES)
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

test: venv tools ## the whole test suite, end-to-end included
	$(BIN)/pytest

# The inner loop: no control plane, chart or image; needs no `make tools` (tests whose tool is missing skip).
test-fast: venv ## everything but the e2e, chart and image suites (a few minutes)
	$(BIN)/pytest -m "not e2e and not image" --ignore=tests/chart -q

check: lint test ## what CI runs: lint and the whole test suite

check-examples: venv ## offline verdict for every shipped example manifest
	@for f in policies/examples/*.yaml; do [ "$$(basename $$f)" = expected.yaml ] && continue; \
	    echo "== $$f"; $(BIN)/gpugate check --policies policies -f $$f -o none; done; true

mutation: venv ## mutation testing of webhook/rules and webhook/admission (mutmut; slow, not part of check)
	$(BIN)/pip install --quiet 'mutmut>=3.8,<4'
	rm -rf mutants
	$(BIN)/mutmut run > mutants.log 2>&1 || (tail -c 2000 mutants.log; false)
	$(BIN)/mutmut results --all true | $(BIN)/python scripts/mutation-score

faults: venv tools ## fault-injection run through a real apiserver; prints decisions per fault (~2 min)
	$(BIN)/python -m tests.e2e.faults

image: ## build the image with buildah into dist/gpugate-<version>.oci.tar (docs/operations.md: push with skopeo)
	./scripts/build-image

native: venv ## compile deploy/base/policies into deploy/components/native-tier/native.yaml (the native tier)
	$(BIN)/gpugate policy compile deploy/base/policies > deploy/components/native-tier/native.yaml
	$(BIN)/gpugate policy compile --webhook-patch deploy/base/policies > deploy/components/native-tier/narrowing.yaml

chart-sync: native ## copy deploy/'s policies, webhooks, backstop, recording rules, dashboard and auditor RBAC into charts/gpugate/files
	rm -f charts/gpugate/files/policies/*
	mkdir -p charts/gpugate/files/policies charts/gpugate/files/base
	cp deploy/base/policies/* charts/gpugate/files/policies/
	cp deploy/base/webhooks.yaml deploy/base/admission-policy.yaml charts/gpugate/files/base/
	cp deploy/monitoring/gpugate-attribution.rules.yaml deploy/monitoring/gpugate-report-dashboard.json charts/gpugate/files/
	mkdir -p charts/gpugate/files/audit
	cp deploy/audit/rbac.yaml charts/gpugate/files/audit/
	mkdir -p charts/gpugate/files/native
	cp deploy/components/native-tier/native.yaml charts/gpugate/files/native/
