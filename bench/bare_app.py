"""The baseline of ``bench/api.py``: a bare FastAPI app with gpuq's submit shapes.

Sync endpoints (one worker-thread hop each, as FastAPI runs them) that parse
the same pydantic bodies as gpuq (``JobSpec``, a 500-job batch) and answer
with a small JSON object, touching no database. What gpuq costs above this is
its auth, its checks, the database and its fuller answer.

    uvicorn bench.bare_app:app
"""

from __future__ import annotations

from typing import Annotated

from fastapi import FastAPI
from pydantic import BaseModel, Field

from app.domain.spec import JobSpec

app = FastAPI()


class Batch(BaseModel):
    jobs: Annotated[list[JobSpec], Field(min_length=1, max_length=5000)]


@app.post("/v1/jobs", status_code=201)
def submit(spec: JobSpec) -> dict:
    return {"id": "1", "name": spec.name, "team": spec.team, "status": "pending"}


@app.post("/v1/jobs:batch", status_code=201)
def submit_batch(body: Batch) -> dict:
    return {"items": [{"id": str(i), "name": s.name} for i, s in enumerate(body.jobs)]}
