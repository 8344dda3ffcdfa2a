"""Unary calls multiplexed on one long-lived bidirectional gRPC stream.

A unary gRPC call in Python costs close to a millisecond of CPU between client
and server; the same messages on one open stream cost about 1.75x less
(shared/REFERENCE.md), and a stream write costs about as much as the message it
carries, so each side sends every frame waiting at that moment in one Frames
message. MuxClient (client.py) sends each call as a Frame on one stream per peer and matches
answers by id; serve_mux (server.py) runs each incoming Frame through the servicer's own
unary method, so both paths share one implementation.

An answer may come in parts (a LIST of thousands of objects): the method returns `Streamed(parts)`
and each part goes as its own frame (`more` set on all but the last), at most about PART_BYTES per
stream message, so that the next process starts on the first part while the rest is still on its
way; `MuxClient.call_stream` reads them as they come.

Sharing the stream (flow.py): the server sends whole (unary) answers first, then the parts of answers in
parts round-robin between calls, at most about PART_BYTES per message, so a small call made during
a large LIST waits for one part, not for the LIST, and concurrent LISTs progress together. Flow
control per call: call_stream grants the server WINDOW parts (Frame.window), and grants them again
(one Frame.credit) once its consumer has taken them all, and a server takes the next part from the
method's iterator only when it may send it; so a slow consumer (an HTTP client reading slowly)
slows every hop behind it instead of each hop buffering the whole answer, and a caller that gives
up sends Frame.cancel, which cancels the method.

streams.py holds what this client shares with watchmux: reading a long-lived stream to its end, and
spreading streams over the replicas of a peer.
"""
from .client import MuxClient
from .flow import PART_BYTES, WINDOW, part_bytes
from .server import Streamed, add_servicer, serve_mux, unary_methods

__all__ = ["PART_BYTES", "WINDOW", "MuxClient", "Streamed", "add_servicer", "part_bytes", "serve_mux",
           "unary_methods"]
