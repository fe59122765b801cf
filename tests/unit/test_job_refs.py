"""The sentences of the core as a team token reads them: other teams' job ids become
"another team's job" (app/store/job_refs.py); the integration half is
tests/integration/test_preemption_reasons_live.py."""

from __future__ import annotations

from app.store.job_refs import JobRefs


def refs(*foreign: str) -> JobRefs:
    r = JobRefs(None, None)  # type: ignore[arg-type]  # no session is read for team None
    r.team, r.foreign = "nlp", set(foreign)
    return r


def test_each_sentence_that_names_jobs() -> None:
    r = refs("42", "23")
    assert r.text("preempted by job 42 (P0 > P1)") == "preempted by another team's job (P0 > P1)"
    assert r.text("reclaimed for job 42 of pool training: lease 3 expired") == (
        "reclaimed for another team's job of pool training: lease 3 expired")
    assert r.text("free capacity is held for job(s) 17, 23 (reservation, expected start") == (
        "free capacity is held for job(s) 17 and another team's job(s) (reservation, "
        "expected start")
    assert r.text("; lower-priority job(s) 23, 42 ran less than min_run_time_s") == (
        "; lower-priority another team's job(s) ran less than min_run_time_s")
    assert r.text("waiting for job 42's pods on n1 to stop") == (
        "waiting for another team's job's pods on n1 to stop")
    # the team's own ids, and numbers that are not job ids, stay
    assert r.text("preempted by job 7 (P0 > P1)") == "preempted by job 7 (P0 > P1)"
    assert r.text("job needs at least 42 CU") == "job needs at least 42 CU"
    assert r.data({"by_job": "42", "kind": "preempt"}) == {"by_job": None, "kind": "preempt"}
    assert r.data({"by_job": "7"}) == {"by_job": "7"}


def test_the_admin_reads_every_id() -> None:
    r = JobRefs(None, None, ["preempted by job 42 (P0 > P1)"])  # type: ignore[arg-type]
    assert r.text("preempted by job 42 (P0 > P1)") == "preempted by job 42 (P0 > P1)"
