import pytest

from app.simulate.alibaba import (
    GPU_MODELS,
    TraceFormatError,
    gpu_type_configs,
    node_configs,
    pod_job_spec,
    read_nodes,
    read_pods,
)
from tests.unit.openb_fixtures import write_nodes, write_pods


def test_reads_nodes_skipping_cpu_only(tmp_path):
    rows = [("n0", 96000, 393216, 8, "G2"), ("n1", 32000, 1024, 0, "nan"),
            ("n2", 104000, 524288, 2, "T4")]
    p = write_nodes(tmp_path / "n.csv", rows)
    nodes = read_nodes(p)
    assert [(n.name, n.gpus, n.model) for n in nodes] == [("n0", 8, "G2"), ("n2", 2, "T4")]
    assert len(read_nodes(p, gpu_only=False)) == 3


def test_unknown_model_is_named(tmp_path):
    p = write_nodes(tmp_path / "n.csv", [("n0", 1000, 1000, 2, "H100")])
    with pytest.raises(TraceFormatError, match="H100"):
        read_nodes(p)


def test_reads_pods_with_spec_and_without_optional_columns(tmp_path):
    p = write_pods(tmp_path / "p.csv", [
        ("a", 4000, 15258, 1, 220, "", "BE", "Running", 10, 20, 10),
        ("b", 16000, 32768, 1, 1000, "V100M16|V100M32", "LS", "Running", 5, "", 5),
        ("c", 1000, 100, 0, 0, "", "LS", "Running", 0, 1, 0),
    ])
    pods = {q.name: q for q in read_pods(p)}
    assert pods["a"].is_share and pods["a"].total_gpu_milli == 220 and pods["a"].gpu_spec == ()
    assert pods["b"].gpu_spec == ("V100M16", "V100M32") and pods["b"].deletion_time is None
    assert pods["c"].num_gpu == 0 and pods["c"].total_gpu_milli == 0
    short = write_pods(tmp_path / "s.csv", [("x", 1000, 10, 8, 1000)],
                       header="name,cpu_milli,memory_mib,num_gpu,gpu_milli")
    (x,) = read_pods(short)
    assert x.num_gpu == 8 and x.gpu_spec == () and x.creation_time is None


def test_bad_gpu_request_is_rejected(tmp_path):
    p = write_pods(tmp_path / "p.csv", [("a", 1, 1, 2, 500, "", "", "", 0, 0, 0)])
    with pytest.raises(TraceFormatError, match="num_gpu=2"):
        read_pods(p)


def test_model_table_and_conversion():
    assert set(GPU_MODELS) == {"G2", "T4", "G3", "P100", "V100M32", "V100M16", "A10"}
    types = gpu_type_configs()
    assert all(t.shareable for t in types) and len({t.name for t in types}) == 7


def test_pod_to_job_spec_and_nodes(tmp_path):
    rows = [("share-pod", 6000, 12288, 1, 460, "T4|P100", "", "", 100, 400, 100),
            ("whole-pod", 8000, 1000, 4, 1000, "", "", "", 0, "", 0)]
    p = write_pods(tmp_path / "p.csv", rows)
    share, whole = read_pods(p)
    js = pod_job_spec(share)
    assert js.resources.gpu_share == pytest.approx(0.46)
    assert js.resources.gpu_types == ["t4", "p100"]
    assert js.resources.cpu == 6 and js.submit_at_s == 100 and js.runtime_s == 300
    jw = pod_job_spec(whole)
    assert jw.resources.gpus == 4 and jw.runtime_s == 3600
    nodes = read_nodes(write_nodes(tmp_path / "n.csv", [("n0", 96000, 1000, 8, "V100M32")]))
    (nc,) = node_configs(nodes)
    assert nc.gpu_type == "v100m32" and nc.gpus == 8 and nc.cpu == 96
