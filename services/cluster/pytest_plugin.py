"""apiary as the test cluster of a pytest session: envtest for Python, with the controllers running.

Registered as the `pytest11` entry point `apiary` (or loaded with `-p services.cluster.pytest_plugin`).
Loading it starts nothing: the cluster starts when a test first asks for one of its fixtures.

Fixtures: `apiary_cluster` (session: kubeconfig, server URL, CA, an admin httpx client),
`k8s_api_client` (the official client's ApiClient), `k8s_async_api_client` (kubernetes_asyncio's,
when it and pytest-asyncio are installed), `apiary_namespace` (a fresh namespace per test, deleted and
waited for until gone) and `apiary_webhooks` (services.cluster.webhooks for the session).

Options (command line, or the ini option named in brackets): --apiary-crds PATH [apiary_crds]:
CRD files or directories, installed and Established before the first test; --apiary-kubeconfig
[apiary_kubeconfig]: use that cluster instead of starting one (envtest's USE_EXISTING_CLUSTER);
--apiary-reuse [apiary_reuse]: leave the cluster running at the end and attach to it next time;
--apiary-state DIR [apiary_state]: its state directory (default: a temporary one, or
.apiary-pytest under the rootdir with --apiary-reuse); --apiary-profile compact|full [apiary_profile]:
how a started cluster lays out its services (default compact: every service in one host process, a
third of the memory; full: one process each, as `make run`). A failing test that used the cluster gets
the tail of what each service logged during it as report sections.
"""
from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from . import clientcmd, crds
from .stack import COMPACT, COMPACT_SERVICES, PROFILES, Stack
from .webhooks import WebhookInstallOptions

FIXTURES = frozenset({"apiary_cluster", "k8s_api_client", "k8s_async_api_client", "apiary_namespace",
                      "apiary_webhooks"})
LOG_LINES = 40  # per service, in a failed test's report
NOT_SERVICE_LOGS = frozenset({"audit.log"})  # the audit trail: events, not what a service said
NAMESPACE_GONE_TIMEOUT = 60.0
CLUSTER = pytest.StashKey["ApiaryCluster"]()
LOG_MARKS = pytest.StashKey[dict[str, int]]()


@dataclass
class ApiaryCluster:
    """The session's cluster: what a test needs to reach it."""

    kubeconfig: Path
    server: str
    ca_file: Path | None
    config: clientcmd.ClientConfig
    client: httpx.Client  # the kubeconfig's identity (admin for a started cluster)
    stack: Stack | None = None  # None: an existing cluster (--apiary-kubeconfig)
    crds: list[str] = field(default_factory=list)

    @property
    def ca_key_file(self) -> Path | None:
        """The cluster CA's key (a started cluster's), to sign client certificates of test users."""
        return self.stack.state / "pki" / "ca.key" if self.stack else None

    @property
    def logs(self) -> Path | None:
        return self.stack.logs if self.stack else None

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        """One request as crds.install makes them: (HTTP status, decoded answer)."""
        r = self.client.request(method, path, json=body)
        try:
            return r.status_code, dict(r.json()) if r.content else {}
        except ValueError:
            return r.status_code, {"message": r.text}

    def log_sizes(self) -> dict[str, int]:
        return {p.name: p.stat().st_size for p in self._log_files()}

    def _log_files(self) -> list[Path]:
        if self.logs is None:
            return []
        return sorted(p for p in self.logs.glob("*.log") if p.name not in NOT_SERVICE_LOGS)

    def log_tails(self, since: dict[str, int]) -> list[tuple[str, str]]:
        """What each service logged after `since` (file sizes), its last LOG_LINES lines; the compact
        host's log is told apart by the logger that wrote each line (by_service)."""
        out = []
        for path in self._log_files():
            with path.open("rb") as f:
                f.seek(since.get(path.name, 0))
                lines = f.read().decode(errors="replace").splitlines()
            parts = by_service(lines) if path.stem == COMPACT else {path.stem: lines}
            out += [(name, "\n".join(part[-LOG_LINES:])) for name, part in parts.items() if part]
        return out


# "<date> <time> compact LEVEL services.<service>.<module>: ..." (runtime.setup_logging's format)
LOGGER = re.compile(r"^\S+ \S+ \S+ [A-Z]+ services\.(\w+)")


def by_service(lines: list[str]) -> dict[str, list[str]]:
    """The compact host's lines per service, by the package of the logger that wrote them (a
    traceback's lines go with the line before); the shared library's lines under COMPACT."""
    parts: dict[str, list[str]] = {}
    current = COMPACT
    for line in lines:
        if m := LOGGER.match(line):
            current = m.group(1) if m.group(1) in COMPACT_SERVICES else COMPACT
        elif line[:4].isdigit():
            current = COMPACT
        parts.setdefault(current, []).append(line)
    return parts


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("apiary", "apiary: a Kubernetes API server for the tests")
    group.addoption("--apiary-crds", action="append", default=[], metavar="PATH",
                    help="CRD file or directory to install before the first test (repeatable)")
    group.addoption("--apiary-kubeconfig", metavar="FILE",
                    help="use the cluster of this kubeconfig instead of starting apiary")
    group.addoption("--apiary-reuse", action="store_true", default=None,
                    help="keep the cluster running after the session and attach to it next time")
    group.addoption("--apiary-state", metavar="DIR", help="the started cluster's state directory")
    group.addoption("--apiary-profile", choices=PROFILES,
                    help="compact (default): every service in one host process; full: one process each")
    parser.addini("apiary_crds", "CRD files or directories to install before the first test", type="paths")
    parser.addini("apiary_kubeconfig", "use the cluster of this kubeconfig instead of starting apiary")
    parser.addini("apiary_reuse", "keep the cluster between sessions", type="bool", default=False)
    parser.addini("apiary_state", "the started cluster's state directory")
    parser.addini("apiary_profile", "compact (default) or full: the started cluster's processes", default=COMPACT)


@dataclass(frozen=True)
class Options:
    crds: list[Path]
    kubeconfig: Path | None
    reuse: bool
    state: Path | None
    profile: str = COMPACT


def options(config: pytest.Config) -> Options:
    ini_dir = config.inipath.parent if config.inipath else config.rootpath

    def path(cli: str | None, ini: str) -> Path | None:
        if cli:
            return Path(cli).resolve()
        value = config.getini(ini)
        return (ini_dir / value).resolve() if value else None

    reuse = config.getoption("apiary_reuse")
    return Options(
        crds=[Path(p).resolve() for p in config.getoption("apiary_crds")] + list(config.getini("apiary_crds")),
        kubeconfig=path(config.getoption("apiary_kubeconfig"), "apiary_kubeconfig"),
        reuse=bool(config.getini("apiary_reuse") if reuse is None else reuse),
        state=path(config.getoption("apiary_state"), "apiary_state"),
        profile=config.getoption("apiary_profile") or config.getini("apiary_profile"),
    )


def pytest_configure(config: pytest.Config) -> None:
    # a CRD file that does not parse fails the session at once, before collection (no cluster needed)
    if (profile := options(config).profile) not in PROFILES:
        raise pytest.UsageError(f"apiary: apiary_profile = {profile!r}: one of {', '.join(PROFILES)}")
    try:
        for path in crds.files(options(config).crds):
            crds.read(path)
    except crds.CRDError as e:
        raise pytest.UsageError(f"apiary: {e}") from None


def _start(opts: Options, factory: pytest.TempPathFactory, rootpath: Path) -> Stack:
    """A cluster on ports the OS chooses (so that sessions run side by side); with reuse, the one
    the state directory records when it still runs, and detached, so that it outlives the session."""
    state = opts.state or (rootpath / ".apiary-pytest" if opts.reuse else factory.mktemp("apiary"))
    stack = Stack(state, aggregated=[], free_ports=True, detach=opts.reuse, profile=opts.profile)
    if opts.reuse and stack.ports and stack.ready():
        return stack
    try:
        stack.start(fresh=not opts.reuse)
    except SystemExit as e:
        pytest.exit(f"apiary did not start: {e} (logs in {stack.logs})", returncode=pytest.ExitCode.INTERNAL_ERROR)
    return stack


def _cluster(kubeconfig: Path, files: Path, stack: Stack | None) -> ApiaryCluster:
    config = clientcmd.load(kubeconfig, files)
    return ApiaryCluster(kubeconfig=kubeconfig, server=config.server, ca_file=config.ca_file, config=config,
                         client=config.client(), stack=stack)


@pytest.fixture(scope="session")
def apiary_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiaryCluster]:
    """The cluster: started (or reattached with --apiary-reuse), or the one of --apiary-kubeconfig;
    the CRDs of the options installed and Established."""
    config = request.config
    opts = options(config)
    stack: Stack | None = None
    kubeconfig = opts.kubeconfig
    if kubeconfig is None:
        stack = _start(opts, tmp_path_factory, config.rootpath)
        kubeconfig = stack.kubeconfig
    cluster = _cluster(kubeconfig, tmp_path_factory.mktemp("apiary-kubeconfig"), stack)
    config.stash[CLUSTER] = cluster
    try:
        try:
            cluster.crds = crds.install(cluster.api, opts.crds, record=stack.crd_record if stack else None)
        except crds.CRDError as e:
            pytest.exit(f"apiary: {e}", returncode=pytest.ExitCode.USAGE_ERROR)
        yield cluster
    finally:
        del config.stash[CLUSTER]
        cluster.client.close()
        if stack is not None and not opts.reuse:
            stack.stop(quiet=True)


@pytest.fixture(scope="session")
def k8s_api_client(apiary_cluster: ApiaryCluster) -> Iterator[Any]:
    """An official `kubernetes` ApiClient for the cluster."""
    kubernetes = pytest.importorskip("kubernetes")
    client = kubernetes.config.new_client_from_config(config_file=str(apiary_cluster.kubeconfig))
    try:
        yield client
    finally:
        client.close()


try:
    import pytest_asyncio
except ImportError:
    @pytest.fixture
    def k8s_async_api_client() -> None:
        """A kubernetes_asyncio ApiClient for the cluster (needs pytest-asyncio)."""
        pytest.skip("k8s_async_api_client needs pytest-asyncio")
else:
    @pytest_asyncio.fixture
    async def k8s_async_api_client(apiary_cluster: ApiaryCluster) -> Any:
        """A kubernetes_asyncio ApiClient for the cluster (skipped when kubernetes_asyncio is not installed)."""
        pytest.importorskip("kubernetes_asyncio")
        from kubernetes_asyncio import config as async_config

        client = await async_config.new_client_from_config(config_file=str(apiary_cluster.kubeconfig))
        try:
            yield client
        finally:
            await client.close()


def namespace_name(test: str) -> str:
    """A DNS label from the test's name, unique per call."""
    base = re.sub(r"[^a-z0-9-]+", "-", test.lower()).strip("-")[:50].rstrip("-") or "test"
    return f"{base}-{uuid.uuid4().hex[:6]}"


def wait_gone(client: httpx.Client, path: str, timeout: float) -> None:
    """Until GET path answers 404 (a namespace's deletion completes when the namespace controller has
    emptied it and removed its finalizer)."""
    deadline = time.monotonic() + timeout
    while True:
        r = client.get(path)
        if r.status_code == 404:
            return
        if time.monotonic() > deadline:
            status = r.json().get("status") if r.status_code == 200 else r.text
            raise TimeoutError(f"{path} still there after {timeout:.0f} s: {status}")
        time.sleep(0.1)


@pytest.fixture
def apiary_namespace(apiary_cluster: ApiaryCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for the test; deleted at teardown and waited for until really gone."""
    name = namespace_name(request.node.name)
    client = apiary_cluster.client
    r = client.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    if r.status_code != 201:
        raise RuntimeError(f"namespace {name}: {r.status_code} {r.text}")
    yield name
    r = client.delete(f"/api/v1/namespaces/{name}")
    if r.status_code not in (200, 202, 404):
        raise RuntimeError(f"deleting namespace {name}: {r.status_code} {r.text}")
    wait_gone(client, f"/api/v1/namespaces/{name}", NAMESPACE_GONE_TIMEOUT)


@pytest.fixture(scope="session")
def apiary_webhooks(apiary_cluster: ApiaryCluster,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebhookInstallOptions]:
    """Serving certificate, port and registration of the session's webhooks; removed at the end."""
    hooks = WebhookInstallOptions(apiary_cluster.client, tmp_path_factory.mktemp("webhooks"))
    try:
        yield hooks
    finally:
        hooks.uninstall()


def _uses_cluster(item: pytest.Item) -> bool:
    return bool(FIXTURES.intersection(getattr(item, "fixturenames", ())))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    cluster = item.config.stash.get(CLUSTER, None)
    if cluster is not None and _uses_cluster(item):
        item.stash[LOG_MARKS] = cluster.log_sizes()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    cluster = item.config.stash.get(CLUSTER, None)
    if report.failed and report.when in ("setup", "call") and cluster is not None and _uses_cluster(item):
        for name, text in cluster.log_tails(item.stash.get(LOG_MARKS, {})):
            report.sections.append((f"apiary log: {name}", text))
