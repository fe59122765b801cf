"""The tuner end to end: recommend, cooldown, auto behind the what-if gate, weight in the store."""

from __future__ import annotations

from tests.integration.obs_env import AUTH, CONFIG, job, seeded_env

# cv may use 16 CU: four V100 at 4 CU/card, five at 3.2 (of eight cards: quota-bound)
QUOTA_CONFIG = CONFIG.replace(
    "{name: cv, pool: inference, quota_units: 1000", "{name: cv, pool: inference, quota_units: 16"
).replace("{name: v100-0, gpu_type: v100, gpus: 4", "{name: v100-0, gpu_type: v100, gpus: 8")
assert QUOTA_CONFIG.count("gpus: 8") == 1 and "quota_units: 16" in QUOTA_CONFIG


def running(env) -> int:
    items = env.get("/v1/jobs", team="cv", limit=100)["items"]
    return sum(1 for j in items if j["status"] in ("admitted", "running"))


def test_tuner_recommend_cooldown_then_auto_applies_through_the_store():
    with seeded_env(QUOTA_CONFIG) as env:
        c = env.client
        # knobs: admin only, validated
        r = c.put("/v1/tuning", json={"max_step": 2}, headers=AUTH)
        assert r.status_code == 422 and "max_step" in r.json()["detail"]
        r = c.put("/v1/tuning", json={"mode": "sometimes"}, headers=AUTH)
        assert r.status_code == 422 and "mode" in r.json()["detail"]
        assert c.put("/v1/tuning", json={"mode": "auto"}).status_code == 401
        r = c.put("/v1/tuning", json={"inference_pools": ["nope"]}, headers=AUTH)
        assert r.status_code == 422
        assert r.json()["detail"] == "inference_pools: unknown pool(s) nope"
        r = c.put("/v1/tuning", json={"bogus": 1}, headers=AUTH)
        assert r.status_code == 422 and "bogus" in r.json()["detail"]
        r = c.put(
            "/v1/tuning", json={"mode": "recommend", "inference_pending_threshold": 4}, headers=AUTH
        )
        assert r.status_code == 200
        body = r.json()
        assert body["config"]["mode"] == "recommend"
        assert body["config"]["cooldown_s"] == 3600 and body["config"]["max_step"] == 0.2
        assert body["weights"] == {"a100": 10.0, "v100": 4.0}

        # no trigger yet
        d = c.post("/v1/tuning/evaluate", headers=AUTH).json()
        assert d["action"] == "no_trigger"
        for i in range(9):
            env.submit(job(f"serve-{i}", "cv", 1, "v100", duration=600))
        env.advance(5)
        env.dispatch()
        assert running(env) == 4  # quota 16 CU / 4 CU per card

        # 5 pending > 4: a proposal with its trigger and figures, nothing changed
        d = c.post("/v1/tuning/evaluate", headers=AUTH).json()
        assert d["action"] == "proposed", d["message"]
        assert d["triggers"][0]["kind"] == "inference_pending"
        assert d["triggers"][0]["figures"]["pending"] == 5
        assert d["gate"]["passed"] is True
        assert d["gate"]["after"]["wait_p99_s"] < d["gate"]["before"]["wait_p99_s"]
        assert {x["gpu_type"]: x["new"] for x in d["changes"]}["v100"] == 3.2
        got = env.get("/v1/tuning")
        assert got["weights"]["v100"] == 4.0
        assert got["last_proposal"]["at"] == d["at"] and got["last_change"] is None
        hist = env.get("/v1/tuning/history")["items"]
        assert [h["action"] for h in hist] == ["proposed"]

        # within the cooldown: evaluated, not recorded
        c.put("/v1/tuning", json={"mode": "auto"}, headers=AUTH)
        env.advance(600)
        d = c.post("/v1/tuning/evaluate", headers=AUTH).json()
        assert d["action"] == "cooldown"
        assert len(env.get("/v1/tuning/history")["items"]) == 1
        assert env.get("/v1/tuning")["last_decision"]["action"] == "cooldown"

        # after the cooldown, auto: the gate passes, the weight changes in the store
        env.advance(3000)
        d = c.post("/v1/tuning/evaluate", headers=AUTH).json()
        assert d["action"] == "applied", d["message"]
        assert env.get("/v1/gpu-types/v100")["weight"] == 3.2
        got = env.get("/v1/tuning")
        assert got["base_weights"]["v100"] == 4.0 and got["last_change"]["at"] == d["at"]
        hist = env.get("/v1/tuning/history")["items"]
        assert [h["action"] for h in hist] == ["applied", "proposed"]
        assert hist[0]["triggers"] and hist[0]["gate"]["before"]["jobs"] > 0
        assert 'gpuq_tuner_weight{gpu_type="v100"} 3.2' in c.get("/metrics", headers=AUTH).text
        # and the dispatcher now fits a fifth job in the same quota
        env.advance(1)
        env.dispatch()
        assert running(env) == 5
        # the dashboard page shows the change
        page = c.get("/ui/tuning", headers=AUTH).text
        assert "v100 4→3.2" in page and "applied" in page


def test_training_wait_trigger_uses_the_real_wait():
    with seeded_env() as env:
        c = env.client
        env.submit(job("hold", "nlp", 2, "a100", duration=7200))
        env.submit(job("starved", "nlp", 3, "a100"))  # one whole A100 left: waits
        env.dispatch()
        env.advance(3600)
        d = c.post("/v1/tuning/evaluate", headers=AUTH).json()
        assert d["action"] == "no_trigger"  # exactly an hour is not "more than 1 hour"
        env.advance(1)
        d = c.post("/v1/tuning/evaluate", headers=AUTH).json()
        # default mode recommend; the job waits for cards a 2 h job holds, so no weight helps:
        # the replay says so and the evaluation is recorded as rejected, not advised
        assert d["action"] == "rejected", d["message"]
        assert d["gate"]["before"]["wait_p99_s"] == d["gate"]["after"]["wait_p99_s"]
        trig = d["triggers"][0]
        assert trig["kind"] == "training_wait" and trig["up"] == ["a100"]
        assert trig["figures"]["wait_s"] == 3601
        assert env.get("/v1/tuning")["weights"] == {"a100": 10.0, "v100": 4.0}
        assert env.get("/v1/tuning/history", action="rejected")["items"][0]["at"] == d["at"]
