"""A local KMS v2 plugin (kube's v2.KeyManagementService over a unix socket), for tests and demos.

    python -m tools.kms_plugin --socket /tmp/kms.sock [--key-file key.bin] [--key-id k1]

It wraps DEKs with one local AES-256-GCM key: ciphertext = nonce(12) + GCM(plaintext). The key
comes from --key-file (32 raw bytes, created when missing) so that restarts keep decrypting.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import signal
from pathlib import Path

import grpc
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from apiary_pb import kms_v2_pb2 as kpb
from apiary_pb import kms_v2_pb2_grpc as kgrpc


class Plugin(kgrpc.KeyManagementServiceServicer):
    def __init__(self, key: bytes, key_id: str) -> None:
        self.aead = AESGCM(key)
        self.key_id = key_id
        self.calls = {"Encrypt": 0, "Decrypt": 0, "Status": 0}

    async def Status(self, request, context):
        self.calls["Status"] += 1
        return kpb.StatusResponse(version="v2", healthz="ok", key_id=self.key_id)

    async def Encrypt(self, request, context):
        self.calls["Encrypt"] += 1
        nonce = os.urandom(12)
        return kpb.EncryptResponse(ciphertext=nonce + self.aead.encrypt(nonce, request.plaintext, None),
                                   key_id=self.key_id)

    async def Decrypt(self, request, context):
        self.calls["Decrypt"] += 1
        if request.key_id != self.key_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown key id {request.key_id!r}")
        c = request.ciphertext
        try:
            return kpb.DecryptResponse(plaintext=self.aead.decrypt(c[:12], c[12:], None))
        except (InvalidTag, ValueError):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "cannot decrypt the ciphertext")


def load_key(path: Path | None) -> bytes:
    if path is None:
        return AESGCM.generate_key(256)
    if not path.exists():
        path.write_bytes(AESGCM.generate_key(256))
        path.chmod(0o600)
    return path.read_bytes()


async def serve(socket_path: str, key: bytes, key_id: str, stop: asyncio.Event | None = None) -> None:
    Path(socket_path).unlink(missing_ok=True)
    server = grpc.aio.server()
    kgrpc.add_KeyManagementServiceServicer_to_server(Plugin(key, key_id), server)
    server.add_insecure_port(f"unix://{socket_path}")
    await server.start()
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(1)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tools.kms_plugin", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--socket", required=True, help="unix socket path to listen on")
    p.add_argument("--key-file", type=Path, help="32-byte AES key (created when missing); default: a random key")
    p.add_argument("--key-id", default="apiary-kms-key-1", help="the key id reported by Status and Encrypt")
    args = p.parse_args(argv)
    asyncio.run(serve(args.socket, load_key(args.key_file), args.key_id))


if __name__ == "__main__":
    main()
