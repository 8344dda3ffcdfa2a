"""The etcd-backed store: create/get/list/guaranteed update/delete/watch behind apiary.Storage.

etcd.py talks to etcd, keys.py and codec.py hold the key and value formats, cacher.py is the
watch cache (one etcd watch per resource, fanned out to every client), server.py the servicer.
"""
