"""``suanli launch`` of pipelines and sweeps and ``suanli jobs list``, in-process against
the real app, control loop and local backend, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

from tests.control.control_helpers import Server, wait_until

PIPELINE = """\
name: nightly
jobs:
  - name: prep
    workdir: code
    resources: {accelerators: RTX4090:1}
    run: cat data.txt > /workspace/prep.out; test -n "$COLOUR"
  - name: train
    workdir: code
    depends_on: [prep]
    resources: {accelerators: RTX4090:1}
    run: echo train $COLOUR
  - name: broken
    depends_on: [prep]
    run: exit 5
  - name: after-broken
    depends_on: [broken]
    run: echo never
"""


def test_launch_pipeline_json_and_jobs_list(cli, server: Server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "data.txt").write_text("hello\n")
    f = tmp_path / "pipe.yaml"
    f.write_text(PIPELINE)
    jobs = json.loads(cli("launch", str(f), "--env", "COLOUR=blue", "--json"))
    assert isinstance(jobs, list) and [j["name"] for j in jobs] == ["prep", "train", "broken", "after-broken"], jobs
    prep, train, broken, after = (j["id"] for j in jobs)
    assert [j["depends_on"] for j in jobs] == [[], [prep], [prep], [broken]], jobs
    assert {j["group"] for j in jobs} == {f"nightly#{prep}"}
    assert jobs[0]["spec"]["code"] == jobs[1]["spec"]["code"] and jobs[0]["spec"]["code"], "one upload for both"

    def settled() -> list[dict] | None:
        listed = json.loads(cli("jobs", "list", "--json"))
        return listed if all(j["state"] in ("succeeded", "failed", "cancelled") for j in listed) else None

    listed = {j["id"]: j for j in wait_until(settled, 60)}
    states = {listed[i]["name"]: listed[i]["state"] for i in (prep, train, broken, after)}
    assert states == {"prep": "succeeded", "train": "succeeded", "broken": "failed", "after-broken": "cancelled"}, listed
    assert listed[after]["reason"] == f"dependency job {broken} (broken) failed", listed[after]
    assert listed[after]["depends_on"] == [broken]
    table = cli("jobs", "list", "--group", "nightly")
    assert "DEPENDS ON" in table and f"nightly#{prep}" in table and "after-broken" in table, table
    assert json.loads(cli("jobs", "list", "--group", "other", "--json")) == []


def test_launch_refuses_bad_pipelines_and_sweeps_creating_nothing(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "cycle.yaml"
    f.write_text("jobs:\n  - {name: a, depends_on: [b], run: 'true'}\n  - {name: b, depends_on: [a], run: 'true'}\n")
    out = cli("launch", str(f), code=1)
    assert "a dependency cycle: a -> b -> a" in out, out
    f.write_text("jobs:\n  - {name: a, run: 'true'}\n  - {name: b, depends_on: [nope], run: 'true'}\n")
    out = cli("launch", str(f), code=1)
    assert "jobs[1].depends_on: no job named 'nope'" in out, out
    f.write_text("jobs:\n  - {name: a, run: 'true', workdir: missing}\n")
    assert "does not exist" in cli("launch", str(f), code=2)
    task = tmp_path / "task.yaml"
    task.write_text("name: t\nrun: echo $LR\n")
    for args, says in [
        (["--sweep", "LR=1e-4,,3e-4"], "an empty value"),
        (["--sweep", "LR=1", "--sweep", "LR=2"], "LR is given twice"),
        (["--sweep", "A=" + ",".join(map(str, range(17))), "--sweep", "B=" + ",".join(map(str, range(17)))], "289 combinations"),
        (["--sweep", "LR"], "expected KEY=V1,V2"),
    ]:
        out = cli("launch", str(task), *args, code=1)
        assert says in out, (args, out)
    assert json.loads(cli("jobs", "list", "--json")) == []


def test_launch_sweep_is_one_group(cli, server: Server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    task = tmp_path / "train.yaml"
    task.write_text("name: train\nrun: echo lr=$lr bs=$bs\nmatrix: {seed: [1]}\n")
    jobs = json.loads(cli("launch", str(task), "--sweep", "lr=1e-4,3e-4", "--sweep", "bs=16,32", "--json"))
    names = [j["name"] for j in jobs]
    assert names == [f"train-seed=1-lr={lr}-bs={bs}" for lr in ("1e-4", "3e-4") for bs in ("16", "32")], names
    assert len({j["group"] for j in jobs}) == 1 and jobs[0]["group"].startswith("train#")
    assert [(j["spec"]["envs"]["lr"], j["spec"]["envs"]["bs"]) for j in jobs] == [
        ("1e-4", "16"),
        ("1e-4", "32"),
        ("3e-4", "16"),
        ("3e-4", "32"),
    ]
    listed = json.loads(cli("jobs", "list", "--group", "train", "--json"))
    assert sorted(j["id"] for j in listed) == sorted(j["id"] for j in jobs)
    one = tmp_path / "one.yaml"
    one.write_text(f"jobs:\n  - {{name: after, depends_on: [{jobs[0]['id']}], run: 'true'}}\n")
    (after,) = json.loads(cli("launch", str(one), "--json"))  # a pipeline of one job: still a list
    assert after["depends_on"] == [jobs[0]["id"]] and after["group"] == f"one#{after['id']}", after
    out = cli("launch", str(task), "--sweep", "seed=2", code=1)
    assert "--sweep seed is in the file's matrix already" in out, out
