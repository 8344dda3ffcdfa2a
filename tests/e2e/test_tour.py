"""docs/tour.md stays true: every command of its ```console blocks runs, in order, as one shell session
against the session's stack (whose ports are the tour's plus the test offset), and each command the tour
shows output for prints something. The traces it reads are the session receiver's (tests/conftest.py
`traces` writes them where `apiary up --tracing` would); the stages' span names are checked by
tests/e2e/test_tracing.py, not here."""
from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from services.cluster.stack import ROOT, Stack

TOUR = ROOT / "docs" / "tour.md"
# the local stack's default ports the tour names (etcd, the services' metrics)
PORTS = {2379, 6443, 9100, 9101, 9102, 9103, 9104, 9105, 9106}
MARK = "@@tour-command"


@dataclass
class Command:
    line: int  # where it starts in docs/tour.md
    text: str
    shows_output: bool


def commands(doc: str) -> list[Command]:
    """The commands of the ```console blocks: lines after `$ ` (continued while they end in a backslash),
    each followed by its example output, if any."""
    out: list[Command] = []
    lines = doc.splitlines()
    i, in_block = 0, False
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            in_block = line.strip() == "```console"
        elif in_block and line.startswith("$ "):
            start, text = i + 1, line[2:]
            while text.endswith("\\"):
                i += 1
                text += "\n" + lines[i]
            following = lines[i + 1] if i + 1 < len(lines) else "```"
            out.append(Command(start, text, not following.startswith(("$ ", "```"))))
        i += 1
    return out


def on_stack(text: str, offset: int) -> str:
    return re.sub(r"127\.0\.0\.1:(\d+)",
                  lambda m: f"127.0.0.1:{int(m[1]) + offset if int(m[1]) in PORTS else m[1]}", text)


def test_the_tour_parses() -> None:
    found = commands(TOUR.read_text())
    assert len(found) > 20
    assert any("--watch" in c.text for c in found) and any("kubectl create configmap" in c.text for c in found)
    assert any("traces" in c.text for c in found)


def test_every_command_of_the_tour_runs(stack: Stack) -> None:
    found = commands(TOUR.read_text())
    # each command's output after a mark on a line of its own (a newline first: jsonpath prints none)
    script = "set -e\n" + "".join(f"printf '\\n{MARK} {n}\\n'\n{on_stack(c.text, stack.offset)}\n"
                                   for n, c in enumerate(found))
    env = {**os.environ, "APIARY_STATE": str(stack.state),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("KUBECONFIG", None)
    # its own process group: the tour's background watch goes with it, however the session ends
    proc = subprocess.Popen(["bash", "-c", script], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    outputs = re.split(rf"^{MARK} (\d+)\n", stdout, flags=re.MULTILINE)[1:]
    printed = {int(n): text for n, text in zip(outputs[::2], outputs[1::2])}
    print("".join(f"$ {found[n].text}\n{text}" for n, text in printed.items()))
    ran = max(printed, default=-1)
    assert proc.returncode == 0 and ran == len(found) - 1, (
        f"docs/tour.md line {found[ran].line}: `{found[ran].text}` failed ({proc.returncode}):\n"
        f"{printed.get(ran, '')}{stderr}")
    for n, c in enumerate(found):
        if c.shows_output:
            assert printed[n].strip(), f"docs/tour.md line {c.line}: `{c.text}` printed nothing\n{stderr}"
    traced = [printed[n] for n, c in enumerate(found) if c.text.startswith("python -m services.cluster traces")]
    assert len(traced) == 2
    create, watch = traced
    for tree in traced:
        assert tree.startswith("trace ") and "\napiary-proxy: " in tree, tree
    # the create crosses the proxy, the registry, admission and storage down to etcd, in one trace
    for stage in ("apiary-proxy: POST", "apiary-registry: Create", "apiary-admission: mutating admission",
                  "apiary-storage: apiary.Storage/Create", "· etcdserverpb.KV/Txn"):
        assert stage in create, create
    assert "apiary-registry: Watch" in watch, watch
