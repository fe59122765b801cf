"""What the kubelet does when a container of a running Pod exits, for the fake API server.

Models kubernetes pkg/kubelet:

* the restart decision, ``ShouldContainerBeRestarted`` (pkg/kubelet/container/helpers.go):
  ``Never`` restarts nothing, ``OnFailure`` restarts a container that exited non-zero,
  ``Always`` restarts every exit;
* the phase of a Pod none of whose containers will run again, ``getPhase``
  (pkg/kubelet/kubelet_pods.go): ``Succeeded`` when every container exited 0, else
  ``Failed``; a Pod that restarts its containers stays ``Running``;
* crash-loop back-off (pkg/kubelet/kuberuntime/kuberuntime_manager.go ``doBackOff``, with
  the back-off of pkg/kubelet/kubelet.go: ``backOffPeriod`` 10 s doubling to
  ``MaxContainerBackOff`` 5 min, per container): between an exit and its restart the
  container is ``waiting`` with reason ``CrashLoopBackOff`` and the message ``back-off
  <d> restarting failed container=<c> pod=<p>``, the exit kept as ``lastState``, and
  ``restartCount`` counts the restarts (pkg/kubelet/pod_workers.go syncs the Pod again
  when the back-off is over, and the container runs again);
* an OOM kill as the runtime reports it: exit 137, reason ``OOMKilled``
  (pkg/kubelet/kuberuntime/kuberuntime_container.go, from the CRI's ``reason``).

Pure functions on the Pod's JSON; ``now`` is the fake's clock (seconds since the epoch).
"""

from __future__ import annotations

import time

BACKOFF_INITIAL_S = 10.0  # pkg/kubelet/kubelet.go backOffPeriod
BACKOFF_MAX_S = 300.0  # pkg/kubelet/kubelet.go MaxContainerBackOff
OOM_EXIT_CODE = 137  # 128 + SIGKILL


def stamp(now: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


def go_duration(s: float) -> str:
    """A whole number of seconds as Go's time.Duration prints it (10s, 1m20s, 5m0s)."""
    m, sec = divmod(int(s), 60)
    return f"{m}m{sec}s" if m else f"{sec}s"


def backoff_s(restarts: int) -> float:
    """The wait before restart number ``restarts`` + 1 (the first crash waits 10 s)."""
    return min(BACKOFF_INITIAL_S * 2 ** max(restarts, 0), BACKOFF_MAX_S)


def restarts(policy: str, exit_code: int) -> bool:
    """ShouldContainerBeRestarted for a container that exited ``exit_code``."""
    if policy == "Always":
        return True
    if policy == "OnFailure":
        return exit_code != 0
    return False


def _status(pod: dict, container: str) -> dict:
    st = pod.setdefault("status", {})
    statuses = st.setdefault("containerStatuses", [])
    for cs in statuses:
        if cs.get("name") == container:
            return cs
    image = next((c.get("image", "") for c in (pod.get("spec") or {}).get("containers") or []
                  if c.get("name") == container), "")
    cs = {"name": container, "image": image, "imageID": "", "ready": False,
          "restartCount": 0, "started": False, "state": {}}
    statuses.append(cs)
    return cs


def start(pod: dict, now: float) -> None:
    """Every container of a bound Pod runs: phase Running, Ready."""
    for c in (pod.get("spec") or {}).get("containers") or []:
        cs = _status(pod, c["name"])
        cs.update(ready=True, started=True, state={"running": {"startedAt": stamp(now)}})
    pod["status"]["phase"] = "Running"
    pod["status"].setdefault("startTime", stamp(now))


def exit_container(pod: dict, container: str, exit_code: int, reason: str,
                   now: float) -> float | None:
    """Container ``container`` of the running Pod exits: ended for good (the Pod's phase
    follows, getPhase) or waiting in ``CrashLoopBackOff``. Returns when the kubelet
    restarts it (``now`` + the back-off), or None when it will not."""
    spec = pod.get("spec") or {}
    policy = spec.get("restartPolicy") or "Always"  # the apiserver's default
    cs = _status(pod, container)
    terminated = {"exitCode": exit_code, "reason": reason,
                  "startedAt": ((cs.get("state") or {}).get("running") or {}).get(
                      "startedAt", stamp(now)), "finishedAt": stamp(now)}
    cs.update(ready=False, started=False)
    if not restarts(policy, exit_code):
        cs["state"] = {"terminated": terminated}
        states = [(_status(pod, c["name"]).get("state") or {})
                  for c in spec.get("containers") or []]
        if all("terminated" in s for s in states):
            codes = [s["terminated"].get("exitCode", 0) for s in states]
            pod["status"]["phase"] = "Succeeded" if all(c == 0 for c in codes) else "Failed"
        return None
    wait = backoff_s(int(cs.get("restartCount", 0)))
    cs["lastState"] = {"terminated": terminated}
    meta = pod["metadata"]
    cs["state"] = {"waiting": {
        "reason": "CrashLoopBackOff",
        "message": f"back-off {go_duration(wait)} restarting failed container={container} "
                   f"pod={meta['name']}_{meta.get('namespace', '')}({meta.get('uid', '')})"}}
    pod["status"]["phase"] = "Running"  # the Pod keeps running while it restarts
    return now + wait


def restart_container(pod: dict, container: str, now: float) -> None:
    """The back-off is over: the container runs again, one more restart counted."""
    cs = _status(pod, container)
    cs["restartCount"] = int(cs.get("restartCount", 0)) + 1
    cs.update(ready=True, started=True, state={"running": {"startedAt": stamp(now)}})


def stop_all(pod: dict, now: float) -> None:
    """The kubelet kills the containers of a deleted Pod (SIGTERM, exit 143; no restart
    whatever the policy, pkg/kubelet/kuberuntime/kuberuntime_container.go killContainer)
    and reports the terminal phase: Failed."""
    for c in (pod.get("spec") or {}).get("containers") or []:
        cs = _status(pod, c["name"])
        started = ((cs.get("state") or {}).get("running") or {}).get("startedAt", stamp(now))
        cs.update(ready=False, started=False, state={"terminated": {
            "exitCode": 143, "reason": "Error", "startedAt": started, "finishedAt": stamp(now)}})
    pod["status"]["phase"] = "Failed"
