"""The storage backend (kube's k8s.io/apiserver/pkg/storage): etcd, the watch cache, encryption at rest.

etcd.py talks to etcd, keys.py and codec.py hold the key and value formats, encryption.py the
value transformers (kube's storage/value/encryption), etcd3.py is the store on etcd (kube's
storage/etcd3) and compactor.py compacts etcd's history. The watch cache (kube's storage/cacher):
cacher.py feeds each resource's cache from one etcd watch and fans its events out, watch_cache.py
holds its state and event window, cache_watcher.py one client's watch, json_cache.py the objects'
rendered JSON within one budget; watch.py runs the client watches and wire.py splices their
answers from serialized objects. backend.py puts them together behind apiary.Storage's
operations (create, get, list, update, delete, watch), errors.py holds the storage errors.
"""
