"""The apiary.Admission servicer.

Admit runs the mutating phase and answers with the plugins' changes as a JSON
Patch (none when nothing changed), never the object again: the registry holds it
and does not decode it a second time. Validate runs the validating phase and
answers warnings only. A denial is the plugin's APIError, carried as a Status in
the gRPC status details, with the request's audit annotations and warnings so far.
"""
from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import grpc

from apiary_pb import admission_pb2 as adpb
from apiary_pb import admission_pb2_grpc as adgrpc
from apiary_pb import envelope_pb2 as pb
from services.apiserver.catalogue import Catalogue
from services.common import grpcutil, mux
from services.common.errors import APIError

from .attributes import Attributes
from .chain import Chain


class AdmissionServicer(adgrpc.AdmissionServicer):
    def __init__(self, chain: Chain, catalogue: Catalogue) -> None:
        self.chain = chain
        self.catalogue = catalogue
        self._mux_methods = mux.unary_methods(
            self, {"Admit": adpb.AdmissionRequest, "Validate": adpb.AdmissionRequest})

    async def Calls(self, request_iterator: AsyncIterator[pb.Frames],
                    context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        """Admit and Validate on the registry's long-lived stream."""
        async for frame in mux.serve_mux(request_iterator, context, self._mux_methods):
            yield frame

    @grpcutil.api_method
    async def Admit(self, request: adpb.AdmissionRequest,
                    context: grpc.aio.ServicerContext) -> adpb.AdmissionResponse:
        a = await self._through(self.chain.admit, request)
        return adpb.AdmissionResponse(warnings=a.warnings, patch=a.patch(),
                                      no_validators=not self.chain.has_validators(a),
                                      audit_annotations=a.audit_annotations)

    @grpcutil.api_method
    async def Validate(self, request: adpb.AdmissionRequest,
                       context: grpc.aio.ServicerContext) -> adpb.AdmissionResponse:
        a = await self._through(self.chain.validate, request)
        return adpb.AdmissionResponse(warnings=a.warnings, audit_annotations=a.audit_annotations)

    async def _through(self, phase: Callable[[Attributes], Awaitable[None]],
                       request: adpb.AdmissionRequest) -> Attributes:
        """The request's attributes after the chain's phase (admit or validate); its refusal as kube's."""
        a = Attributes(request, self.catalogue)
        try:
            await phase(a)
        except APIError as e:
            raise refused(e, a) from None
        return a


def refused(e: APIError, a: Attributes) -> APIError:
    """The refusal with what the plugins before it recorded: a refused request is audited with its
    annotations (a policy's Audit failures, webhooks' auditAnnotations) and answered with its warnings."""
    e.audit_annotations = {**a.audit_annotations, **e.audit_annotations}
    e.warnings = a.warnings + e.warnings
    return e
