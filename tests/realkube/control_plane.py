"""A real Kubernetes control plane for the tests: etcd, kube-apiserver,
kube-controller-manager and kwok (simulated kubelets), started from binaries.

The binaries come from ``KUBEBUILDER_ASSETS`` (controller-runtime envtest's convention,
so ``setup-envtest`` plus a kwok binary serve as well), else from ``.kube-bin`` at the
repository root, which ``make kube-bin`` fills (tools/kube/build.sh, versions pinned in
tools/kube/*/go.mod). One control plane serves a whole test session (starting one costs
seconds); tests isolate themselves by namespace and by the names of their Nodes.

What is switched on, and why:

* kube-apiserver with ServiceAccount token signing (gpuq authenticates with a token of
  its own ServiceAccount, issued by the TokenRequest API), RBAC as the only authorizer
  (gpuq's rights are exactly k8s/rbac.yaml), and the admission chain of a real cluster
  (NamespaceLifecycle, ServiceAccount, Pod Security, DefaultTolerationSeconds with short
  tolerations so node loss evicts in seconds, Priority, ResourceQuota).
* kube-controller-manager with the controllers whose work gpuq sees: Job, PodGC (its
  terminated-Pod threshold low), node lifecycle and taint eviction (a Node whose lease
  is not renewed goes NotReady and its Pods are evicted with a DisruptionTarget
  condition), ServiceAccount and namespace (per-test namespaces are created and deleted).
* kwok managing every Node, moving Pods through tests/realkube/kwok-stages.yaml.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.ports import free_port

REPO = Path(__file__).resolve().parents[2]
STAGES = Path(__file__).with_name("kwok-stages.yaml")
REQUIRED = ("etcd", "kube-apiserver", "kube-controller-manager", "kwok")
OPTIONAL = ("kube-scheduler",)  # Pods of other workloads get placed when present
#: Nodes kwok simulates carry this label (tests/realkube/fixtures.py adds it).
KWOK_NODE_LABEL = "kwok.gpuq.test/managed"
#: How long a lost node's Pods keep running before taint eviction (DefaultTolerationSeconds).
UNREACHABLE_TOLERATION_S = 2
#: kube-controller-manager's node-monitor-grace-period: a lease older than this -> NotReady.
NODE_MONITOR_GRACE_S = 6
#: How long a test waits for the taint eviction of a lost node's Pods. kwok's lease (4 s)
#: lapses, node-monitor-grace-period (6 s) marks the node Unknown, the node lifecycle
#: controller taints it, and DefaultTolerationSeconds (2 s) later its Pods are deleted:
#: about 10-15 s on a quiet machine. On a loaded one kwok can miss the renewals of every
#: Node at once (one process renews them all). The node lifecycle controller then sees
#: every Node NotReady, enters "master disruption mode" and evicts nothing until some Node
#: is Ready again; its grace period then starts over (handleDisruption in
#: pkg/controller/nodelifecycle/node_lifecycle_controller.go). Seen in a CI run on
#: 2026-12-07; with kwok stopped (SIGSTOP) for 12 s the eviction came 12.5 s after it
#: resumed. Hence the generous bound.
LOSS_PATIENCE_S = 120.0


class MissingBinaries(RuntimeError):
    """The control plane's binaries are not there (the message says how to get them)."""


def assets_dir() -> Path:
    """KUBEBUILDER_ASSETS, else the repository's .kube-bin."""
    env = os.environ.get("KUBEBUILDER_ASSETS")
    return Path(env) if env else REPO / ".kube-bin"


def find_binaries(names: tuple[str, ...] = REQUIRED, need: bool = True) -> dict[str, Path]:
    """The binaries ``names`` found in :func:`assets_dir` (all of them, when ``need``)."""
    d = assets_dir()
    missing = [n for n in names if not (d / n).is_file()]
    if missing and need:
        raise MissingBinaries(
            f"real control plane binaries missing from {d}: {', '.join(missing)} "
            "(build them with `make kube-bin`, needs Go and the Go module proxy; or point "
            "KUBEBUILDER_ASSETS at a folder holding them)"
        )
    return {n: d / n for n in names if n not in missing}


def _kubeconfig(url: str, token: str) -> str:
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": url,
                                                 "insecure-skip-tls-verify": True}}],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
    })


@dataclass
class ControlPlane:
    """Processes of one control plane; :meth:`start` returns when the API answers."""

    workdir: Path
    bins: dict[str, Path] = field(default_factory=lambda: {**find_binaries(OPTIONAL, need=False),
                                                             **find_binaries()})
    admin_token: str = "gpuq-test-admin"
    #: kwok's node lease; the node-loss tests need it short, a benchmark with 1,000 Nodes
    #: long (every renewal is a write the control plane pays for)
    node_lease_s: int = 4
    node_grace_s: int = NODE_MONITOR_GRACE_S
    #: kube-scheduler's client rate limit (0: its defaults, 50 QPS / burst 100)
    scheduler_qps: int = 0
    url: str = ""
    kubeconfig: Path | None = None
    #: how often :meth:`restart_kwok` replaced kwok (each old log is kept, kwok.log.N)
    kwok_restarts: int = 0
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def _spawn(self, name: str, args: list[str]) -> None:
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 (lives with the process)
        self.procs[name] = subprocess.Popen(
            dies_with_parent([str(self.bins[name]), *args]), stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )

    def log_lines(self, name: str) -> list[str]:
        """The lines ``name`` has logged so far (none before it started)."""
        p = self.workdir / f"{name}.log"
        return p.read_text(errors="replace").splitlines() if p.exists() else []

    def log_tail(self, name: str, lines: int = 30) -> str:
        return "\n".join(self.log_lines(name)[-lines:])

    def _wait(self, name: str, ready, timeout_s: float = 90.0) -> None:  # noqa: ANN001
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            proc = self.procs[name]
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited {proc.returncode}:\n{self.log_tail(name)}")
            with contextlib.suppress(OSError, urllib.error.URLError):
                if ready():
                    return
            time.sleep(0.2)
        raise RuntimeError(f"{name} not ready after {timeout_s:.0f} s:\n{self.log_tail(name)}")

    def _get(self, url: str, token: str | None = None) -> int:
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"}
                                     if token else {})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=5) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def start(self) -> ControlPlane:
        w = self.workdir
        subprocess.run(["openssl", "genrsa", "-out", str(w / "sa.key"), "2048"], check=True,
                       capture_output=True)
        subprocess.run(["openssl", "rsa", "-in", str(w / "sa.key"), "-pubout", "-out",
                        str(w / "sa.pub")], check=True, capture_output=True)
        (w / "tokens.csv").write_text(f'{self.admin_token},admin,admin-uid,"system:masters"\n')
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        self._spawn("etcd", [
            "--data-dir", str(w / "etcd"), "--listen-client-urls", etcd_url,
            "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-cluster", f"default=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync", "--log-level", "warn",
        ])
        self._wait("etcd", lambda: self._get(f"{etcd_url}/health") == 200)
        self.url = f"https://127.0.0.1:{api_port}"
        self._spawn("kube-apiserver", [
            "--etcd-servers", etcd_url, "--bind-address", "127.0.0.1",
            "--secure-port", str(api_port), "--cert-dir", str(w / "apiserver-certs"),
            "--token-auth-file", str(w / "tokens.csv"),
            "--authorization-mode", "RBAC",
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", str(w / "sa.pub"),
            "--service-account-signing-key-file", str(w / "sa.key"),
            "--service-cluster-ip-range", "10.96.0.0/16",
            "--enable-admission-plugins", "NamespaceLifecycle,ServiceAccount,PodSecurity,"
            "DefaultTolerationSeconds,Priority,ResourceQuota,LimitRanger",
            "--default-not-ready-toleration-seconds", str(UNREACHABLE_TOLERATION_S),
            "--default-unreachable-toleration-seconds", str(UNREACHABLE_TOLERATION_S),
            "--watch-cache=true", "--v", "1",
        ])
        self._wait("kube-apiserver",
                   lambda: self._get(f"{self.url}/readyz", self.admin_token) == 200)
        self.ca_file = w / "apiserver-certs" / "apiserver.crt"
        kubeconfig = w / "admin.kubeconfig"
        kubeconfig.write_text(_kubeconfig(self.url, self.admin_token))
        self.kubeconfig = kubeconfig
        kcm_port = free_port()
        self._spawn("kube-controller-manager", [
            "--kubeconfig", str(kubeconfig), "--authentication-kubeconfig", str(kubeconfig),
            "--authorization-kubeconfig", str(kubeconfig),
            "--bind-address", "127.0.0.1", "--secure-port", str(kcm_port),
            "--cert-dir", str(w / "kcm-certs"), "--leader-elect=false",
            "--controllers", "job-controller,pod-garbage-collector-controller,"
            "node-lifecycle-controller,taint-eviction-controller,serviceaccount-controller,"
            "namespace-controller,garbage-collector-controller,disruption-controller",
            "--node-monitor-period", "1s",
            "--node-monitor-grace-period", f"{self.node_grace_s}s",
            "--terminated-pod-gc-threshold", "50",
            "--concurrent-gc-syncs", "2", "--v", "1",
        ])
        self._wait("kube-controller-manager",
                   lambda: self._get(f"https://127.0.0.1:{kcm_port}/healthz") == 200)
        if "kube-scheduler" in self.bins:
            # the default scheduler places Pods of other workloads (not gpuq's: those
            # name schedulerName gpuq and are bound by gpuq)
            self._spawn("kube-scheduler", [
                "--kubeconfig", str(kubeconfig), "--authentication-kubeconfig", str(kubeconfig),
                "--authorization-kubeconfig", str(kubeconfig), "--leader-elect=false",
                "--bind-address", "127.0.0.1", "--secure-port", str(free_port()), "--v", "1",
                *([f"--kube-api-qps={self.scheduler_qps}",
                   f"--kube-api-burst={self.scheduler_qps}"] if self.scheduler_qps else []),
            ])
        self._start_kwok()
        return self

    def _start_kwok(self) -> None:
        assert self.kubeconfig is not None
        self._spawn("kwok", [
            "--kubeconfig", str(self.kubeconfig), "--config", str(STAGES),
            "--manage-nodes-with-label-selector", f"{KWOK_NODE_LABEL}=true",
            "--server-address", f"127.0.0.1:{free_port()}",
            "--node-lease-duration-seconds", str(self.node_lease_s),
            "--cidr", "10.244.0.0/16", "--node-ip", "10.0.0.1",
        ])
        time.sleep(0.5)
        if self.procs["kwok"].poll() is not None:
            raise RuntimeError(f"kwok exited:\n{self.log_tail('kwok')}")

    def restart_kwok(self) -> None:
        """A new kwok process in place of the running one, its log kept as kwok.log.N:
        all the simulated kubelets restart together (fixtures.RealKube.heal_heartbeats)."""
        proc = self.procs["kwok"]
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)  # a stopped process takes SIGTERM only then
        _end(proc)
        self.kwok_restarts += 1
        log = self.workdir / "kwok.log"
        log.rename(log.with_name(f"kwok.log.{self.kwok_restarts}"))
        self._start_kwok()

    def stop(self) -> None:
        for name in ("kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver",
                     "etcd"):
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is None:
                _end(proc)

    def cpu_seconds(self) -> dict[str, float]:
        """User + system CPU seconds each component has used so far (/proc/PID/stat),
        so a benchmark can report what the control plane itself cost."""
        tick = os.sysconf("SC_CLK_TCK")
        out = {}
        for name, proc in self.procs.items():
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
                out[name] = (int(fields[11]) + int(fields[12])) / tick
        return out

    def check_alive(self) -> None:
        """Every component still running (a test's failure should say which one died)."""
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited {proc.returncode}:\n{self.log_tail(name)}")


def _end(proc: subprocess.Popen) -> None:
    """SIGTERM, and SIGKILL after 10 s without an exit."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


#: util-linux's setpriv (Debian's util-linux, an essential package), for dies_with_parent
SETPRIV = shutil.which("setpriv")


def dies_with_parent(argv: list[str]) -> list[str]:
    """``argv`` started through ``setpriv --pdeathsig KILL``: the kernel kills the process
    when the one that started it dies, even by SIGKILL, where ``atexit`` does not run
    (a pytest or benchmark killed from outside left etcd, the API server, the controllers
    and kwok running). The signal follows the starting *thread*, so these are started from
    the main thread. Without setpriv, ``argv`` unchanged (then only ``atexit`` stops them)."""
    return [SETPRIV, "--pdeathsig", "KILL", "--", *argv] if SETPRIV else argv


@contextlib.contextmanager
def running_control_plane(**options: int) -> Iterator[ControlPlane]:
    """A started :class:`ControlPlane` (``options``: its lease fields), stopped after."""
    workdir = Path(tempfile.mkdtemp(prefix="gpuq-realkube-"))
    cp = ControlPlane(workdir, **options)
    atexit.register(cp.stop)  # the processes run in sessions of their own: never orphaned
    try:
        cp.start()
        yield cp
    finally:
        cp.stop()
        if os.environ.get("GPUQ_KEEP_REALKUBE_LOGS"):
            print(f"real control plane logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
