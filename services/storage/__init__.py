"""The storage service: apiary.Storage over gRPC, standing on the storage backend of the library
(services/apiserver/storage): server.py is the gRPC face, __main__.py assembles the process.
"""
