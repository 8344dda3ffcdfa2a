"""Generate services/apis/schemas.json: Kubernetes 1.33's own OpenAPI definitions, in the shape
kube-apiserver publishes them in /openapi/v3 (`make setup` runs this; the output is never committed).

The source is the `kubernetes-validate` package, which ships kube's swagger definitions of each release
(descriptions, formats, x-kubernetes-patch-merge-key, -patch-strategy, -list-type, -list-map-keys,
-map-type, -group-version-kind) rewritten as JSON Schema. This undoes that rewrite:

- `"type": ["string", "null"]` becomes `"type": "string"` (kube marks nullability by omission);
- `#/$defs/X` references become `#/components/schemas/X`, and a reference with its own description
  becomes `{"allOf": [{"$ref": ...}], "description": ...}`, as kube's v3 documents wrap them;
- the `apiVersion`/`kind` enums the package adds to each kind are dropped (kube publishes none);
- IntOrString and Quantity (JSON Schema `oneOf`) become kube's string types with their formats (the
  package keeps no description for these two).

Only the generated file is read at run time, so the services' image does not carry the package
(108 MB, every release from 1.25 on) and the registry starts by loading one JSON file.
"""
from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "services" / "apis" / "schemas.json"
KUBE_VERSION = "v1.33.0"
# Kinds apiary serves that KUBE_VERSION's definitions lack, from the release that has them: the later
# versions of MutatingAdmissionPolicy (v1beta1 from 1.34, v1 from 1.36; the same fields as v1alpha1).
# Only these and the definitions they reach that KUBE_VERSION lacks are taken; what both releases
# define stays KUBE_VERSION's (1.36's ListMeta, with shardInfo, would otherwise leak into every list).
LATER_KINDS: dict[str, tuple[str, ...]] = {
    "v1.36.0": tuple(f"io.k8s.api.admissionregistration.{v}.{k}" for v in ("v1beta1", "v1")
                     for k in ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyList",
                               "MutatingAdmissionPolicyBinding", "MutatingAdmissionPolicyBindingList")),
}
V3_REF = "#/components/schemas/"
SOURCE_REF = "#/$defs/"
# Kube's string-typed scalars that JSON Schema can only say with oneOf.
SCALARS = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"type": "string", "format": "int-or-string",
                                                        "x-kubernetes-int-or-string": True},
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {"type": "string", "format": "quantity"},
}

Obj = dict[str, Any]


def source_path(version: str = KUBE_VERSION) -> Path:
    import kubernetes_validate  # a build-time dependency (requirements.txt), never imported by the services

    return (Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"{version}-local"
            / "_definitions.json")


def convert(node: Any, in_kind: bool = False) -> Any:
    """One JSON Schema node as kube's OpenAPI v3 writes it."""
    if isinstance(node, list):
        return [convert(x) for x in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        ref = V3_REF + node["$ref"][len(SOURCE_REF):]
        rest = {k: convert(v) for k, v in node.items() if k != "$ref"}
        return {"allOf": [{"$ref": ref}], **rest} if rest else {"$ref": ref}
    out: Obj = {}
    for k, v in node.items():
        if k == "type" and isinstance(v, list):
            types = [t for t in v if t != "null"]
            out[k] = types[0] if len(types) == 1 else types
        elif k == "properties":
            out[k] = {name: _property(name, p, in_kind) for name, p in v.items()}
        else:
            out[k] = convert(v)
    return out


def _property(name: str, schema: Obj, in_kind: bool) -> Any:
    out = convert(schema)
    if in_kind and name in ("apiVersion", "kind"):
        out.pop("enum", None)
    return out


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if "$ref" in node:
            yield node["$ref"][len(SOURCE_REF):]
        for v in node.values():
            yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


def later_definitions(defs: dict[str, Obj], later: dict[str, Obj], kinds: tuple[str, ...]) -> dict[str, Obj]:
    """kinds from a later release's definitions, with what they reference that defs lack."""
    out: dict[str, Obj] = {}
    todo = list(kinds)
    while todo:
        name = todo.pop()
        if name in out or (name in defs and name not in kinds):
            continue
        out[name] = later[name]
        todo.extend(_refs(later[name]))
    return out


def generate(source: Path, later: dict[str, Path] | None = None) -> dict[str, Obj]:
    """source's definitions as kube publishes them, with LATER_KINDS added (by default when source is
    KUBE_VERSION's)."""
    defs = orjson.loads(source.read_bytes())["$defs"]
    if later is None:
        later = {v: source_path(v) for v in LATER_KINDS} if source == source_path() else {}
    for version, path in later.items():
        defs.update(later_definitions(defs, orjson.loads(path.read_bytes())["$defs"], LATER_KINDS[version]))
    out: dict[str, Obj] = {}
    for name, schema in sorted(defs.items()):
        if name in SCALARS:
            out[name] = dict(SCALARS[name])
        else:
            out[name] = convert(schema, in_kind="x-kubernetes-group-version-kind" in schema)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tools.kube_definitions", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", default=KUBE_VERSION, help="the Kubernetes release whose definitions to use")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    doc = {"kubernetesVersion": args.version, "definitions": generate(source_path(args.version))}
    tmp = args.out.with_suffix(".tmp")
    tmp.write_bytes(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS))
    tmp.replace(args.out)
    print(f"{args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}: "
          f"{len(doc['definitions'])} definitions of Kubernetes {args.version}")


if __name__ == "__main__":
    main()
