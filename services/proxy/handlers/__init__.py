"""Handlers that forward resource requests to the registry: one-shot requests and watches."""
