"""k8s.io/apiserver's registry: the rules every kind's storage follows (rest.py: the Strategy)."""
