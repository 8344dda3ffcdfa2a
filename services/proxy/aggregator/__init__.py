"""kube-aggregator's half of the proxy: APIService routing to aggregated API servers, their
availability and their discovery."""
