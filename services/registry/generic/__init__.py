"""kube's registry/generic: the Store every kind is served by."""
