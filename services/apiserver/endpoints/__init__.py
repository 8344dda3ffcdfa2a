"""kube's endpoints/handlers: the request, its decoding and options, the verbs, list rendering."""
