# apiary: `make run` starts the local stack, `make test` runs every test.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PYTHON := $(BIN)/python
DEPS := $(VENV)/.deps-stamp
GEN := apiary_pb/.gen-stamp
PROTOS := $(wildcard proto/apiary_pb/*.proto)
# A subset of upstream Kubernetes messages, to decode application/vnd.kubernetes.protobuf request bodies.
# Rooted at proto/k8s so that they generate the package ./k8s_pb (./k8s holds manifests).
K8S_GEN := k8s_pb/.gen-stamp
K8S_PROTOS := $(wildcard proto/k8s/k8s_pb/*.proto)
# A subset of gnostic's OpenAPI v2 messages, to serve /openapi/v2 as protobuf (kubectl's validation reads it).
GNOSTIC_GEN := gnostic_pb/.gen-stamp
GNOSTIC_PROTOS := $(wildcard proto/gnostic/gnostic_pb/*.proto)
# Kubernetes 1.33's OpenAPI definitions (from the kubernetes-validate package), as the registry publishes them.
SCHEMAS := services/apis/schemas.json

.PHONY: all setup run observe dashboards images stop status test unit integration e2e bench dist check-wheel lint clean

all: setup

setup: $(DEPS) $(GEN) $(K8S_GEN) $(GNOSTIC_GEN) $(SCHEMAS)

$(PYTHON):
	$(PY) -m venv $(VENV)

$(DEPS): requirements.txt requirements-runtime.txt requirements-cluster.txt | $(PYTHON)
	$(PYTHON) -m pip install -q --upgrade pip
	$(PYTHON) -m pip install -q -r requirements.txt
	touch $@

$(GEN): $(PROTOS) $(DEPS)
	mkdir -p apiary_pb
	$(PYTHON) -m grpc_tools.protoc -Iproto --python_out=. --pyi_out=. --grpc_python_out=. $(PROTOS)
	touch $@

$(K8S_GEN): $(K8S_PROTOS) $(DEPS)
	mkdir -p k8s_pb
	$(PYTHON) -m grpc_tools.protoc -Iproto/k8s --python_out=. --pyi_out=. $(K8S_PROTOS)
	touch $@

$(GNOSTIC_GEN): $(GNOSTIC_PROTOS) $(DEPS)
	mkdir -p gnostic_pb
	$(PYTHON) -m grpc_tools.protoc -Iproto/gnostic --python_out=. --pyi_out=. $(GNOSTIC_PROTOS)
	touch $@

$(SCHEMAS): tools/kube_definitions.py $(DEPS)
	$(PYTHON) -m tools.kube_definitions

run: setup
	$(PYTHON) -m services.cluster up --detach --aggregated pizza-apiserver $(if $(REPLICAS),--replicas $(REPLICAS)) $(if $(ETCD_MEMBERS),--etcd-members $(ETCD_MEMBERS)) $(if $(PROXY_WORKERS),--proxy-workers $(PROXY_WORKERS)) $(if $(V),--v $(V)) $(if $(filter 1 yes true,$(TRACING)),--tracing,$(if $(TRACING),--no-tracing)) $(if $(TRACING_RATE),--tracing-rate $(TRACING_RATE))

# Prometheus scraping the local stack (Debian's prometheus package), and the Grafana dashboards as JSON.
observe: setup
	$(PYTHON) -m tools.observe start

dashboards: setup
	$(PYTHON) -m tools.observe dashboards --out k8s/overlays/dashboards/dashboards

# The container images (apiary:dev, apiary-etcd:dev, apiary-prometheus:dev) for compose and k8s/,
# built offline: a debootstrapped Debian base and a wheelhouse made here.
images: setup
	$(PYTHON) -m tools.images build

stop:
	@if [ -x $(PYTHON) ]; then $(PYTHON) -m tools.observe stop; $(PYTHON) -m services.cluster down; fi

status: setup
	$(PYTHON) -m services.cluster status

test: setup
	$(PYTHON) -m pytest -q -p no:cacheprovider

unit: setup
	$(PYTHON) -m pytest -q tests/unit

integration: setup
	$(PYTHON) -m pytest -q tests/integration

e2e: setup
	$(PYTHON) -m pytest -q tests/e2e

bench: setup
	$(PYTHON) -m tools.bench $(if $(QUICK),--quick)

# The apiary package: sdist, and the wheel built from it (with the generated code), in dist/.
dist: setup
	rm -rf dist build
	$(PYTHON) -m build --no-isolation --outdir dist .

# The wheel installed into a fresh virtualenv outside the repository runs `apiary up` (CI runs it).
check-wheel: dist
	PY=$(PY) tools/check_wheel.sh

clean: stop
	rm -rf $(VENV) apiary_pb k8s_pb gnostic_pb $(SCHEMAS) .apiary dist build apiary.egg-info
