"""The local cluster launcher: etcd and every apiary service as processes on loopback, with the PKI and
kubeconfigs they need (what kube's hack/local-up-cluster.sh and envtest's Environment are).

It starts the services as processes (`python -m services.<name>`) and imports none of them: it sits
beside the services, on the library (services.common), and no service imports it.
"""
