"""The Grafana dashboard only queries metrics gpuq exports, and shows every family."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from app.cluster import k8s_metrics  # noqa: F401  (the backend's families, as a dispatcher has them)
from app.metrics import GpuqMetrics

ROOT = Path(__file__).resolve().parents[2]
DASH = ROOT / "k8s" / "grafana" / "gpuq-dashboard.json"


def exported_names() -> set[str]:
    m = GpuqMetrics()
    names = set()
    for fam in m.registry.collect():
        names.add(fam.name)
        for suffix in ("_total", "_bucket", "_count", "_sum", "_created"):
            names.add(fam.name + suffix)
    return names


def panel_exprs(dash: dict) -> list[str]:
    out = []
    for p in dash["panels"]:
        out += [t["expr"] for t in p.get("targets", [])]
        for sub in p.get("panels", []):
            out += [t["expr"] for t in sub.get("targets", [])]
    return out


def test_dashboard_queries_only_exported_metrics_and_covers_all():
    dash = json.loads(DASH.read_text())
    exprs = panel_exprs(dash)
    used = {n for e in exprs for n in re.findall(r"\b(gpuq_[a-z0-9_]+)", e)}
    known = exported_names()
    assert used, "dashboard has no gpuq queries"
    assert used <= known, f"unknown metrics in dashboard: {sorted(used - known)}"
    families = {f.name for f in GpuqMetrics().registry.collect()} - {"gpuq_metrics_pass_errors"}
    covered = {f for f in families if any(u == f or u.startswith(f + "_") for u in used)}
    assert covered == families, f"families without a panel: {sorted(families - covered)}"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))


def test_scrape_configs_parse_and_point_at_metrics():
    sm = yaml.safe_load((ROOT / "k8s/grafana/servicemonitor.yaml").read_text())
    assert sm["kind"] == "ServiceMonitor"
    assert sm["spec"]["endpoints"][0]["path"] == "/metrics"
    jobs = yaml.safe_load((ROOT / "k8s/grafana/prometheus-scrape-config.yaml").read_text())
    assert {j["job_name"] for j in jobs} == {"gpuq", "dcgm-exporter"}
    # /metrics takes a bearer token (a `metrics` token, docs/observability.md)
    assert sm["spec"]["endpoints"][0]["authorization"]["type"] == "Bearer"
    gpuq = next(j for j in jobs if j["job_name"] == "gpuq")
    assert gpuq["authorization"]["type"] == "Bearer"
    assert gpuq["authorization"]["credentials_file"].endswith("/gpuq-metrics-token/token")
