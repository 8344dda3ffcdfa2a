"""The etcd-backed store: create/get/list/guaranteed update/delete/watch behind apiary.Storage.

etcd.py talks to etcd, keys.py and codec.py hold the key and value formats, etcd3.py is the store
on etcd (kube's storage/etcd3), cacher.py the watch cache (one etcd watch per resource, fanned out
to every client), watch.py the client watches it feeds, server.py the gRPC service that sends each
call to the cache or to etcd3.
"""
