"""What the API benches submit and the tokens they submit with (bench/api.py,
bench/flood.py): one spec and one way to get a team token, so the two measure the
same request."""

from __future__ import annotations

from typing import Any


def nlp_job(name: str, duration_s: float) -> dict[str, Any]:
    """Team nlp's one-A100 job of the demo config (its quota holds a few; the rest wait)."""
    return {"name": name, "team": "nlp", "resources": {"gpus": 1, "gpu_types": ["a100-80g"]},
            "duration_estimate_s": duration_s}


def team_token(client: Any, team: str, headers: dict[str, str] | None = None) -> str:
    """A new token of ``team``, asked with the admin token (``client``: an httpx or
    FastAPI TestClient; ``headers``: the admin's, unless the client sends them)."""
    r = client.post(f"/v1/teams/{team}/tokens", json={}, headers=headers)
    r.raise_for_status()
    return r.json()["token"]
