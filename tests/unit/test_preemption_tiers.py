"""The article's tiers (app/config/tiers.yaml) end to end on a controllable clock:
P0 holds its 30%-of-A100 reservation under load, P1 yields to P0, P2 to both."""

from importlib.resources import files

from app.domain.config import load_config_text
from app.domain.from_config import cluster_model
from tests.unit.quota_sim import Sim, job


def tiers_sim() -> Sim:
    cfg = load_config_text((files("app") / "config" / "tiers.yaml").read_text())
    m = cluster_model(cfg)
    return Sim(
        nodes=m.nodes, pools=list(m.pools.values()), types=m.gpu_types, teams=m.teams,
        config={"min_run_time_s": m.scheduler.min_run_time_s,
                "thrash_window_s": m.scheduler.thrash_window_s},
    )


def a100_cu(s: Sim, pool: str) -> float:
    return sum(p.units for r in s.running.values() if r.request.pool == pool
               for p in r.placements if p.gpu_type == "a100-80g")


def test_config_is_the_article_split() -> None:
    s = tiers_sim()
    pools = {p.name: p for p in s.pools}
    total = sum(t.weight * len(n.devices) for n in s.nodes for t in [s.types.get(n.gpu_type or "")]
                if t and t.name == "a100-80g")
    assert pools["online"].guaranteed["a100-80g"] == 0.3 * total
    assert pools["finetune"].guaranteed["a100-80g"] == 0.7 * total


def test_p0_reservation_holds_under_load() -> None:
    s = tiers_sim()
    a100 = ("a100-80g",)
    # P1 floods the A100s (borrowing the idle P0 reservation), P2 the V100/4090s
    for i in range(60):
        s.submit(job(f"ft{i}", pool="finetune", team="llm", gpus=1, gpu_types=a100))
    for i in range(40):
        s.submit(job(f"etl{i}", pool="preprocess", team="etl", prio="P2", gpus=1,
                     gpu_types=("rtx4090-24g",)))
    s.cycle()
    assert a100_cu(s, "finetune") == 400  # all A100s busy: 280 own + 120 borrowed
    borrowers = {j for j, r in s.running.items() if r.leases}
    assert len(borrowers) == 12 and all(r.lender == "online" for j in borrowers
                                        for r in s.running[j].leases)
    s.advance(120)
    s.cycle()
    # P0 arrives for its whole reservation: admitted at once, only borrowers preempted
    for i in range(3):
        s.submit(job(f"rec{i}", pool="online", team="recsys", prio="P0", gpus=4,
                     gpu_types=a100))
    res = s.cycle()
    assert {a.job_id for a in res.admissions} >= {"rec0", "rec1", "rec2"}
    victims = {p.job_id for p in res.preemptions}
    assert victims <= borrowers and len(victims) == 12
    assert all(p.by_job.startswith("rec") for p in res.preemptions)
    assert a100_cu(s, "online") == 120 and a100_cu(s, "finetune") == 280
    # under continued load the reservation holds and P0 is never a victim;
    # a P0 job beyond the reservation waits instead of eating P1's guarantee
    s.submit(job("rec-extra", pool="online", team="recsys", prio="P0", gpus=1, gpu_types=a100))
    for t in range(20):
        s.submit(job(f"ft-late{t}", pool="finetune", team="llm", gpus=1, gpu_types=a100))
        s.advance(60)
        res = s.cycle()
        assert not any(p.job_id.startswith("rec") for p in res.preemptions)
        assert a100_cu(s, "online") == 120
    assert "rec-extra" in s.pending


def test_p1_preempts_p2_on_shared_v100() -> None:
    s = tiers_sim()
    for i in range(16):
        s.submit(job(f"etl{i}", pool="preprocess", team="etl", prio="P2", gpus=1,
                     gpu_types=("v100-16g",)))
    s.cycle()
    s.advance(120)
    s.submit(job("ft-v", pool="finetune", team="llm", gpus=2, gpu_types=("v100-16g",)))
    res = s.cycle()
    assert len(res.preemptions) == 2 and all(p.job_id.startswith("etl") for p in res.preemptions)
    assert "ft-v" in s.running


def test_tiers_replayed_by_the_simulator() -> None:
    """The same config through `gpuq simulate`'s replay: P0 never waits nor is
    preempted, the P1 borrowers it displaces requeue and still finish."""
    from app.simulate.all_policies import get_policy
    from app.simulate.replay import ScenarioModel, Simulator, to_json

    jobs = [f"  - {{name: ft{i}, team: llm, resources: {{gpus: 1, gpu_types: [a100-80g]}}, "
            f"submit_at_s: 0, runtime_s: 3000}}" for i in range(40)]
    jobs += [f"  - {{name: rec{i}, team: recsys, resources: {{gpus: 4, gpu_types: [a100-80g]}}, "
             f"submit_at_s: 300, runtime_s: 1000}}" for i in range(3)]
    text = (files("app") / "config" / "tiers.yaml").read_text() + "jobs:\n" + "\n".join(jobs)
    model = ScenarioModel.from_config(load_config_text(text))
    doc = to_json(Simulator(model, get_policy("gpuq"), "gpuq").run())
    by_name = {j["name"]: j for j in doc["jobs"]}
    for i in range(3):
        assert by_name[f"rec{i}"]["wait_s"] == 0 and by_name[f"rec{i}"]["preemptions"] == 0
    pre = [e for e in doc["events"] if e["type"] == "preempt"]
    assert len(pre) == 12 and all(e["by"].startswith("rec") and e["t"] == 300 for e in pre)
    assert len([e for e in doc["events"] if e["type"] == "lease_start"]) >= 12
    assert all(j["status"] == "succeeded" for j in doc["jobs"])
