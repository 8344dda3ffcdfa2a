"""apiary's apiserver library: what k8s.io/apiserver and k8s.io/apimachinery are to kube.

Every service (proxy, auth, apf, admission, registry, storage, controllermanager) and the kit stand on
this package and on services.common (process plumbing: envelope, Status errors, gRPC, metrics, health).
Neither imports a service, and no service imports another service's package
(tests/unit/test_import_boundaries.py holds the line).

Dependency direction, lowest first:
    apimachinery-like types (ResourceInfo, GroupVersion, field errors)
      <- strategies (types and this library only)
        <- install (per API group: each kind's storage, its subresources, injected dependencies)
          <- catalogue (built once in a service's main, grows and shrinks at run time)
            <- services and the kit
"""
