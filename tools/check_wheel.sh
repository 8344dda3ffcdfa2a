#!/usr/bin/env bash
# The wheel is complete: installed with its dependencies into a fresh virtualenv outside the
# repository, its `apiary` command starts a cluster (ports chosen by the OS, traced to its own receiver) that kubectl reaches,
# and stops it with no process left; the example operator's tests pass with its pytest plugin.
# `make dist` first; CI runs it after `make test`.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
wheel=$(ls "$repo"/dist/apiary-*.whl)
work=$(mktemp -d /tmp/apiary-wheel.XXXXXX)
state=$work/state
apiary=$work/venv/bin/apiary

finish() {
  status=$?
  if [ $status -ne 0 ] && [ -d "$state/pids" ]; then
    tail -n 20 "$state"/logs/*.log >&2 || true
    "$apiary" down --state "$state" || true
  fi
  rm -rf "$work"
  exit $status
}
trap finish EXIT

cd "$work"  # nothing may come from the repository: not its tree, not its virtualenv
unset PYTHONPATH
"${PY:-python3}" -m venv venv
venv/bin/pip install -q "$wheel"
where=$(venv/bin/python -c 'import services.cluster; print(services.cluster.__file__)')
case "$where" in "$work"/venv/*) ;; *) echo "services.cluster came from $where" >&2; exit 1 ;; esac

"$apiary" up --port 0 --detach --tracing --state "$state"
kubectl --kubeconfig "$("$apiary" kubeconfig --state "$state")" get namespaces
# the trace receiver runs from the wheel too (services/cluster/otlpreceiver.py): a request's trace arrives
"$apiary" traces --state "$state" --wait 20
"$apiary" status --state "$state"
"$apiary" down --state "$state"
left=$(pgrep -f -- "$state" || true)
if [ -n "$left" ]; then echo "processes left after apiary down: $left" >&2; exit 1; fi
# The example operator's tests, run with the wheel's pytest plugin (the `apiary` pytest11 entry point
# loads it; its pytest.ini names the CRDs), from a copy outside the repository.
venv/bin/pip install -q pytest "kopf==1.45.2" kubernetes
cp -r "$repo/examples/kopf-operator" "$work/example"
(cd "$work/example" && "$work/venv/bin/python" -m pytest -q -p no:cacheprovider)
left=$(pgrep -f -- "$work" || true)
if [ -n "$left" ]; then echo "processes left after the example's tests: $left" >&2; exit 1; fi
echo "the wheel $(basename "$wheel") works from a fresh virtualenv, and the example operator's tests pass with it"
