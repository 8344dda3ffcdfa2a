"""The storage backend (kube's k8s.io/apiserver/pkg/storage): etcd, the watch cache, encryption at rest.

etcd.py talks to etcd, keys.py and codec.py hold the key and value formats, encryption.py the
value transformers (kube's storage/value/encryption), etcd3.py is the store on etcd (kube's
storage/etcd3), compactor.py compacts etcd's history, cacher.py the watch cache (one etcd watch per
resource, fanned out to every client), watch.py the client watches it feeds and wire.py the
protobuf splicing their answers are made of.
"""
