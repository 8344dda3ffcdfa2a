"""What one object-count quota costs in memory: VmRSS of the admission service and the controller-manager
with --objects ConfigMaps of --kib each cluster-wide (in `default`), before and after a
`count/configmaps` ResourceQuota is created in another namespace, synced, and charged by one create. A
service that counts through informers of whole objects holds every ConfigMap of the cluster.

python -m tools.bench_quota [--objects 1000] [--kib 20] [--state DIR] [--port-offset N]"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import kubernetes

from tools.bench_fairness import rss
from services.cluster.stack import ROOT, Stack

SERVICES = ("admission", "controllermanager")


def _rss_mib(stack: Stack) -> dict[str, int]:
    return {name: rss(stack.pid(name) or 0) // 2**20 for name in SERVICES}


def _used(api: kubernetes.client.CoreV1Api) -> dict[str, str]:
    status = api.read_namespaced_resource_quota("q", "quota-bench").status
    return (status.used if status else None) or {}


def _run(stack: Stack, objects: int, kib: int, settle: float) -> dict[str, object]:
    api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(stack.kubeconfig)))
    api.create_namespace({"metadata": {"name": "quota-bench"}})
    blob = "x" * (kib * 1024)
    for i in range(objects):
        api.create_namespaced_config_map("default", {"metadata": {"name": f"quota-bench-{i}"}, "data": {"a": blob}})
    time.sleep(settle)
    before = _rss_mib(stack)
    api.create_namespaced_resource_quota("quota-bench", {"metadata": {"name": "q"},
                                                         "spec": {"hard": {"count/configmaps": "100"}}})
    while not _used(api):
        time.sleep(0.2)  # the controller's first sync
    api.create_namespaced_config_map("quota-bench", {"metadata": {"name": "charged"}})
    time.sleep(settle)
    return {"objects": objects, "kib": kib, "rss_mib_before_quota": before, "rss_mib_after_quota": _rss_mib(stack),
            "used": _used(api)}


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m tools.bench_quota", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--objects", type=int, default=1000)
    p.add_argument("--kib", type=int, default=20)
    p.add_argument("--settle", type=float, default=5.0, help="seconds before each RSS reading")
    p.add_argument("--state", default=str(ROOT / ".apiary" / "bench-quota"))
    p.add_argument("--port-offset", type=int, default=3500)
    args = p.parse_args()
    stack = Stack(Path(args.state).resolve(), args.port_offset)
    stack.start(fresh=True)
    try:
        print(json.dumps(_run(stack, args.objects, args.kib, args.settle)))
    finally:
        stack.stop(quiet=True)


if __name__ == "__main__":
    main()
