"""Encryption at rest, object size limit, compaction and consistent reads against real processes."""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import aetcd
import grpc
import pytest

from apiary_pb import envelope_pb2 as pb
from apiary_pb import kms_v2_pb2 as kpb
from apiary_pb import storage_pb2 as spb
from apiary_pb import storage_pb2_grpc as sgrpc
from services.apiserver.storage.codec import STALE_FIELD
from services.common import grpcutil
from services.common.errors import APIError, Gone, Invalid

ROOT = Path(__file__).resolve().parents[3]


def write_config(path: Path, *providers: str) -> Path:
    path.write_text(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n"
        "- resources: [secrets]\n  providers:\n" + "".join(providers)
    )
    return path


def aescbc(*keys: tuple[str, bytes]) -> str:
    lines = "".join(f"      - name: {n}\n        secret: {base64.b64encode(k).decode()}\n" for n, k in keys)
    return "  - aescbc:\n      keys:\n" + lines


IDENTITY = "  - identity: {}\n"


def secret(name: str, body: bytes = b'{"data":{"k":"dg=="}}') -> pb.Object:
    o = pb.Object(api_version="v1", kind="Secret", body=body)
    o.metadata.name, o.metadata.namespace, o.metadata.uid = name, "default", f"uid-{name}"
    return o


async def raw(url: str, key: str) -> bytes | None:
    u = urlsplit(url)
    async with aetcd.Client(host=u.hostname, port=u.port) as c:
        got = await c.get(key.encode())
        return got.value if got else None


async def put_raw(url: str, key: str, value: bytes) -> None:
    u = urlsplit(url)
    async with aetcd.Client(host=u.hostname, port=u.port) as c:
        await c.put(key.encode(), value)


async def call(coro):
    return await grpcutil.call(coro, "storage")


def stub_for(address: str):
    return grpc.aio.insecure_channel(address)


async def test_aescbc_rotation_and_corrupt_values(etcd, spawn_storage, tmp_path):
    k1, k2 = os.urandom(32), os.urandom(32)
    conf = write_config(tmp_path / "enc.yaml", aescbc(("key1", k1)), IDENTITY)
    ns = uuid.uuid4().hex[:8]
    key = f"/registry/secrets/{ns}/s1"
    with spawn_storage(etcd, tmp_path, "--encryption-provider-config", str(conf)) as s:
        async with stub_for(s.address) as ch:
            stub = sgrpc.StorageStub(ch)
            created = await call(stub.Create(spb.CreateRequest(key=key, object=secret("s1"))))
            assert (await raw(etcd, key)).startswith(b"k8s:enc:aescbc:v1:key1:")
            got = await call(stub.Get(spb.GetRequest(key=key)))
            assert got.body == created.body and STALE_FIELD not in got.fields
            # A plain (identity) value written before encryption was on still reads, marked stale.
            await put_raw(etcd, f"/registry/secrets/{ns}/plain", b"k8s\x00apiary\x00" + secret("plain").SerializeToString())
            old = await call(stub.Get(spb.GetRequest(key=f"/registry/secrets/{ns}/plain")))
            assert old.metadata.name == "plain" and old.fields[STALE_FIELD] == "true"
            # Corrupt: a 500 naming the key, and the service keeps serving.
            await put_raw(etcd, f"/registry/secrets/{ns}/bad", b"k8s:enc:aescbc:v1:key1:" + os.urandom(40))
            with pytest.raises(APIError) as e:
                await call(stub.Get(spb.GetRequest(key=f"/registry/secrets/{ns}/bad")))
            assert e.value.code == 500 and f"/registry/secrets/{ns}/bad" in e.value.message
            for req in (spb.ListRequest(prefix=f"/registry/secrets/{ns}/", limit=10),
                        spb.ListRequest(prefix=f"/registry/secrets/{ns}/", resource_version="0")):
                with pytest.raises(APIError) as e:
                    await call(stub.List(req))
                assert e.value.code == 500
            with pytest.raises(APIError) as e:  # as kube without ignoreStoreReadErrorWithClusterBreakingPotential
                await call(stub.Delete(spb.DeleteRequest(key=f"/registry/secrets/{ns}/bad")))
            assert e.value.code == 500
            await put_raw(etcd, f"/registry/secrets/{ns}/bad", b"k8s\x00apiary\x00" + secret("bad").SerializeToString())
            # a list at "" is a consistent read: the cache has caught up with that put before it answers
            assert len((await call(stub.List(spb.ListRequest(prefix=f"/registry/secrets/{ns}/")))).items) == 3
    # Rotate: key2 first, key1 still readable.
    conf = write_config(tmp_path / "enc.yaml", aescbc(("key2", k2), ("key1", k1)), IDENTITY)
    with spawn_storage(etcd, tmp_path, "--encryption-provider-config", str(conf)) as s:
        async with stub_for(s.address) as ch:
            stub = sgrpc.StorageStub(ch)
            cur = await call(stub.Get(spb.GetRequest(key=key)))
            assert cur.fields[STALE_FIELD] == "true"
            # An update with unchanged content rewrites the value with the first key.
            upd = await call(stub.Update(spb.UpdateRequest(key=key, object=cur,
                                                           expected_resource_version=cur.metadata.resource_version)))
            assert int(upd.metadata.resource_version) > int(cur.metadata.resource_version)
            assert STALE_FIELD not in upd.fields
            assert (await raw(etcd, key)).startswith(b"k8s:enc:aescbc:v1:key2:")
            # Now current: the same update is a no-op that keeps the resourceVersion.
            again = await call(stub.Update(spb.UpdateRequest(key=key, object=upd,
                                                             expected_resource_version=upd.metadata.resource_version)))
            assert again.metadata.resource_version == upd.metadata.resource_version
            fresh = await call(stub.Get(spb.GetRequest(key=key)))
            assert STALE_FIELD not in fresh.fields


async def test_kms_v2_envelope(etcd, spawn_storage, tmp_path):
    sock = tmp_path / "kms.sock"
    plugin = subprocess.Popen([sys.executable, "-m", "tools.kms_plugin", "--socket", str(sock),
                               "--key-file", str(tmp_path / "kms.key")], cwd=ROOT)
    try:
        deadline = time.monotonic() + 10
        while not sock.exists():
            assert time.monotonic() < deadline, "the KMS plugin did not start"
            time.sleep(0.05)
        conf = write_config(tmp_path / "kms.yaml",
                            f"  - kms:\n      apiVersion: v2\n      name: local\n      endpoint: unix://{sock}\n",
                            IDENTITY)
        key = f"/registry/secrets/{uuid.uuid4().hex[:8]}/k"
        for _ in range(2):  # the second process has to ask the plugin to decrypt the DEK
            with spawn_storage(etcd, tmp_path, "--encryption-provider-config", str(conf)) as s:
                async with stub_for(s.address) as ch:
                    stub = sgrpc.StorageStub(ch)
                    try:
                        await call(stub.Create(spb.CreateRequest(key=key, object=secret("k"))))
                    except APIError as e:
                        assert e.code == 409
                    got = await call(stub.Get(spb.GetRequest(key=key)))
                    assert got.metadata.name == "k" and got.body == secret("k").body
        value = await raw(etcd, key)
        prefix = b"k8s:enc:kms:v2:local:"
        assert value.startswith(prefix)
        obj = kpb.EncryptedObject.FromString(value[len(prefix):])
        assert obj.keyID == "apiary-kms-key-1" and obj.encryptedDEKSource and len(obj.encryptedData) > 28
        assert b"dg==" not in value
    finally:
        plugin.terminate()
        plugin.wait(5)


async def test_objects_over_1_5_mib_are_413_and_not_written(stub):
    key = f"/registry/configmaps/{uuid.uuid4().hex[:8]}/big"
    big = pb.Object(api_version="v1", kind="ConfigMap", body=b'{"data":{"a":"' + b"x" * (1600 * 1024) + b'"}}')
    big.metadata.name, big.metadata.namespace = "big", "default"
    with pytest.raises(APIError) as e:
        await call(stub.Create(spb.CreateRequest(key=key, object=big)))
    assert e.value.code == 413 and "request is too large" in e.value.message
    small = pb.Object(api_version="v1", kind="ConfigMap", body=b"{}")
    small.metadata.name, small.metadata.namespace = "big", "default"
    created = await call(stub.Create(spb.CreateRequest(key=key, object=small)))
    with pytest.raises(APIError) as e:
        await call(stub.Update(spb.UpdateRequest(key=key, object=big)))
    assert e.value.code == 413
    got = await call(stub.Get(spb.GetRequest(key=key)))
    assert got.metadata.resource_version == created.metadata.resource_version


async def test_consistent_reads_come_from_the_cache_and_list_options(stub):
    r = f"t{uuid.uuid4().hex[:10]}"
    prefix = f"/registry/{r}/"
    o = pb.Object(api_version="v1", kind="ConfigMap", body=b"{}")
    o.metadata.name, o.metadata.namespace = "a", "default"
    a = await call(stub.Create(spb.CreateRequest(key=f"{prefix}default/a", object=o)))
    # Writes elsewhere move etcd's revision; the cache catches up through a progress request.
    other = pb.Object(api_version="v1", kind="ConfigMap", body=b"{}")
    other.metadata.name, other.metadata.namespace = "x", "default"
    x = await call(stub.Create(spb.CreateRequest(key=f"/registry/o{r}/default/x", object=other)))
    t0 = time.monotonic()
    listed = await call(stub.List(spb.ListRequest(prefix=prefix)))
    assert time.monotonic() - t0 < 2.5
    assert [i.metadata.name for i in listed.items] == ["a"]
    assert int(listed.resource_version) >= int(x.metadata.resource_version)
    got = await call(stub.Get(spb.GetRequest(key=f"{prefix}default/a")))
    assert got == a
    exact = await call(stub.List(spb.ListRequest(prefix=prefix, resource_version=a.metadata.resource_version,
                                                 resource_version_match="Exact")))
    assert exact.resource_version == a.metadata.resource_version
    for rv, match in (("", "NotOlderThan"), ("0", "Exact"), ("1", "Sometimes")):
        with pytest.raises(Invalid) as e:
            await call(stub.List(spb.ListRequest(prefix=prefix, resource_version=rv, resource_version_match=match)))
        assert e.value.code == 422 and "resourceVersionMatch" in e.value.message


async def test_periodic_compaction_then_410(make_etcd, spawn_storage, tmp_path):
    server = make_etcd()
    with spawn_storage(server.url, tmp_path, "--etcd-compaction-interval", "1s") as s:
        async with stub_for(s.address) as ch:
            stub = sgrpc.StorageStub(ch)
            prefix = "/registry/configmaps/default/"
            o = pb.Object(api_version="v1", kind="ConfigMap", body=b"{}")
            o.metadata.name, o.metadata.namespace = "c0", "default"
            first = await call(stub.Create(spb.CreateRequest(key=prefix + "c0", object=o)))
            for i in range(1, 4):
                o.metadata.name = f"c{i}"
                await call(stub.Create(spb.CreateRequest(key=prefix + f"c{i}", object=o)))
            page = await call(stub.List(spb.ListRequest(prefix=prefix, limit=1)))
            # After at least two intervals etcd has been compacted past the first revisions.
            deadline = time.monotonic() + 10
            while True:
                try:
                    await call(stub.List(spb.ListRequest(prefix=prefix, resource_version=first.metadata.resource_version,
                                                         resource_version_match="Exact")))
                except Gone:
                    break
                assert time.monotonic() < deadline, "etcd was not compacted"
                await asyncio.sleep(0.3)
            with pytest.raises(Gone) as e:
                await call(stub.List(spb.ListRequest(prefix=prefix, limit=1, **{"continue": getattr(page, "continue")})))
            assert e.value.reason == "Expired"
