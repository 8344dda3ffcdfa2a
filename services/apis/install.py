"""Every built-in API group, in the order discovery lists them (core first): kube's controlplane install of
its REST storage providers. A service's main builds its Catalogue here and passes it on."""
from __future__ import annotations

from services.apiserver.catalogue import Catalogue
from services.apiserver.resource import GroupVersion

from . import (admissionregistration, apiextensions, apiregistration, apps, authentication, authorization, autoscaling,
               batch, certificates, coordination, core, discovery, events, flowcontrol, networking, node, policy,
               rbac, scheduling, storage)

GROUPS = (core, apiregistration, authentication, authorization, autoscaling, apps, batch, certificates, rbac,
          discovery, admissionregistration, apiextensions, coordination, events, flowcontrol, networking, node,
          policy, scheduling, storage)

GROUP_VERSIONS: tuple[GroupVersion, ...] = tuple(gv for group in GROUPS for gv in group.GROUP_VERSIONS)


def new_catalogue() -> Catalogue:
    """A Catalogue of every built-in group-version (one per server: CustomResourceDefinitions grow it)."""
    return Catalogue(GROUP_VERSIONS)
