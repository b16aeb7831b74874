"""The openb loader: good rows become requests; bad rows name file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from suanli.sim.traces import TraceError, load_nodes, load_pods

DATA = Path(__file__).parent / "data"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"


def write(tmp_path: Path, text: str, name: str = "pods.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_slice_loads():
    nodes = load_nodes(DATA / "nodes_slice.csv")
    pods = load_pods(DATA / "pods_slice.csv")
    assert len(nodes) == 60 and len(pods) == 407
    assert {n.gpu_model for n in nodes} >= {"G2", "T4", "P100"}


def test_pod_rules(tmp_path):
    path = write(
        tmp_path,
        POD_HEADER
        + "p0,4000,1024,1,460,,LS,Running,0,100,0\n"  # shared 0.46 GPU
        + "p1,8000,1024,2,1000,V100M16|V100M32,LS,Running,5,50,5\n"  # 2 whole GPUs, typed
        + "p2,1000,512,0,0,,BE,Running,,,\n"  # CPU only, no times
        + "p3,1000,512,1,1500,,LS,Running,0,1,0\n",  # >1000 milli means a whole GPU
    )
    p0, p1, p2, p3 = load_pods(path)
    assert (p0.request.gpu_milli, p0.request.gpu_count) == (460, 0)
    assert p1.request.gpu_count == 2 and p1.request.gpu_models == {"V100M16", "V100M32"}
    assert p2.request.total_gpu_milli == 0 and p2.creation_time is None and p2.qos == "BE"
    assert p3.request.gpu_count == 1 and p3.request.milli_per_gpu == 1000
    assert (p0.creation_time, p0.deletion_time) == (0, 100)


@pytest.mark.parametrize(
    "row, line, field",
    [
        ("p0,abc,1024,1,460,,LS,Running,0,1,0", 2, "cpu_milli"),
        ("p0,100,1024,-1,460,,LS,Running,0,1,0", 2, "num_gpu"),
        ("p0,100,1024,1,0,,LS,Running,0,1,0", 2, "gpu_milli"),
        ("p0,100,1024,2,500,,LS,Running,0,1,0", 2, "gpu_milli"),
        ("p0,100,1024,1,500,,LS,Running,x,1,0", 2, "creation_time"),
        (",100,1024,1,500,,LS,Running,0,1,0", 2, "name"),
    ],
)
def test_malformed_pod_rows_name_file_line_field(tmp_path, row, line, field):
    path = write(tmp_path, POD_HEADER + row + "\n")
    with pytest.raises(TraceError) as info:
        load_pods(path)
    assert (info.value.line, info.value.field) == (line, field)
    assert str(path) in str(info.value) and field in str(info.value)


def test_malformed_node_rows(tmp_path):
    header = "sn,cpu_milli,memory_mib,gpu,model\n"
    with pytest.raises(TraceError, match=r":3: field 'gpu'"):
        load_nodes(write(tmp_path, header + "n0,1000,1024,2,T4\nn1,1000,1024,two,T4\n", "n.csv"))
    with pytest.raises(TraceError, match="missing column"):
        load_nodes(write(tmp_path, "sn,cpu_milli\nn0,1\n", "m.csv"))
    with pytest.raises(TraceError, match="cannot open"):
        load_nodes(tmp_path / "absent.csv")
    with pytest.raises(TraceError, match="needs a GPU model"):
        load_nodes(write(tmp_path, header + "n0,1000,1024,2,\n", "g.csv"))
