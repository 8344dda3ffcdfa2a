"""Kubernetes protobuf request bodies -> the JSON a JSON client would have sent."""
import base64

import orjson
import pytest
from google.protobuf.message import Message

from k8s_pb import apiregistration_v1_pb2 as apireg
from k8s_pb import authentication_v1_pb2 as authn
from k8s_pb import authorization_v1_pb2 as authz
from k8s_pb import core_v1_pb2 as core
from k8s_pb import intstr_pb2 as intstr
from k8s_pb import meta_v1_pb2 as meta
from k8s_pb import rbac_v1_pb2 as rbac
from k8s_pb import resource_pb2 as resource
from k8s_pb import runtime_pb2 as runtime
from services.apiserver.negotiation import PROTOBUF
from services.common.errors import BadRequest, UnsupportedMediaType
from services.proxy.decoder import decode_body
from services.proxy.protobuf import KINDS, decode_k8s_protobuf, message_to_json

T = 1704164645  # 2024-01-02T03:04:05Z


def envelope(api_version: str, kind: str, obj: Message | bytes) -> bytes:
    raw = obj if isinstance(obj, bytes) else obj.SerializeToString()
    unk = runtime.Unknown(typeMeta=runtime.TypeMeta(apiVersion=api_version, kind=kind), raw=raw)
    return b"k8s\x00" + unk.SerializeToString()


def decode(api_version: str, kind: str, obj: Message) -> dict:
    return orjson.loads(decode_k8s_protobuf(envelope(api_version, kind, obj)))


def kubectl_meta(**kw) -> meta.ObjectMeta:
    """ObjectMeta as gogo-protobuf writes it: every value field present, zero or not; zero Time empty."""
    m = meta.ObjectMeta(name="", generateName="", namespace="", selfLink="", uid="", resourceVersion="",
                        generation=0, creationTimestamp=meta.Time())
    for k, v in kw.items():
        if isinstance(v, dict):
            getattr(m, k).update(v)
        elif isinstance(v, list):
            getattr(m, k).extend(v)
        else:
            setattr(m, k, v)
    return m


def test_namespace_as_kubectl_sends_it():
    ns = core.Namespace(metadata=kubectl_meta(name="pb-test"), spec=core.NamespaceSpec(),
                        status=core.NamespaceStatus(phase=""))
    assert decode("v1", "Namespace", ns) == {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "pb-test"}, "spec": {}, "status": {}}


def test_decode_body_hook_hands_json_on():
    ns = core.Namespace(metadata=meta.ObjectMeta(name="a"))
    body, media = decode_body("create", PROTOBUF, envelope("v1", "Namespace", ns))
    assert media == "application/json"
    assert orjson.loads(body) == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}


def test_object_meta_fields():
    m = kubectl_meta(name="x", namespace="ns", generation=3, labels={"a": "b"}, annotations={"k": "v"},
                     finalizers=["f"], deletionGracePeriodSeconds=0)
    m.creationTimestamp.seconds = T
    m.deletionTimestamp.seconds = T
    m.deletionTimestamp.nanos = 999  # metav1.Time has second precision
    m.ownerReferences.add(apiVersion="v1", kind="ConfigMap", name="o", uid="u", controller=False)
    mf = m.managedFields.add(manager="kubectl", operation="Update", apiVersion="v1", fieldsType="FieldsV1",
                             fieldsV1=meta.FieldsV1(Raw=b'{"f:data":{".":{}}}'))
    mf.time.seconds = T
    got = decode("v1", "ConfigMap", core.ConfigMap(metadata=m))["metadata"]
    assert got == {
        "name": "x", "namespace": "ns", "generation": 3,
        "creationTimestamp": "2024-01-02T03:04:05Z", "deletionTimestamp": "2024-01-02T03:04:05Z",
        "deletionGracePeriodSeconds": 0,  # a pointer in Go: zero is kept
        "labels": {"a": "b"}, "annotations": {"k": "v"},
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u",
                             "controller": False}],
        "finalizers": ["f"],
        "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                           "time": "2024-01-02T03:04:05Z", "fieldsType": "FieldsV1",
                           "fieldsV1": {"f:data": {".": {}}}}],
    }
    assert isinstance(got["generation"], int)


def test_configmap_and_secret_bytes_are_base64():
    cm = core.ConfigMap(metadata=kubectl_meta(name="c"), data={"a": "1"}, binaryData={"b": b"\x00\xff"})
    assert decode("v1", "ConfigMap", cm) == {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"},
        "binaryData": {"b": base64.b64encode(b"\x00\xff").decode()}}
    s = core.Secret(metadata=kubectl_meta(name="s"), data={"password": b"s3cr\xe9t", "empty": b""},
                    type="Opaque", immutable=False)
    got = decode("v1", "Secret", s)
    assert got["data"] == {"password": base64.b64encode(b"s3cr\xe9t").decode(), "empty": ""}
    assert got["type"] == "Opaque"
    assert got["immutable"] is False


def test_service_account():
    sa = core.ServiceAccount(metadata=kubectl_meta(name="sa", namespace="default"),
                             automountServiceAccountToken=False)
    sa.secrets.add(name="tok")
    sa.imagePullSecrets.add(name="pull")
    assert decode("v1", "ServiceAccount", sa) == {
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa", "namespace": "default"},
        "secrets": [{"name": "tok"}], "imagePullSecrets": [{"name": "pull"}],
        "automountServiceAccountToken": False}


def test_namespace_condition_time():
    st = core.NamespaceStatus(phase="Active")
    c = st.conditions.add(type="NamespaceContentRemaining", status="False", reason="r", message="m")
    c.lastTransitionTime.seconds = T
    got = decode("v1", "Namespace", core.Namespace(metadata=kubectl_meta(name="n"), status=st))
    assert got["status"] == {"phase": "Active", "conditions": [
        {"type": "NamespaceContentRemaining", "status": "False", "lastTransitionTime": "2024-01-02T03:04:05Z",
         "reason": "r", "message": "m"}]}


def test_token_request_int64_and_bound_ref_uid():
    tr = authn.TokenRequest(metadata=kubectl_meta(), spec=authn.TokenRequestSpec(
        audiences=["https://kubernetes.default.svc"], expirationSeconds=3600,
        boundObjectRef=authn.BoundObjectReference(kind="Pod", apiVersion="v1", name="p", uID="123")),
        status=authn.TokenRequestStatus(token="", expirationTimestamp=meta.Time()))
    got = decode("authentication.k8s.io/v1", "TokenRequest", tr)
    assert got == {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "metadata": {},
        "spec": {"audiences": ["https://kubernetes.default.svc"], "expirationSeconds": 3600,
                 "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p", "uid": "123"}},
        "status": {}}
    assert type(got["spec"]["expirationSeconds"]) is int


def test_token_review_extra_values_are_lists():
    user = authn.UserInfo(username="u", groups=["g"], extra={"scopes": authn.ExtraValue(items=["x", "y"])})
    tr = authn.TokenReview(spec=authn.TokenReviewSpec(token="t", audiences=["a"]),
                           status=authn.TokenReviewStatus(authenticated=True, user=user))
    got = decode("authentication.k8s.io/v1", "TokenReview", tr)
    assert got["spec"] == {"token": "t", "audiences": ["a"]}
    assert got["status"] == {"authenticated": True,
                             "user": {"username": "u", "groups": ["g"], "extra": {"scopes": ["x", "y"]}}}


def test_self_subject_review():
    ssr = authn.SelfSubjectReview(metadata=kubectl_meta(), status=authn.SelfSubjectReviewStatus())
    assert decode("authentication.k8s.io/v1", "SelfSubjectReview", ssr) == {
        "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview", "metadata": {}, "status": {}}


def test_self_subject_access_review():
    ra = authz.ResourceAttributes(namespace="default", verb="list", group="", version="", resource="pods",
                                  subresource="", name="")
    ra.fieldSelector.rawSelector = "spec.nodeName=n1"
    ra.labelSelector.requirements.add(key="app", operator="In", values=["web"])
    sar = authz.SelfSubjectAccessReview(metadata=kubectl_meta(), spec=authz.SelfSubjectAccessReviewSpec(
        resourceAttributes=ra), status=authz.SubjectAccessReviewStatus(allowed=False, reason=""))
    assert decode("authorization.k8s.io/v1", "SelfSubjectAccessReview", sar) == {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "metadata": {},
        "spec": {"resourceAttributes": {
            "namespace": "default", "verb": "list", "resource": "pods",
            "fieldSelector": {"rawSelector": "spec.nodeName=n1"},
            "labelSelector": {"requirements": [{"key": "app", "operator": "In", "values": ["web"]}]}}},
        "status": {}}
    nr = authz.SelfSubjectAccessReview(spec=authz.SelfSubjectAccessReviewSpec(
        nonResourceAttributes=authz.NonResourceAttributes(path="/healthz", verb="get")))
    assert decode("authorization.k8s.io/v1", "SelfSubjectAccessReview", nr)["spec"] == {
        "nonResourceAttributes": {"path": "/healthz", "verb": "get"}}


def test_subject_access_reviews_and_rules_review():
    spec = authz.SubjectAccessReviewSpec(user="alice", groups=["devs"], uid="1",
                                         extra={"k": authz.ExtraValue(items=["v"])})
    spec.resourceAttributes.verb, spec.resourceAttributes.resource = "get", "pods"
    want = {"resourceAttributes": {"verb": "get", "resource": "pods"}, "user": "alice", "groups": ["devs"],
            "extra": {"k": ["v"]}, "uid": "1"}
    assert decode("authorization.k8s.io/v1", "SubjectAccessReview",
                  authz.SubjectAccessReview(spec=spec))["spec"] == want
    assert decode("authorization.k8s.io/v1", "LocalSubjectAccessReview",
                  authz.LocalSubjectAccessReview(spec=spec))["spec"] == want
    rr = authz.SelfSubjectRulesReview(spec=authz.SelfSubjectRulesReviewSpec(namespace="default"))
    assert decode("authorization.k8s.io/v1", "SelfSubjectRulesReview", rr) == {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": "default"}}


def test_rbac_kinds():
    rule = rbac.PolicyRule(verbs=["get", "list"], apiGroups=[""], resources=["pods"], resourceNames=["p"])
    role = rbac.Role(metadata=kubectl_meta(name="r"), rules=[rule])
    assert decode("rbac.authorization.k8s.io/v1", "Role", role) == {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r"},
        "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"],
                   "resourceNames": ["p"]}]}
    cr = rbac.ClusterRole(metadata=kubectl_meta(name="cr"),
                          rules=[rbac.PolicyRule(verbs=["get"], nonResourceURLs=["/healthz"])],
                          aggregationRule=rbac.AggregationRule(clusterRoleSelectors=[
                              meta.LabelSelector(matchLabels={"agg": "true"})]))
    assert decode("rbac.authorization.k8s.io/v1", "ClusterRole", cr) == {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "cr"},
        "rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}],
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "true"}}]}}
    for kind, cls in (("RoleBinding", rbac.RoleBinding), ("ClusterRoleBinding", rbac.ClusterRoleBinding)):
        b = cls(metadata=kubectl_meta(name="b"),
                subjects=[rbac.Subject(kind="User", apiGroup="rbac.authorization.k8s.io", name="alice"),
                          rbac.Subject(kind="ServiceAccount", apiGroup="", name="sa", namespace="default")],
                roleRef=rbac.RoleRef(apiGroup="rbac.authorization.k8s.io", kind="ClusterRole", name="view"))
        assert decode("rbac.authorization.k8s.io/v1", kind, b) == {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": {"name": "b"},
            "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"},
                         {"kind": "ServiceAccount", "name": "sa", "namespace": "default"}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}}


def test_apiservice():
    svc = apireg.APIService(metadata=kubectl_meta(name="v1.pizza.example.com"), spec=apireg.APIServiceSpec(
        service=apireg.ServiceReference(namespace="ns", name="pizza", port=443), group="pizza.example.com",
        version="v1", insecureSkipTLSVerify=False, caBundle=b"PEM", groupPriorityMinimum=1000,
        versionPriority=15))
    assert decode("apiregistration.k8s.io/v1", "APIService", svc)["spec"] == {
        "service": {"namespace": "ns", "name": "pizza", "port": 443}, "group": "pizza.example.com",
        "version": "v1", "caBundle": base64.b64encode(b"PEM").decode(), "groupPriorityMinimum": 1000,
        "versionPriority": 15}


@pytest.mark.parametrize("api_version", ["v1", "apps/v1", "rbac.authorization.k8s.io/v1", "meta.k8s.io/v1"])
def test_delete_options_in_any_group_version(api_version):
    opts = meta.DeleteOptions(gracePeriodSeconds=0, propagationPolicy="Background", dryRun=["All"],
                              preconditions=meta.Preconditions(uid="u", resourceVersion="7"))
    assert decode(api_version, "DeleteOptions", opts) == {
        "apiVersion": api_version, "kind": "DeleteOptions", "gracePeriodSeconds": 0,
        "preconditions": {"uid": "u", "resourceVersion": "7"}, "propagationPolicy": "Background",
        "dryRun": ["All"]}


def test_times_and_special_types():
    assert message_to_json(meta.Time(seconds=T, nanos=5)) == "2024-01-02T03:04:05Z"
    assert message_to_json(meta.Time(seconds=0)) == "1970-01-01T00:00:00Z"  # present, unlike Go's zero time
    assert message_to_json(meta.Time()) is None
    assert message_to_json(meta.MicroTime(seconds=T, nanos=123456789)) == "2024-01-02T03:04:05.123456Z"
    assert message_to_json(meta.MicroTime(seconds=T)) == "2024-01-02T03:04:05.000000Z"
    assert message_to_json(intstr.IntOrString(type=0, intVal=8080)) == 8080
    assert message_to_json(intstr.IntOrString(type=1, strVal="http")) == "http"
    assert message_to_json(resource.Quantity(string="500m")) == "500m"


def test_missing_type_meta_leaves_out_api_version():
    assert orjson.loads(decode_k8s_protobuf(envelope("", "DeleteOptions", meta.DeleteOptions()))) == {
        "kind": "DeleteOptions"}


def test_every_registered_kind_round_trips():
    for (api_version, kind), cls in KINDS.items():
        obj = cls()
        obj.metadata.name = "x"
        assert decode(api_version, kind, obj) == {"apiVersion": api_version, "kind": kind,
                                                 "metadata": {"name": "x"}}


def test_bare_prefix_is_an_empty_body():
    # kube's protobuf serializer: the bare prefix is an "empty body", a 400 (transformDecodeError)
    with pytest.raises(BadRequest) as e:
        decode_body("create", "application/vnd.kubernetes.protobuf", b"k8s\x00", "ConfigMap")
    assert e.value.message == "the object provided is unrecognized (must be of type ConfigMap): empty body (6b387300)"


def test_bad_magic_is_400():
    with pytest.raises(BadRequest) as e:
        decode_k8s_protobuf(b'{"kind":"Namespace"}')
    assert e.value.code == 400
    with pytest.raises(BadRequest):
        decode_body("create", PROTOBUF, b"k8s")


def test_garbage_is_400():
    with pytest.raises(BadRequest):
        decode_k8s_protobuf(b"k8s\x00\xff\xff\xff")
    with pytest.raises(BadRequest):
        decode_k8s_protobuf(envelope("v1", "Namespace", b"\x0a\x05ab"))  # truncated metadata
    bad_fields = meta.ObjectMeta(name="x")
    bad_fields.managedFields.add(fieldsV1=meta.FieldsV1(Raw=b"{not json"))
    with pytest.raises(BadRequest):
        decode_k8s_protobuf(envelope("v1", "Namespace", core.Namespace(metadata=bad_fields)))
    with pytest.raises(BadRequest):
        decode_k8s_protobuf(envelope("v1", "Namespace", core.Namespace(
            metadata=meta.ObjectMeta(creationTimestamp=meta.Time(seconds=10**15)))))


def test_invalid_utf8_string_is_400():
    # field 1 (metadata) holding field 1 (name) = b"\xff"
    with pytest.raises(BadRequest):
        decode_k8s_protobuf(envelope("v1", "Namespace", b"\x0a\x03\x0a\x01\xff"))


@pytest.mark.parametrize("api_version,kind", [("apps/v1", "ControllerRevision"), ("v1", "Endpoints"), ("", "")])
def test_unsupported_kinds_are_415(api_version, kind):
    with pytest.raises(UnsupportedMediaType) as e:
        decode_k8s_protobuf(envelope(api_version, kind, b""))
    assert e.value.code == 415


def test_encoded_envelope_is_415():
    unk = runtime.Unknown(typeMeta=runtime.TypeMeta(apiVersion="v1", kind="Namespace"), raw=b"",
                          contentEncoding="gzip")
    with pytest.raises(UnsupportedMediaType):
        decode_k8s_protobuf(b"k8s\x00" + unk.SerializeToString())


def test_patches_are_not_protobuf():
    with pytest.raises(UnsupportedMediaType):
        decode_body("patch", PROTOBUF, envelope("v1", "Namespace", core.Namespace()))


def test_ingress_rule_value_is_inline():
    from k8s_pb import networking_v1_pb2 as net

    backend = net.IngressBackend(service=net.IngressServiceBackend(name="svc1", port=net.ServiceBackendPort(
        name="", number=8080)))
    rule = net.IngressRule(host="foo.com", ingressRuleValue=net.IngressRuleValue(http=net.HTTPIngressRuleValue(
        paths=[net.HTTPIngressPath(path="/bar", pathType="Exact", backend=backend)])))
    ing = net.Ingress(metadata=kubectl_meta(name="i", namespace="d"), spec=net.IngressSpec(
        ingressClassName="nginx", rules=[rule], tls=[net.IngressTLS(hosts=["foo.com"], secretName="c")]),
        status=net.IngressStatus(loadBalancer=net.IngressLoadBalancerStatus()))
    assert decode("networking.k8s.io/v1", "Ingress", ing) == {
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "i", "namespace": "d"},
        "spec": {"ingressClassName": "nginx", "tls": [{"hosts": ["foo.com"], "secretName": "c"}], "rules": [
            {"host": "foo.com", "http": {"paths": [{"path": "/bar", "pathType": "Exact", "backend": {
                "service": {"name": "svc1", "port": {"number": 8080}}}}]}}]},
        "status": {"loadBalancer": {}}}


def test_priority_class_and_pdb_as_kubectl_sends_them():
    from k8s_pb import policy_v1_pb2 as policy
    from k8s_pb import scheduling_v1_pb2 as sched

    pc = sched.PriorityClass(metadata=kubectl_meta(name="p"), value=0, globalDefault=False, description="",
                             preemptionPolicy="Never")
    assert decode("scheduling.k8s.io/v1", "PriorityClass", pc) == {
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "p"},
        "preemptionPolicy": "Never"}
    pdb = policy.PodDisruptionBudget(metadata=kubectl_meta(name="b", namespace="d"), spec=policy.PodDisruptionBudgetSpec(
        minAvailable=intstr.IntOrString(type=1, intVal=0, strVal="50%"),
        selector=meta.LabelSelector(matchLabels={"app": "web"})),
        status=policy.PodDisruptionBudgetStatus(disruptionsAllowed=0, currentHealthy=0, desiredHealthy=0,
                                                expectedPods=0, observedGeneration=0))
    assert decode("policy/v1", "PodDisruptionBudget", pdb) == {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "b", "namespace": "d"},
        "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}}, "status": {}}
