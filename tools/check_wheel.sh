#!/usr/bin/env bash
# The wheel is complete: installed with its dependencies into a fresh virtualenv outside the
# repository, its `apiary` command starts a cluster (ports chosen by the OS) that kubectl reaches,
# and stops it with no process left. `make dist` first; CI runs it after `make test`.
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

"$apiary" up --port 0 --detach --state "$state"
kubectl --kubeconfig "$("$apiary" kubeconfig --state "$state")" get namespaces
"$apiary" status --state "$state"
"$apiary" down --state "$state"
left=$(pgrep -f -- "$state" || true)
if [ -n "$left" ]; then echo "processes left after apiary down: $left" >&2; exit 1; fi
echo "the wheel $(basename "$wheel") works from a fresh virtualenv"
