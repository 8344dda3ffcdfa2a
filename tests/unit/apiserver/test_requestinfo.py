import pytest

from services.apiserver.requestinfo import invalid_path_name, needs_raw_split, parse, parse_query, split_raw

# (method, url, verb, resource?, api_prefix, group, version, namespace, resource, subresource, name)
CASES = [
    ("GET", "/api/v1/namespaces", "list", True, "api", "", "v1", "", "namespaces", "", ""),
    ("GET", "/api/v1/namespaces/other", "get", True, "api", "", "v1", "other", "namespaces", "", "other"),
    ("GET", "/api/v1/namespaces/other/pods", "list", True, "api", "", "v1", "other", "pods", "", ""),
    ("GET", "/api/v1/namespaces/other/pods/foo", "get", True, "api", "", "v1", "other", "pods", "", "foo"),
    ("HEAD", "/api/v1/namespaces/other/pods/foo", "get", True, "api", "", "v1", "other", "pods", "", "foo"),
    ("GET", "/api/v1/pods", "list", True, "api", "", "v1", "", "pods", "", ""),
    ("POST", "/api/v1/namespaces/other/pods", "create", True, "api", "", "v1", "other", "pods", "", ""),
    ("PUT", "/api/v1/namespaces/other/pods/foo", "update", True, "api", "", "v1", "other", "pods", "", "foo"),
    ("PATCH", "/api/v1/namespaces/other/pods/foo", "patch", True, "api", "", "v1", "other", "pods", "", "foo"),
    ("DELETE", "/api/v1/namespaces/other/pods/foo", "delete", True, "api", "", "v1", "other", "pods", "", "foo"),
    ("DELETE", "/api/v1/namespaces/other/pods", "deletecollection", True, "api", "", "v1", "other", "pods", "",
     ""),
    ("GET", "/api/v1/namespaces/other/pods/foo/status", "get", True, "api", "", "v1", "other", "pods", "status",
     "foo"),
    ("PUT", "/api/v1/namespaces/other/finalize", "update", True, "api", "", "v1", "other", "namespaces",
     "finalize", "other"),
    ("GET", "/api/v1/namespaces/other/status", "get", True, "api", "", "v1", "other", "namespaces", "status",
     "other"),
    ("GET", "/api/v1/watch/pods", "watch", True, "api", "", "v1", "", "pods", "", ""),
    ("GET", "/api/v1/watch/namespaces/other/pods", "watch", True, "api", "", "v1", "other", "pods", "", ""),
    ("GET", "/api/v1/watch/namespaces/other/pods/foo", "watch", True, "api", "", "v1", "other", "pods", "",
     "foo"),
    ("GET", "/api/v1/pods?watch=true", "watch", True, "api", "", "v1", "", "pods", "", ""),
    ("GET", "/api/v1/pods?watch=1", "watch", True, "api", "", "v1", "", "pods", "", ""),
    ("GET", "/api/v1/pods?watch=", "watch", True, "api", "", "v1", "", "pods", "", ""),
    ("GET", "/api/v1/pods?watch=false", "list", True, "api", "", "v1", "", "pods", "", ""),
    ("GET", "/api/v1/pods?watch=0", "list", True, "api", "", "v1", "", "pods", "", ""),
    ("GET", "/api/v1/namespaces/other/pods?fieldSelector=metadata.name%3Dfoo", "list", True, "api", "", "v1",
     "other", "pods", "", "foo"),
    ("GET", "/api/v1/namespaces/other/pods?watch=true&fieldSelector=metadata.name%3D%3Dfoo", "watch", True,
     "api", "", "v1", "other", "pods", "", "foo"),
    ("GET", "/api/v1/pods?fieldSelector=metadata.name%3Dfoo,spec.nodeName%3Dn", "list", True, "api", "", "v1",
     "", "pods", "", ""),
    ("GET", "/api/v1/pods?fieldSelector=metadata.name!%3Dfoo", "list", True, "api", "", "v1", "", "pods", "",
     ""),
    ("GET", "/apis/apps/v1/namespaces/other/deployments/foo/scale", "get", True, "apis", "apps", "v1", "other",
     "deployments", "scale", "foo"),
    ("GET", "/apis/apps/v1/deployments", "list", True, "apis", "apps", "v1", "", "deployments", "", ""),
    ("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin", "get", True, "apis",
     "rbac.authorization.k8s.io", "v1", "", "clusterroles", "", "admin"),
    ("GET", "/apis/apps/v1/watch/namespaces/ns/deployments", "watch", True, "apis", "apps", "v1", "ns",
     "deployments", "", ""),
    ("GET", "/api/v1/namespaces/ns/pods/p/proxy/some/path", "get", True, "api", "", "v1", "ns", "pods", "proxy",
     "p"),
    ("GET", "/api/v1/proxy/namespaces/ns/pods/p/x", "proxy", True, "api", "", "v1", "ns", "pods", "", "p"),
    # non-resource requests
    ("GET", "/", "get", False, "", "", "", "", "", "", ""),
    ("GET", "/api", "get", False, "", "", "", "", "", "", ""),
    ("GET", "/api/v1", "get", False, "", "", "", "", "", "", ""),
    ("GET", "/apis", "get", False, "", "", "", "", "", "", ""),
    ("GET", "/apis/apps", "get", False, "", "", "", "", "", "", ""),
    ("GET", "/apis/apps/v1", "get", False, "apis", "", "", "", "", "", ""),
    ("GET", "/healthz", "get", False, "", "", "", "", "", "", ""),
    ("POST", "/foo/bar/baz", "post", False, "", "", "", "", "", "", ""),
    ("GET", "/version", "get", False, "", "", "", "", "", "", ""),
    ("GET", "/openapi/v3/apis/apps/v1", "get", False, "", "", "", "", "", "", ""),
]


@pytest.mark.parametrize("method,url,verb,is_res,prefix,group,version,ns,resource,sub,name", CASES)
def test_parse(method, url, verb, is_res, prefix, group, version, ns, resource, sub, name):
    path, _, qs = url.partition("?")
    info = parse(method, path, parse_query(qs))
    assert info.verb == verb
    assert info.is_resource_request is is_res
    if is_res:
        assert (info.api_prefix, info.api_group, info.api_version) == (prefix, group, version)
        assert (info.namespace, info.resource, info.subresource, info.name) == (ns, resource, sub, name)
    assert info.path == path


def test_field_selector_name_is_not_the_path_name():
    info = parse("GET", "/api/v1/namespaces/ns/pods", parse_query("fieldSelector=metadata.name%3Dfoo"))
    assert info.name == "foo" and info.path_name == ""


def test_watch_prefix_without_resource_is_an_error():
    with pytest.raises(ValueError):
        parse("GET", "/api/v1/watch")


def test_read_only():
    assert parse("GET", "/api/v1/pods", {}).read_only
    assert not parse("POST", "/api/v1/namespaces/a/pods", {}).read_only


def test_parse_query_first_value():
    assert parse_query(b"a=1&a=2&b=&c=x%2Fy") == {"a": "1", "b": "", "c": "x/y"}


@pytest.mark.parametrize("raw,segments", [
    (b"/api/v1/namespaces/kube-system/secrets/%2F", ["api", "v1", "namespaces", "kube-system", "secrets", "/"]),
    (b"/api/v1/namespaces/a/configmaps/b%2fc/", ["api", "v1", "namespaces", "a", "configmaps", "b/c"]),
    (b"/api/v1/namespaces/kube-system/secrets/..%2f..%2f", ["api", "v1", "namespaces", "kube-system", "secrets",
                                                           "../../"]),
])
def test_raw_paths_keep_escaped_slashes_in_their_segment(raw, segments):
    assert needs_raw_split(raw)
    assert split_raw(raw) == segments


def test_plain_paths_take_the_decoded_split_and_keep_dot_segments():
    assert not needs_raw_split(b"/api/v1/namespaces/../secrets")
    assert parse("GET", "/api/v1/namespaces/../secrets", {}).namespace == ".."
    info = parse("GET", "/api/v1/namespaces/kube-system/secrets//", {},
                 split_raw(b"/api/v1/namespaces/kube-system/secrets/%2F"))
    assert (info.verb, info.namespace, info.resource, info.name) == ("get", "kube-system", "secrets", "/")


@pytest.mark.parametrize("name,message", [
    ("/", 'Name parameter invalid: "/": may not contain \'/\''),
    ("..", 'Name parameter invalid: "..": may not be \'..\''),
    ("a%b", 'Name parameter invalid: "a%b": may not contain \'%\''),
    ("my.config", ""), ("", ""),
])
def test_names_that_are_no_path_segment(name, message):
    path = f"/api/v1/namespaces/a/configmaps/{name}" if name not in ("/",) else "/api/v1/namespaces/a/configmaps"
    info = parse("GET", path, {}, ["api", "v1", "namespaces", "a", "configmaps", name] if name else None)
    assert invalid_path_name(info) == message
