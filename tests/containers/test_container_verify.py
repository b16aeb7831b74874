"""``suanli nodes verify NAME`` in a real Podman container: the verification job pinned to
the node runs ``suanli verify --json`` in the ``verify`` image (the python image plus this
suanli and PyTorch's CPU wheel, ``imagebuild``'s recipe) and the server records the CPU
report it leaves (no GPU here: ``device: cpu``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from suanli.backends.local import imagebuild
from tests.containers.container_helpers import make_server
from tests.control.control_helpers import wait_until


@pytest.fixture(scope="module")
def verify_image(images: list[str]) -> str:
    """The ``verify`` image, built here when missing (a minute or two: the torch wheel)."""
    try:
        return imagebuild.pull_or_build("verify", "podman", progress=lambda line: None).ref
    except imagebuild.BuildError as exc:
        pytest.skip(f"the verify image could not be built here: {exc}")


def test_nodes_verify_runs_in_a_container_of_the_verify_image_and_records_its_cpu_report(
    images: list[str], verify_image: str, tmp_path: Path
) -> None:
    (tmp_path / "data").mkdir()
    srv = make_server(tmp_path / "data")
    try:
        offered = {i["name"]: i["ref"] for i in srv.get("/v1/images")}
        assert offered.get("verify") == verify_image, offered  # an optional image the engine holds is offered at start
        run = srv.post("/v1/nodes/rtx4090-0/verify-runs", {"quick": True}, expect=202).json()
        done = wait_until(lambda: (x := srv.get(f"/v1/nodes/rtx4090-0/verify-runs/{run['id']}"))["state"] != "waiting" and x, 180)
        assert done["state"] == "recorded", done
        job = srv.get(f"/v1/jobs/{run['job_id']}")
        assert (job["runtime"], job["spec"]["image"], job["state"]) == ("container", "verify", "succeeded"), job
        v = done["verification"]
        assert (v["status"], v["device"], v["node_state"]) == ("unmeasured", "cpu", "ready"), v
        report = v["report"]
        assert report["device"] == "cpu" and report["gpus"] == [] and report["job_id"] == run["job_id"], report
        assert report["expected_model"] == "RTX 4090" and report["cpu"]["memory_test_ok"] is True, report
        assert report["torch_version"].startswith("2.13.0"), report["torch_version"]
    finally:
        srv.close()
