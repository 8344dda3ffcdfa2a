"""The registry service: apiary's API machinery (k8s.io/apiserver's registry and endpoints)."""
