"""kube-aggregator's half of the proxy: APIService routing to aggregated API servers (proxy.py,
resolver.py, transport.py), their availability (availability.py), their discovery (discovery.py), the
cluster's authentication trust (authentication_trust.py), put together by apiserver.py's Aggregator."""
