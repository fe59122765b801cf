"""Concurrent HTTP clients in their own process (so the server under test does
not share a GIL with them): ``python -m tests.load_client URL TOKEN N`` sends N
concurrent job submits and prints one JSON line per answer."""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx


def main(url: str, token: str, n: int) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    # one client (one SSL context, a pool of n connections): the time measured
    # is the server's, not the client's setup
    client = httpx.Client(limits=httpx.Limits(max_connections=n), timeout=60)

    def submit(i: int) -> dict:
        body = {"name": f"c{i}", "team": "nlp", "duration_estimate_s": 100,
                "resources": {"gpus": 2, "gpu_types": ["a100-80g"]}}
        t0 = time.monotonic()
        try:
            r = client.post(f"{url}/v1/jobs", json=body, headers=headers)
        except httpx.HTTPError as e:
            return {"status": 0, "error": repr(e), "s": time.monotonic() - t0}
        out = {"status": r.status_code, "s": time.monotonic() - t0,
               "retry_after": r.headers.get("retry-after"),
               "content_type": r.headers.get("content-type")}
        try:
            out["body"] = r.json()
        except ValueError:
            out["body"] = r.text[:200]
        return out

    with client, ThreadPoolExecutor(n) as ex:
        for res in ex.map(submit, range(n)):
            print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
