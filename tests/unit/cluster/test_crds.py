"""CRD files as `apiary up --crds` and Stack.install_crds read them: which files of a directory, the
CustomResourceDefinitions of a file (a List's too, other kinds skipped), and a file that does not
parse named with its position."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.cluster import crds

CRD = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
       "metadata": {"name": "widgets.example.com"}}


def test_a_directory_gives_its_yaml_and_json_files_sorted(tmp_path: Path) -> None:
    for name in ("b.yaml", "a.json", "c.yml", "notes.md", "kustomization.txt"):
        (tmp_path / name).write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d.yaml").write_text("")
    one = tmp_path / "notes.md"
    assert crds.files([tmp_path, one]) == [tmp_path / "a.json", tmp_path / "b.yaml", tmp_path / "c.yml", one]


def test_a_missing_path_is_named(tmp_path: Path) -> None:
    with pytest.raises(crds.CRDError, match=f"{tmp_path / 'nope'}: no such file or directory"):
        crds.files([tmp_path / "nope"])


def test_the_crds_of_a_file(tmp_path: Path) -> None:
    f = tmp_path / "all.yaml"
    f.write_text("---\n" + json.dumps(CRD) + "\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n---\n"
                 + json.dumps({"apiVersion": "v1", "kind": "List", "items": [CRD, {"kind": "ConfigMap"}]}))
    assert crds.read(f) == [CRD, CRD]
    j = tmp_path / "one.json"
    j.write_text(json.dumps(CRD))
    assert crds.read(j) == [CRD]


@pytest.mark.parametrize("name, text, message", [
    ("bad.yaml", "a: [b\n", r"(?s)bad.yaml: does not parse: .*bad.yaml\", line 1, column 4"),
    ("bad.json", "{\"kind\": ", r"bad.json: does not parse: Expecting value"),
    ("list.yaml", "- a\n- b\n", r"list.yaml: a document is not an object"),
])
def test_a_file_that_does_not_parse_is_named(tmp_path: Path, name: str, text: str, message: str) -> None:
    (tmp_path / name).write_text(text)
    with pytest.raises(crds.CRDError, match=message):
        crds.read(tmp_path / name)


class FakeAPI:
    """The CRD collection as crds.install sees it: what was written, Established at once."""

    def __init__(self) -> None:
        self.crds: dict[str, dict] = {}
        self.writes = 0

    def __call__(self, method: str, path: str, body: dict | None) -> tuple[int, dict]:
        established = {"conditions": [{"type": "Established", "status": "True"}]}
        if method == "POST":
            self.writes += 1
            self.crds[body["metadata"]["name"]] = {**body, "status": established}
            return 201, self.crds[body["metadata"]["name"]]
        if path == crds.CRDS:
            return 200, {"items": list(self.crds.values())}
        if path.startswith(crds.CRDS + "/"):
            name = path.rpartition("/")[2]
            return (200, self.crds[name]) if name in self.crds else (404, {})
        return 200, {"resources": [{"name": c["spec"]["names"]["plural"]} for c in self.crds.values()]}


def test_an_install_of_unchanged_files_writes_nothing(tmp_path: Path) -> None:
    crd = {**CRD, "spec": {"group": "example.com", "names": {"plural": "widgets"},
                           "versions": [{"name": "v1", "served": True}]}}
    (tmp_path / "crds").mkdir()
    f = tmp_path / "crds" / "w.json"
    f.write_text(json.dumps(crd))
    api, record = FakeAPI(), tmp_path / "crds.json"
    assert crds.install(api, [f], record=record) == ["widgets.example.com"]
    assert crds.install(api, [f], record=record) == ["widgets.example.com"]
    assert api.writes == 1  # the second found the fingerprint and the CRD Established
    api.crds.clear()  # the cluster lost them (a fresh etcd): written again
    crds.install(api, [f], record=record)
    assert api.writes == 2
    f.write_text(json.dumps({**crd, "metadata": {"name": "widgets.example.com", "labels": {"a": "b"}}}))
    crds.install(api, [f], record=record)
    assert api.writes == 3  # the file changed
    crds.install(api, [f])
    assert api.writes == 4  # no record: always written
