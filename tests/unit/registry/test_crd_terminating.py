"""While a CRD is being deleted (Terminating, its objects going), creating one of its objects is refused with
kube's 405; updates still pass, so a finalizer holding an object can be removed, and then the CRD goes."""
from __future__ import annotations

import pytest

from services.common import errors

from .test_crd_controller import CT, conditions, env, eventually, schema_crd  # noqa: F401 - the fixture
from .test_crd_validation import ADMIN, G

NAME = "crontabs.stable.example.com"


def crontab(name: str, **meta: object) -> dict:
    return {"apiVersion": f"{CT}/v1", "kind": "CronTab", "metadata": {"name": name, "namespace": "default", **meta},
            "spec": {"cronSpec": "* * * * */5", "image": "img"}}


async def test_no_create_while_terminating(env):  # noqa: F811
    api, controller = env
    await api("create", "customresourcedefinitions", body=schema_crd(), group=G, user=ADMIN)

    async def served() -> bool:
        return controller.catalogue.lookup(CT, "v1", "crontabs") is not None
    await eventually(served)
    await api("create", "crontabs", "default", body=crontab("held", finalizers=["example.com/hold"]), group=CT,
              user=ADMIN)
    await api("delete", "customresourcedefinitions", "", NAME, group=G, user=ADMIN)

    async def terminating() -> bool:
        _, got = await api("get", "customresourcedefinitions", "", NAME, group=G, user=ADMIN)
        return conditions(got).get("Terminating") == ("True", "InstanceDeletionInProgress")
    await eventually(terminating)
    with pytest.raises(errors.MethodNotAllowed) as e:
        await api("create", "crontabs", "default", body=crontab("new"), group=CT, user=ADMIN)
    assert e.value.code == 405 and e.value.message == "create not allowed while custom resource definition is " \
                                                      "terminating"
    assert e.value.details == {"group": CT, "kind": "crontabs"}
    await api("patch", "crontabs", "default", "held", body={"metadata": {"finalizers": None}}, group=CT, user=ADMIN,
              content_type="application/merge-patch+json")

    async def gone() -> bool:
        return not (await api("list", "customresourcedefinitions", group=G, user=ADMIN))[1]["items"]
    await eventually(gone, timeout=10)
