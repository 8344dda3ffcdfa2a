"""The apiary.Admission servicer.

Admit runs the mutating phase and answers with the plugins' changes as a JSON
Patch (none when nothing changed), never the object again: the registry holds it
and does not decode it a second time. Validate runs the validating phase and
answers warnings only. A denial is the plugin's APIError, carried as a Status in
the gRPC status details.
"""
from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from apiary_pb import admission_pb2 as adpb
from apiary_pb import admission_pb2_grpc as adgrpc
from apiary_pb import envelope_pb2 as pb
from services.common import grpcutil, mux

from .attributes import Attributes
from .chain import Chain


class AdmissionServicer(adgrpc.AdmissionServicer):
    def __init__(self, chain: Chain) -> None:
        self.chain = chain
        self._mux_methods = mux.unary_methods(
            self, {"Admit": adpb.AdmissionRequest, "Validate": adpb.AdmissionRequest})

    async def Calls(self, request_iterator: AsyncIterator[pb.Frames],
                    context: grpc.aio.ServicerContext) -> AsyncIterator[pb.Frames]:
        """Admit and Validate on the registry's long-lived stream."""
        async for frame in mux.serve_mux(request_iterator, context, self._mux_methods):
            yield frame

    @grpcutil.api_method
    async def Admit(self, request: adpb.AdmissionRequest,
                    context: grpc.aio.ServicerContext) -> adpb.AdmissionResponse:
        a = Attributes(request)
        await self.chain.admit(a)
        return adpb.AdmissionResponse(warnings=a.warnings, patch=a.patch(),
                                      no_validators=not self.chain.has_validators(a),
                                      audit_annotations=a.audit_annotations)

    @grpcutil.api_method
    async def Validate(self, request: adpb.AdmissionRequest,
                       context: grpc.aio.ServicerContext) -> adpb.AdmissionResponse:
        a = Attributes(request)
        await self.chain.validate(a)
        return adpb.AdmissionResponse(warnings=a.warnings, audit_annotations=a.audit_annotations)
