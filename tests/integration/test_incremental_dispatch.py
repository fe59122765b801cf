"""The dispatcher's incremental picture and batched writes, on real PostgreSQL.

The picture must see every job change made between cycles (submits,
cancels, starts, finishes, its own decisions) - including a writer that
took its revision early and committed late - and must agree with a full
reload of the same database.
"""

from __future__ import annotations

from sqlalchemy import select

from app.dispatch.dispatcher import Dispatcher
from app.dispatch.picture import QueuePicture
from app.domain.spec import JobSpec
from app.scheduling.model import Admission, ReplicaPlacement
from app.simulate.all_policies import get_policy
from app.store import batch_states
from app.store.jobs import submit_job, submit_jobs
from app.store.orm import AllocationRow, JobEventRow, JobRow
from app.store.snapshot import build_snapshot
from app.store.state_changes import Change, apply_changes, change_state
from tests.integration.conftest import job_body


def _submit(client, admin, **kw) -> str:
    r = client.post("/v1/jobs", json=job_body(**kw), headers=admin)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _status(client, admin, job_id) -> str:
    return client.get(f"/v1/jobs/{job_id}", headers=admin).json()["status"]


def _views(session_factory, picture: QueuePicture, clock):
    """(picture's view, full reload's view): revisions, pending ids, running placements."""

    def view(ctx):
        s = ctx.snapshot
        return (
            ctx.revisions,
            sorted(r.id for r in s.pending),
            {r.request.id: (r.placements, r.leases, r.started_at) for r in s.running},
            {k: v for k, v in ctx.pending_meta.items()},
        )

    with session_factory() as s:
        inc = view(picture.refresh(s, clock()))
        s.rollback()
    with session_factory() as s:
        full = view(build_snapshot(s, clock()))
    return inc, full


def test_jobs_submitted_and_cancelled_between_cycles_are_seen(client, admin, dispatcher, clock):
    filler = _submit(client, admin, name="filler", resources={"gpus": 8, "gpu_types": ["a100-80g"]})
    dispatcher.run_once()
    assert dispatcher.picture is not None and dispatcher.picture.last.full
    assert _status(client, admin, filler) == "running"
    # w0 fits next to it; w1 waits (team nlp's quota is 150 CU: 80 + 40 + 80 > 150)
    waits = [
        _submit(client, admin, name=f"w{i}", resources={"gpus": g, "gpu_types": ["a100-80g"]})
        for i, g in enumerate((4, 8))
    ]
    dispatcher.run_once()
    assert not dispatcher.picture.last.full
    assert [_status(client, admin, j) for j in waits] == ["running", "pending"]
    r = client.post(f"/v1/jobs/{waits[1]}/cancel", headers=admin)
    assert r.status_code == 200
    clock.advance(200)  # the filler and w0 finish
    dispatcher.run_once()
    assert _status(client, admin, waits[1]) == "cancelled"
    assert int(waits[1]) not in dispatcher.picture.entries
    late = _submit(client, admin, name="late", resources={"gpus": 8, "gpu_types": ["a100-80g"]})
    dispatcher.run_once()
    assert _status(client, admin, late) == "running"
    assert not dispatcher.picture.last.full


def test_a_writer_that_commits_late_is_not_missed(session_factory, demo, clock):
    """T1 takes its revision first and commits after T2: a reader keyed on
    'revision > last seen' would skip T1's job for good; the picture must not."""
    picture = QueuePicture()
    with session_factory() as s:
        picture.refresh(s, clock())
    slow = session_factory()
    first = submit_job(slow, JobSpec.model_validate(job_body(name="slow")), now=clock()).job
    with session_factory() as fast:
        second = submit_job(fast, JobSpec.model_validate(job_body(name="fast")), now=clock()).job
        fast.commit()
        second_id = second.id
    with session_factory() as s:
        picture.refresh(s, clock())
    assert second_id in picture.entries and first.id not in picture.entries
    slow.commit()
    first_id = first.id
    slow.close()
    with session_factory() as s:
        picture.refresh(s, clock())
    assert not picture.last.full
    assert first_id in picture.entries
    assert first_id < second_id  # the slow writer's row did carry the older revision


def test_incremental_picture_matches_a_full_reload(session_factory, demo, cluster, clock):
    d = Dispatcher(session_factory, cluster, clock=clock)
    shadow = QueuePicture()  # refreshed only now and then, so it sees many changes at once
    with session_factory() as s:
        shadow.refresh(s, clock())
    teams = ["nlp", "recsys", "research"]
    types = {"nlp": "a100-80g", "recsys": "rtx4090-24g", "research": "v100-16g"}
    cancelled = 0
    for step in range(6):
        with session_factory() as s:
            specs = [
                JobSpec.model_validate(
                    job_body(
                        name=f"s{step}-{i}",
                        team=teams[i % 3],
                        resources={"gpus": 1 + i % 4, "gpu_types": [types[teams[i % 3]]]},
                        duration_estimate_s=50 + 30 * (i % 3),
                    )
                )
                for i in range(12)
            ]
            submit_jobs(s, specs, now=clock())
            s.commit()
        d.run_once()
        with session_factory() as s:  # cancel a pending job and a running one
            for status in ("pending", "running"):
                job = s.scalar(select(JobRow).where(JobRow.status == status).limit(1))
                if job is not None:
                    change_state(s, job, "cancelled", now=clock(), reason="test")
                    cancelled += 1
            s.commit()
        clock.advance(40)
        if step % 2:
            inc, full = _views(session_factory, shadow, clock)
            assert inc[:3] == full[:3]
    inc, full = _views(session_factory, d.picture, clock)
    assert inc == full
    assert cancelled >= 6 and len(full[1]) > 0 and len(full[2]) > 0


def test_cancel_between_snapshot_and_write_is_detected(
    client, admin, session_factory, cluster, clock
):
    d = Dispatcher(session_factory, cluster, clock=clock)
    victim = _submit(client, admin, name="victim")
    other = _submit(client, admin, name="other")

    def decide(snap):
        result = get_policy("gpuq")(snap)
        with session_factory() as s:  # a cancel commits while the cycle runs
            job = s.get(JobRow, int(victim))
            change_state(s, job, "cancelled", now=clock(), reason="raced")
            s.commit()
        return result

    d.run_with(decide)
    assert _status(client, admin, victim) == "cancelled"
    assert _status(client, admin, other) == "running"
    assert victim not in cluster.running_job_ids()
    with session_factory() as s:
        held = s.scalars(select(AllocationRow.job_id)).all()
    assert int(victim) not in held
    d.run_once()
    assert int(victim) not in d.picture.entries


def test_batched_transitions_write_what_change_state_writes(session_factory, demo, clock):
    """The same three transitions for one job (change_state) and as a batch
    (admit_many / apply_changes) must leave identical job rows and events."""
    with session_factory() as s:
        ids = submit_jobs(
            s, [JobSpec.model_validate(job_body(name=f"j{i}")) for i in range(2)], now=clock()
        )
        s.commit()
    clock.advance(7)
    placement = ReplicaPlacement(
        replica=0,
        node="a100-0",
        gpu_type="a100-80g",
        devices=(0, 1),
        units=20.0,
        cpu=1.0,
        memory_gb=4.0,
    )
    with session_factory() as s:
        job = s.get(JobRow, ids[0])
        rev = s.get(JobRow, ids[1]).revision
        one = Admission(str(ids[0]), (placement,))
        change_state(
            s, job, "admitted", now=clock(), units=one.units,
            data=batch_states.admission_event_data(one),
        )
        admitted = batch_states.admit_many(
            s.connection(), [(Admission(str(ids[1]), (placement,)), rev)], clock()
        )
        assert set(admitted) == {ids[1]}
        s.commit()
    clock.advance(3)
    with session_factory() as s:
        change_state(s, s.get(JobRow, ids[0]), "running", now=clock())
        s.flush()
        assert set(apply_changes(s.connection(), [Change(ids[1], "running")], clock())) == {
            ids[1]
        }
        s.commit()
    clock.advance(5)
    with session_factory() as s:
        # as the dispatcher ingests a finish: the cluster reported the pods ended
        change_state(
            s, s.get(JobRow, ids[0]), "succeeded", now=clock(), reason="done", pods_gone=True
        )
        s.flush()
        done = apply_changes(
            s.connection(),
            [Change(ids[1], "succeeded", reason="done", pods_gone=True)],
            clock(),
        )
        assert set(done) == {ids[1]}
        s.commit()
    cols = (
        "status",
        "reason",
        "units",
        "submitted_at",
        "queued_at",
        "waited_s",
        "admitted_at",
        "started_at",
        "finished_at",
        "preemption_count",
        "queue_position",
    )
    with session_factory() as s:
        a, b = (s.get(JobRow, i) for i in ids)
        assert [getattr(a, c) for c in cols] == [getattr(b, c) for c in cols]
        assert a.waited_s == 7.0 and b.revision > a.revision
        ev = {
            i: [
                (e.type, e.from_status, e.to_status, e.reason, e.at, e.data)
                for e in s.scalars(
                    select(JobEventRow).where(JobEventRow.job_id == i).order_by(JobEventRow.id)
                )
            ]
            for i in ids
        }
        assert ev[ids[0]] == ev[ids[1]]
        assert [e[0] for e in ev[ids[0]]] == ["submitted", "admitted", "running", "succeeded"]
        assert s.scalars(select(AllocationRow)).all() == []
    # a stale revision is not admitted
    with session_factory() as s:
        [jid] = submit_jobs(s, [JobSpec.model_validate(job_body(name="stale"))], now=clock())
        s.commit()
    with session_factory() as s:
        stale = batch_states.admit_many(
            s.connection(), [(Admission(str(jid), (placement,)), 1)], clock()
        )
        assert stale == {}


def test_batch_submit_endpoint(client, admin, team_token):
    body = {"jobs": [job_body(name=f"b{i}") for i in range(3)]}
    r = client.post("/v1/jobs:batch", json=body, headers=admin)
    assert r.status_code == 201, r.text
    items = r.json()["items"]
    assert [i["name"] for i in items] == ["b0", "b1", "b2"]
    for it in items:
        assert _status(client, admin, it["id"]) == "pending"
    before = len(client.get("/v1/jobs", headers=admin).json()["items"])
    bad = {"jobs": [job_body(name="ok"), job_body(name="bad", team="nope")]}
    r = client.post("/v1/jobs:batch", json=bad, headers=admin)
    assert r.status_code == 422 and "jobs[1].team" in r.json()["detail"], r.text
    r = client.post(
        "/v1/jobs:batch",
        json={"jobs": [job_body(name="x", team="recsys")]},
        headers=team_token("nlp"),
    )
    assert r.status_code in (403, 404), r.text
    assert len(client.get("/v1/jobs", headers=admin).json()["items"]) == before


def test_submit_follows_catalog_changes(client, admin):
    """The submit path caches the catalog; every change must show at the next submit."""
    body = job_body(name="v", team="vision", resources={"gpus": 1})
    r = client.post("/v1/jobs", json=body, headers=admin)
    assert r.status_code == 422 and "team" in r.json()["detail"]
    team = {"name": "vision", "pool": "inference", "default_priority": "P1"}
    assert client.post("/v1/teams", json=team, headers=admin).status_code == 201
    r = client.post("/v1/jobs", json=body, headers=admin)
    assert r.status_code == 201, r.text
    assert r.json()["priority"] == "P1" and r.json()["pool"] == "inference"
    r = client.patch("/v1/teams/vision", json={"default_priority": "P2"}, headers=admin)
    assert r.status_code == 200, r.text
    r = client.post("/v1/jobs", json=body, headers=admin)
    assert r.status_code == 201 and r.json()["priority"] == "P2"
    r = client.post("/v1/jobs", json={**body, "pool": "mixed"}, headers=admin)
    assert r.status_code == 422 and "pool" in r.json()["detail"]
    r = client.patch("/v1/teams/vision", json={"allowed_pools": ["mixed"]}, headers=admin)
    assert r.status_code == 200, r.text
    r = client.post("/v1/jobs", json={**body, "pool": "mixed"}, headers=admin)
    assert r.status_code == 201 and r.json()["pool"] == "mixed"


def test_queue_order_and_positions(client, admin, dispatcher, clock):
    filler = _submit(client, admin, name="filler", resources={"gpus": 8, "gpu_types": ["v100-16g"]})
    filler2 = _submit(client, admin, name="f2", resources={"gpus": 8, "gpu_types": ["v100-16g"]})
    dispatcher.run_once()
    assert {_status(client, admin, filler), _status(client, admin, filler2)} == {"running"}
    waiting = [
        _submit(client, admin, name=f"q{i}", resources={"gpus": 4, "gpu_types": ["v100-16g"]})
        for i in range(3)
    ]
    dispatcher.run_once()
    q = client.get("/v1/queue", headers=admin).json()
    assert [i["id"] for i in q] == waiting and [i["position"] for i in q] == [1, 2, 3]
    for pos, jid in enumerate(waiting, start=1):
        assert client.get(f"/v1/jobs/{jid}", headers=admin).json()["queue_position"] == pos
    # the head leaves the queue: the others move up at once, before the next cycle
    assert client.post(f"/v1/jobs/{waiting[0]}/cancel", headers=admin).status_code == 200
    assert client.get(f"/v1/jobs/{waiting[2]}", headers=admin).json()["queue_position"] == 2
    page = client.get("/v1/jobs", params={"status": "pending"}, headers=admin).json()["items"]
    assert {i["id"]: i["queue_position"] for i in page} == {waiting[1]: 1, waiting[2]: 2}


def test_a_pass_by_another_dispatcher_makes_the_picture_reload(
    client, admin, session_factory, cluster, clock
):
    """Reasons take no revision, so a picture cannot see another dispatcher's;
    once another one has written the queue, the next pass starts afresh."""
    a = Dispatcher(session_factory, cluster, clock=clock)
    b = Dispatcher(session_factory, cluster, clock=clock)
    for i in range(3):
        _submit(client, admin, name=f"big{i}", resources={"gpus": 8, "gpu_types": ["v100-16g"]})
    a.run_once()
    a.run_once()
    assert not a.picture.last.full
    b.run_once()
    a.run_once()
    assert a.picture.last.full
    a.run_once()
    assert not a.picture.last.full


def test_reasons_that_change_only_in_numbers_are_rewritten_at_most_every_few_seconds(
    client, admin, session_factory, cluster, clock, monkeypatch
):
    from app.scheduling.model import CycleResult
    from app.simulate import all_policies

    said: dict[str, str] = {}

    def waits(snap) -> CycleResult:
        ids = [r.id for r in snap.pending]
        return CycleResult(reasons={i: said["now"] for i in ids}, order=ids)

    monkeypatch.setitem(all_policies.POLICIES, "test-waits", waits)
    d = Dispatcher(session_factory, cluster, clock=clock, policy="test-waits")
    jid = _submit(client, admin, name="w")

    def reason_after(text: str, advance: float = 0.0) -> str:
        said["now"] = text
        clock.advance(advance)
        d.run_once()
        return client.get(f"/v1/jobs/{jid}", headers=admin).json()["reason"]

    assert reason_after("largest free block: v100-16g 3") == "largest free block: v100-16g 3"
    # only a number moved, 1 s later: not rewritten yet
    assert reason_after("largest free block: v100-16g 2", 1) == "largest free block: v100-16g 3"
    # other words: written at once
    assert reason_after("team nlp at quota 150/150 CU", 1) == "team nlp at quota 150/150 CU"
    assert reason_after("team nlp at quota 140/150 CU", 1) == "team nlp at quota 150/150 CU"
    # five seconds after the last write: the new numbers are written
    assert reason_after("team nlp at quota 130/150 CU", 5) == "team nlp at quota 130/150 CU"
