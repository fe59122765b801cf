"""Real Slurm on this machine, replaying a scenario, beside our model of it.

The ``slurm`` baseline of ``gpuq simulate`` (app/simulate/baselines/slurm.py) is checked
against Slurm itself (Debian's ``slurmctld``/``slurmd``/``slurmdbd`` 22.05 packages). One
run of this command, all under a temporary directory and on free ports:

1. starts ``munged`` (its own socket; the key of the ``munge`` package), a MariaDB server
   on a fresh data directory and ``slurmdbd`` on it (Fair Tree needs the accounting
   database's associations: ``priority_multifactor.html``), registers the cluster and one
   account per team with ``Fairshare`` = the team's weight (``sacctmgr``), then
   ``slurmctld`` and one ``slurmd -N <node>`` per scenario node, all on this host, each
   slurmd on its own port (``NodeHostname=localhost Port=...``; Debian's build runs
   several);
2. configures Slurm as the model says it is configured (:func:`slurm_conf`; the model's
   docstring lists the options): one partition, ``select/cons_tres`` with GRES
   ``gpu:<type>`` per GPU model and the type as a node feature, ``priority/multifactor``
   with the model's weights, ``sched/backfill`` with the model's ``bf_window``,
   ``bf_max_job_test`` and ``bf_interval``, node ``Weight`` per ``node_weight``;
3. replays the scenario's jobs in compressed time: each job is ``sbatch --wrap "sleep
   <runtime / speedup>"`` at ``submit_at_s / speedup`` with ``--account`` (its team),
   ``--ntasks`` (replicas), ``--gpus-per-task``, ``--constraint`` (the types its request
   allows, all replicas on one type) and ``--time`` (the model's time limit / speedup);
4. reads each job's submit, start and end from Slurm's own records (``squeue`` with
   ``SLURM_TIME_FORMAT=%s``: whole wall seconds) and writes them as the result JSON
   ``gpuq simulate`` writes (bench/realsched.py's document: ``events``, ``gpu_types``);
   ``--compare`` runs our model on the same scenario and prints how they agree
   (bench/realsched.py's ``agreement``).

Compressed time: Slurm's time settings are whole minutes (``--time``, ``PriorityMaxAge``,
``PriorityDecayHalfLife``, ``PriorityCalcPeriod``, ``bf_window``) or whole seconds
(``bf_interval``, ``bf_resolution``), so each is the model's value divided by the speed-up
and must come out whole (:func:`compressed`); the harness refuses a scenario whose time
limits do not. ``PriorityCalcPeriod`` is at least one wall minute, which is ``speedup``
scenario minutes: at ``--speedup 5`` it is Slurm's default (5 minutes).

    nice -n 10 .venv/bin/python -m bench.realslurm eval/fidelity/slurm/backfill.yaml \\
        --speedup 5 --compare

Needs ``apt-get install -y slurmctld slurmd slurm-client slurmdbd munge mariadb-server``
and root (slurmd runs the jobs as the submitting user; here everything is root).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import platform
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from app.scheduling.filters import allowed_types
from app.simulate.all_policies import make_policy
from app.simulate.baseline_tuning import settings_arg
from app.simulate.baselines.slurm import (
    BF_INTERVAL_S,
    BF_RESOLUTION_S,
    DECAY_HALF_LIFE_S,
    DEFAULT_TIME_S,
    WEIGHT_AGE,
    WEIGHT_FAIRSHARE,
    WEIGHT_JOB_SIZE,
    SlurmSettings,
    time_limit,
)
from app.simulate.replay import SimJob, Simulator
from bench.realsched import (
    Life,
    Scenario,
    _result,
    _run,
    _stop,
    agreement,
    agreement_table,
    model_doc,
)
from tests.ports import free_port
from tests.realkube.control_plane import dies_with_parent

DAEMONS = ("munged", "mariadbd", "mariadb-install-db", "slurmdbd", "slurmctld", "slurmd",
           "sacctmgr", "sbatch", "squeue")
CLUSTER = "gpuqfidelity"
POLL_S = 0.5
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")


class MissingSlurm(RuntimeError):
    """A program the harness needs is not installed (the message names them)."""


def find_slurm() -> dict[str, str]:
    """The path of each program; MissingSlurm names what is missing and the apt line."""
    found = {p: shutil.which(p) or shutil.which(p, path="/usr/sbin:/usr/bin") for p in DAEMONS}
    missing = sorted(p for p, f in found.items() if not f)
    if missing:
        raise MissingSlurm(f"not installed: {', '.join(missing)} (apt-get install -y "
                           "slurmctld slurmd slurm-client slurmdbd munge mariadb-server)")
    if os.geteuid() != 0:
        raise MissingSlurm("slurmd must run as root to run jobs (this process is not root)")
    return {p: str(f) for p, f in found.items()}


def compressed(seconds: float, speedup: float, unit: float, what: str) -> int:
    """``seconds`` of scenario time as whole ``unit``s of wall time (60: minutes, 1:
    seconds); ValueError when it is not whole, as the comparison would then not be of the
    same setting."""
    x = seconds / speedup / unit
    if abs(x - round(x)) > 1e-6 or round(x) < 1:
        raise ValueError(f"{what}: {seconds:g} scenario s / speed-up {speedup:g} is "
                         f"{x:g} {'min' if unit == 60 else 's'}, not a whole positive "
                         "number (choose the speed-up or the time limits to make it one)")
    return round(x)


def node_weights(sc: Scenario, settings: SlurmSettings) -> dict[str, int]:
    """Node ``Weight`` per GPU type (``slurm.conf.5``: the lowest weight that satisfies
    the job is allocated first): ``speed`` -- faster types weigh more; ``fastest`` -- the
    reverse; ``none`` -- one weight. Equal speeds weigh the same (the model then keeps
    the request's type order and best fit, Slurm its node order)."""
    types = sc.model.cluster.gpu_types
    speeds = sorted({t.speed for t in types.values()})
    if settings.node_weight == "none":
        return {t: 1 for t in types}
    rank = {s: i + 1 for i, s in enumerate(speeds)}
    if settings.node_weight == "fastest":
        rank = {s: len(speeds) - i for i, s in enumerate(speeds)}
    return {name: rank[t.speed] for name, t in types.items()}


@dataclass
class Ports:
    """The ports of one run (free ones, so runs and other services do not collide)."""

    mysql: int
    dbd: int
    ctld: int
    nodes: dict[str, int] = field(default_factory=dict)


def free_ports(sc: Scenario) -> Ports:
    return Ports(free_port(), free_port(), free_port(),
                 {n.name: free_port() for n in sc.model.cluster.nodes})


def longest_limit_s(sc: Scenario, settings: SlurmSettings) -> float:
    """The model's ``bf_window``: its setting, else the longest time limit of the
    scenario's jobs and at least ``DefaultTime`` (SlurmPolicy.__call__)."""
    if settings.bf_window_s:
        return settings.bf_window_s
    predicted = settings.time_limits == "predicted"
    return max([DEFAULT_TIME_S, *(time_limit(j.request, predicted) for j in _jobs(sc))])


def _jobs(sc: Scenario) -> list[SimJob]:
    sim = Simulator(sc.model, make_policy("fifo-typed"), "fifo-typed")  # its jobs, not its run
    return sorted(sim.jobs, key=lambda j: (j.submit_s, j.index))


def slurm_conf(sc: Scenario, settings: SlurmSettings, speedup: float, work: Path,
               ports: Ports) -> str:
    """``slurm.conf`` as the model describes its Slurm (app/simulate/baselines/slurm.py),
    every time setting divided by ``speedup`` (option names and units: ``slurm.conf.5``,
    ``sched_config.html``, ``priority_multifactor.html``, ``gres.html``):

    - ``PriorityWeightFairshare``/``Age`` as the model; the model's job-size factor is
      *GPUs asked / GPUs in the cluster*, which in Slurm is the TRES factor
      (``PriorityWeightTRES=GRES/gpu=1000``: requested TRES over the partition's), not
      ``PriorityWeightJobSize`` (nodes and CPUs), so JobSize is 0;
    - usage is billed per card-second at the type's CU weight
      (``TRESBillingWeights=GRES/gpu:<type>=<weight>``; CPUs and memory 0);
    - ``PriorityCalcPeriod`` the model's (5 minutes: one wall minute at 5x, the least
      Slurm takes)."""
    m = sc.model.cluster
    mins = lambda s, what: compressed(s, speedup, 60.0, what)  # noqa: E731
    secs = lambda s, what: compressed(s, speedup, 1.0, what)  # noqa: E731
    weights = node_weights(sc, settings)
    types = sorted({n.gpu_type for n in m.nodes if n.gpu_type})
    tres = ",".join(["gres/gpu", *(f"gres/gpu:{t}" for t in types)])
    billing = ",".join(f"GRES/gpu:{t}={m.gpu_types[t].weight:g}" for t in types)
    sched = ",".join([
        f"bf_interval={secs(BF_INTERVAL_S, 'bf_interval')}",
        f"bf_resolution={secs(BF_RESOLUTION_S, 'bf_resolution')}",
        f"bf_window={mins(longest_limit_s(sc, settings), 'bf_window')}",
        f"bf_max_job_test={settings.bf_max_job_test}",
    ])
    lines = [
        f"ClusterName={CLUSTER}",
        "SlurmctldHost=localhost",
        f"SlurmctldPort={ports.ctld}",
        "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", "CredType=cred/munge",
        f"StateSaveLocation={work / 'state'}",
        f"SlurmdSpoolDir={work / 'spool' / '%n'}",
        f"SlurmctldPidFile={work / 'slurmctld.pid'}",
        f"SlurmdPidFile={work / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={work / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={work / 'log' / 'slurmd-%n.log'}",
        "SlurmctldDebug=info", "SlurmdDebug=info",
        "ProctrackType=proctrack/pgid", "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        # the nodes are configured, not probed (64 CPUs on a 2-core machine)
        "SlurmdParameters=config_overrides",
        "ReturnToService=2", "MinJobAge=86400",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory",
        "GresTypes=gpu",
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=localhost", f"AccountingStoragePort={ports.dbd}",
        f"AccountingStorageTRES={tres}",
        "AccountingStorageEnforce=associations",
        "PriorityType=priority/multifactor",
        f"PriorityWeightFairshare={WEIGHT_FAIRSHARE:.0f}",
        f"PriorityWeightAge={WEIGHT_AGE:.0f}",
        "PriorityWeightJobSize=0",
        f"PriorityWeightTRES=GRES/gpu={WEIGHT_JOB_SIZE:.0f}",
        "PriorityWeightPartition=0", "PriorityWeightQOS=0", "PriorityWeightAssoc=0",
        "PriorityFavorSmall=NO",
        f"PriorityMaxAge={mins(settings.priority_max_age_s, 'PriorityMaxAge')}",
        f"PriorityDecayHalfLife={mins(DECAY_HALF_LIFE_S, 'PriorityDecayHalfLife')}",
        f"PriorityCalcPeriod={mins(settings.priority_calc_period_s, 'PriorityCalcPeriod')}",
        "PreemptType=preempt/none",
        "SchedulerType=sched/backfill",
        f"SchedulerParameters={sched}",
        "OverTimeLimit=UNLIMITED",
    ]
    for n in m.nodes:
        mem_mb = int(n.memory_gb * 1024)
        gres = f" Gres=gpu:{n.gpu_type}:{len(n.devices)} Feature={n.gpu_type}" \
            if n.gpu_type and n.devices else ""
        lines.append(f"NodeName={n.name} NodeHostname=localhost NodeAddr=127.0.0.1 "
                     f"Port={ports.nodes[n.name]} CPUs={int(n.cpu)} RealMemory={mem_mb} "
                     f"Weight={weights.get(n.gpu_type or '', 1)}{gres} State=UNKNOWN")
    lines.append(f"PartitionName=gpus Nodes=ALL Default=YES MaxTime=INFINITE State=UP "
                 f"DefaultTime={mins(DEFAULT_TIME_S, 'DefaultTime')} "
                 f'TRESBillingWeights="{billing}"')
    return "\n".join(lines) + "\n"


def gres_conf(sc: Scenario, work: Path) -> str:
    """``gres.conf``: each node's GPUs as device files (Slurm 22.05 drops a GPU without
    ``File=``: "Removing file-less GPU"); the files are stand-ins under the work dir."""
    out = ["AutoDetect=off"]
    for n in sc.model.cluster.nodes:
        if n.gpu_type and n.devices:
            k = len(n.devices)
            out.append(f"NodeName={n.name} Name=gpu Type={n.gpu_type} "
                       f"File={work / 'dev' / n.name}/nvidia[0-{k - 1}]")
    return "\n".join(out) + "\n"


def slurmdbd_conf(work: Path, ports: Ports) -> str:
    return "\n".join([
        "AuthType=auth/munge",
        "DbdHost=localhost", f"DbdPort={ports.dbd}", "SlurmUser=root",
        f"PidFile={work / 'slurmdbd.pid'}", f"LogFile={work / 'log' / 'slurmdbd.log'}",
        "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1",
        f"StoragePort={ports.mysql}", "StorageUser=root", "StorageLoc=slurm_acct_db",
    ]) + "\n"


def sbatch_args(sc: Scenario, j: SimJob, speedup: float, settings: SlurmSettings) -> list[str]:
    """One scenario job as ``sbatch`` arguments (the model's docstring: ``--gres`` per
    replica, ``--constraint`` listing the types its request allows, the time limit)."""
    model = sc.model
    r = j.request
    if r.mig or r.gpu_share or r.gpu_units:
        raise ValueError(f"{j.spec.name}: only whole-card jobs are replayed on Slurm")
    allowed = [t.name for t in allowed_types(r, model.cluster.gpu_types, model.cluster.pools)]
    present = sorted({n.gpu_type for n in model.cluster.nodes if n.gpu_type})
    limit = time_limit(r, settings.time_limits == "predicted")
    cpus = max(1, math.ceil(r.cpu))
    args = [f"--job-name={j.spec.name}", f"--account={r.team}", "--partition=gpus",
            "--output=/dev/null", f"--ntasks={r.replicas}", f"--cpus-per-task={cpus}",
            f"--mem-per-cpu={math.ceil(r.memory_gb * 1024 / cpus)}",
            f"--time={compressed(limit, speedup, 60.0, f'{j.spec.name} time limit')}"]
    if r.gpus:
        args.append(f"--gpus-per-task={r.gpus}")
        ok = [t for t in present if t in allowed]
        if len(ok) == 1 and len(present) > 1:
            args.append(f"--constraint={ok[0]}")
        elif len(ok) > 1 and (r.replicas > 1 or len(ok) < len(present)):
            # matching OR (brackets): all the job's nodes of one type, as the model
            # places a job's replicas (allow_mixed_types off)
            args.append(f"--constraint=[{'|'.join(ok)}]")
    args.append(f"--wrap=sleep {j.runtime_s / speedup:.3f}")
    return args


# ------------------------------------------------------------------ the daemons
class Daemons:
    """The processes of one run, each started here and stopped here by its own id."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = open(self.work / "log" / f"{name}.out", "wb")  # noqa: SIM115 (lives with it)
        p = subprocess.Popen(dies_with_parent(argv), stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self.procs.append((name, p))
        return p

    def check(self) -> None:
        for name, p in self.procs:
            if p.poll() is not None:
                tail = (self.work / "log" / f"{name}.out").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{name} exited ({p.returncode}): {tail}")

    def stop(self) -> None:
        """SIGTERM to each process group (its own session), latest first, each waited
        for (slurmdbd still writes to MariaDB as it stops); SIGKILL after 10 s."""
        for _name, p in reversed(self.procs):
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)


def _wait(cond, timeout_s: float, what: str, daemons: Daemons) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        daemons.check()
        if cond():
            return
        time.sleep(0.3)
    raise TimeoutError(f"{what} not within {timeout_s:g} s")


def _call(argv: list[str], env: dict[str, str]) -> str:
    """Run a Slurm command; its stderr in the error when it fails."""
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    if p.returncode:
        raise RuntimeError(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr.strip()}"
                           f" {p.stdout.strip()}")
    return p.stdout


def _munge_works(env: dict[str, str]) -> bool:
    """A credential made and read back on munge's default socket."""
    if not MUNGE_SOCKET.exists():
        return False
    made = subprocess.run(["munge", "-n"], env=env, capture_output=True)
    if made.returncode:
        return False
    return subprocess.run(["unmunge"], input=made.stdout, env=env,
                          capture_output=True).returncode == 0


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def running_slurm(sc: Scenario, settings: SlurmSettings, speedup: float,
                  keep: Path | None = None) -> Iterator[dict[str, str]]:
    """munged, MariaDB, slurmdbd, slurmctld and a slurmd per node, configured for ``sc``;
    yields the environment for the Slurm commands (``SLURM_CONF``); everything stopped
    after, the jobs cancelled first."""
    bins = find_slurm()
    work = Path(tempfile.mkdtemp(prefix="gpuq-slurm-"))
    ports = free_ports(sc)
    for d in ("munge", "state", "log", "db"):
        (work / d).mkdir()
    for n in sc.model.cluster.nodes:
        (work / "spool" / n.name).mkdir(parents=True)
        (work / "dev" / n.name).mkdir(parents=True)
        for i in range(len(n.devices)):
            (work / "dev" / n.name / f"nvidia{i}").touch()
    (work / "munge").chmod(0o700)
    shutil.copy("/etc/munge/munge.key", work / "munge" / "munge.key")
    (work / "munge" / "munge.key").chmod(0o600)
    (work / "slurm.conf").write_text(slurm_conf(sc, settings, speedup, work, ports))
    (work / "gres.conf").write_text(gres_conf(sc, work))
    (work / "slurmdbd.conf").write_text(slurmdbd_conf(work, ports))
    (work / "slurmdbd.conf").chmod(0o600)
    env = {**os.environ, "SLURM_CONF": str(work / "slurm.conf"), "SLURM_TIME_FORMAT": "%s"}
    d = Daemons(work)
    try:
        # munge's default socket: sacctmgr ignores slurm.conf's AuthInfo=socket= (seen:
        # "Failed to access /run/munge/munge.socket.2"), so one munged serves all
        if _munge_works(env):
            pass  # the machine's munged (the same key: the munge package's)
        else:
            MUNGE_SOCKET.parent.mkdir(parents=True, exist_ok=True)
            d.start("munged", [bins["munged"], "-F", "--force", f"--socket={MUNGE_SOCKET}",
                               f"--key-file={work / 'munge' / 'munge.key'}",
                               f"--pid-file={work / 'munge' / 'pid'}",
                               f"--log-file={work / 'munge' / 'log'}",
                               f"--seed-file={work / 'munge' / 'seed'}"], env)
            _wait(lambda: _munge_works(env), 30, "munged", d)
        subprocess.run([bins["mariadb-install-db"], "--no-defaults",
                        f"--datadir={work / 'db'}", "--user=root",
                        "--auth-root-authentication-method=normal", "--skip-test-db"],
                       check=True, capture_output=True, env=env)
        d.start("mariadbd", [bins["mariadbd"], "--no-defaults", f"--datadir={work / 'db'}",
                             f"--socket={work / 'mysql.sock'}", f"--port={ports.mysql}",
                             "--bind-address=127.0.0.1", "--user=root",
                             "--innodb-buffer-pool-size=16M", "--skip-name-resolve",
                             f"--pid-file={work / 'mysql.pid'}"], env)
        _wait(lambda: _listening(ports.mysql), 60, "MariaDB", d)
        d.start("slurmdbd", [bins["slurmdbd"], "-D"], env)
        _wait(lambda: _listening(ports.dbd), 60, "slurmdbd", d)
        mgr = [bins["sacctmgr"], "-i"]
        _call([*mgr, "add", "cluster", CLUSTER], env)
        for name, team in sorted(sc.model.cluster.teams.items()):
            _call([*mgr, "add", "account", name, f"cluster={CLUSTER}",
                   f"fairshare={team.weight:g}"], env)
            _call([*mgr, "add", "user", "root", f"account={name}", f"cluster={CLUSTER}"], env)
        d.start("slurmctld", [bins["slurmctld"], "-D", "-i"], env)
        _wait(lambda: _listening(ports.ctld), 60, "slurmctld", d)
        for n in sc.model.cluster.nodes:
            d.start(f"slurmd-{n.name}", [bins["slurmd"], "-D", "-N", n.name], env)
        names = {n.name for n in sc.model.cluster.nodes}

        def idle() -> bool:
            out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=env,
                                 capture_output=True, text=True).stdout.split("\n")
            return sum(ln.split()[1] == "idle" for ln in out if ln.split()
                       and ln.split()[0] in names) == len(names)
        _wait(idle, 60, "all nodes idle", d)
        yield env
        d.check()
    finally:
        with contextlib.suppress(Exception):
            subprocess.run(["scancel", "--user=root"],
                           env=env, capture_output=True, timeout=20)
            time.sleep(1)
        d.stop()
        if keep is not None:
            shutil.copytree(work / "log", keep, dirs_exist_ok=True)
            shutil.copy(work / "slurm.conf", keep / "slurm.conf")
        shutil.rmtree(work, ignore_errors=True)


# ------------------------------------------------------------------ the replay
def replay(env: dict[str, str], sc: Scenario, settings: SlurmSettings, speedup: float,
           timeout_s: float) -> dict:
    """Replay ``sc`` on the running Slurm; the result document of ``gpuq simulate``."""
    model = sc.model
    sim = Simulator(model, make_policy("fifo-typed"), "fifo-typed")
    jobs = sorted(sim.jobs, key=lambda j: (j.submit_s, j.index))
    args = {j.spec.name: sbatch_args(sc, j, speedup, settings) for j in jobs}
    type_of_node = {n.name: n.gpu_type or "" for n in model.cluster.nodes}
    lives = {j.spec.name: Life() for j in jobs}
    by_name = {j.spec.name: j for j in jobs}
    errors: list[str] = []
    # scenario time 0 on a whole wall second: Slurm's times are whole seconds, so each
    # time read is the true one rounded down by less than one wall second
    t0 = math.floor(time.time()) + 1
    time.sleep(t0 - time.time())

    def submit() -> None:
        for j in jobs:
            delay = t0 + j.submit_s / speedup - time.time()
            if delay > 0:
                time.sleep(delay)
            p = subprocess.run(["sbatch", "--parsable", *args[j.spec.name]], env=env,
                               capture_output=True, text=True)
            if p.returncode:
                errors.append(f"sbatch {j.spec.name}: {p.stderr.strip()}")

    th = threading.Thread(target=submit, daemon=True)
    th.start()
    deadline = time.monotonic() + timeout_s
    rows: dict[str, list[str]] = {}
    failing = ""  # squeue's error while it fails; the rows it gave last stay
    while time.monotonic() < deadline and not errors:
        got = poll_squeue(env)
        if isinstance(got, str):
            failing = got
        else:
            failing, rows = "", got
            if len(rows) == len(jobs) and all(r[1] == "COMPLETED" for r in rows.values()):
                break
        time.sleep(POLL_S)
    th.join(5)
    if failing:
        errors.append(f"squeue still failed at the end of the run: {failing}")
    if errors:
        raise RuntimeError("; ".join(errors))
    events: list[dict] = []
    for name, (_n, state, start, end, nodes) in sorted(rows.items()):
        j, life = by_name[name], lives[name]
        j.status, life.pending_since = "pending", j.submit_s
        if start.isdigit() and state in ("RUNNING", "COMPLETED"):
            ts = (int(start) - t0) * speedup
            _run(j, life, ts)
            events += [{"t": ts, "type": "admit", "job": name},
                       {"t": ts, "type": "start", "job": name}]
            for node in _hostnames(env, nodes):
                life.types.append(type_of_node.get(node, ""))
            if state == "COMPLETED" and end.isdigit():
                te = (int(end) - t0) * speedup
                _stop(j, life, te, finished=True)
                events.append({"t": te, "type": "finish", "job": name})
    events.sort(key=lambda e: e["t"])
    return _result(sim, jobs, lives, events, "slurm", speedup, (time.time() - t0) * speedup)


def poll_squeue(env: dict[str, str]) -> dict[str, list[str]] | str:
    """Every job Slurm knows, by name: ``[name, state, start, end, nodes]``; or, when
    squeue fails (slurmctld down or not answering), its error. Read as "no jobs", a failed
    last call would wipe the record of the whole run and show every job never started,
    as a 0 % in the fidelity table (one run on 2026-12-07 came out so, every job still
    "waiting", with no logs kept to say why); the run now fails and says squeue's error."""
    p = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%j|%T|%S|%e|%N"], env=env,
                       capture_output=True, text=True)
    if p.returncode:
        return p.stderr.strip() or f"squeue exited with {p.returncode}"
    return {f[0]: f for f in (ln.split("|") for ln in p.stdout.splitlines()) if len(f) == 5}


def _hostnames(env: dict[str, str], nodes: str) -> list[str]:
    if not nodes or nodes == "(null)":
        return []
    out = subprocess.run(["scontrol", "show", "hostnames", nodes], env=env,
                         capture_output=True, text=True, check=True).stdout
    return out.split()


def slurm_model_doc(sc: Scenario, settings: SlurmSettings) -> dict:
    """Our model's result with these settings (realsched's ``model_doc``; a test that
    shortens ``PriorityCalcPeriod`` for its speed-up needs them)."""
    return model_doc(sc.model, "slurm", dataclasses.asdict(settings))


def run(scenario: Path, speedup: float, timeout_s: float, settings: SlurmSettings | None = None,
        keep: Path | None = None) -> dict:
    """One scenario on real Slurm: the result document (``scenario``, ``speedup`` added)."""
    settings = settings or SlurmSettings()
    sc = Scenario.load(scenario)
    for j in _jobs(sc):  # refuse before starting anything
        sbatch_args(sc, j, speedup, settings)
    with running_slurm(sc, settings, speedup, keep) as env:
        doc = replay(env, sc, settings, speedup, timeout_s)
    doc["scenario"] = str(scenario)
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scenarios", nargs="+", type=Path)
    ap.add_argument("--speedup", type=float, default=5.0,
                    help="scenario seconds per wall second (default 5: PriorityCalcPeriod "
                    "= 1 wall minute = Slurm's default 5 scenario minutes)")
    ap.add_argument("--tolerance", type=float, default=60.0,
                    help="starts this close (scenario s) agree (default 60)")
    ap.add_argument("--timeout", type=float, default=900.0, help="wall seconds per scenario")
    ap.add_argument("--compare", action="store_true", help="run our model beside, print agreement")
    ap.add_argument("--out", type=Path, help="result JSON (a folder with several scenarios)")
    ap.add_argument("--logs", type=Path, help="keep Slurm's logs and slurm.conf here")
    ap.add_argument("--slurm-settings", type=settings_arg("slurm"), default={},
                    help="the Slurm model's settings, as the tuning names them, e.g. "
                    "node_weight=fastest,priority_max_age_s=86400 (default: its defaults); "
                    "the real Slurm is configured the same way")
    ap.add_argument("--saved", type=Path, help="do not run Slurm: compare the model with "
                    "the result JSON an earlier --out wrote (a file, or a folder of "
                    "<scenario>-slurm.json)")
    a = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores (shared), "
          f"load {os.getloadavg()[0]:.1f}; speed-up {a.speedup:g}x, tolerance {a.tolerance:g} s")
    settings = SlurmSettings(**a.slurm_settings)
    rows = []
    for sc in a.scenarios:
        t = time.monotonic()
        keep = a.logs / sc.stem if a.logs else None
        if a.saved:
            f = a.saved / f"{sc.stem}-slurm.json" if a.saved.is_dir() else a.saved
            doc = json.loads(f.read_text())
        else:
            doc = run(sc, a.speedup, a.timeout, settings, keep=keep)
        s = doc["summary"]
        print(f"{sc.name}: slurm (real): {s['jobs']} jobs, {s['finished']} finished in "
              f"{time.monotonic() - t:.0f} s wall" + (f" (saved: {a.saved})" if a.saved else ""))
        if a.out and not a.saved:
            out = a.out / f"{sc.stem}-slurm.json" if len(a.scenarios) > 1 else a.out
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(doc, indent=1))
        if a.compare:
            m = slurm_model_doc(Scenario.load(sc), settings)
            ag = agreement(doc, m, a.tolerance)
            rows.append((sc.stem, s["jobs"], ag))
            for d in ag["differ"]:
                print(f"  differs: {d}")
    if rows:  # Slurm never preempts here (PreemptType=preempt/none): no victims column
        print(agreement_table(rows, a.tolerance, victims=False))


if __name__ == "__main__":
    main()
