"""NVML identity (``suanli.verify.identity``) read from recordings of real GPUs.

The recordings (``recordings/``, see its README) are real GPUs' answers, transcribed from
published ``nvidia-smi -q`` outputs; ``RecordedNvml`` replays them through the same
``read_identity`` that asks the real NVML. They stand in for the physical GPUs only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suanli.verify.identity import RecordedNvml, read_identity, record

RECORDINGS = Path(__file__).parent / "recordings"


def replay(name: str) -> RecordedNvml:
    return RecordedNvml.load(RECORDINGS / name)


def test_every_recording_says_it_is_one_and_where_it_comes_from() -> None:
    files = sorted(RECORDINGS.glob("*.json"))
    assert len(files) == 3, files
    for f in files:
        doc = json.loads(f.read_text())
        assert doc["kind"] == "recording" and doc["label"].startswith("recording") and doc["source"], f


def test_an_h100_sxm_node_reads_as_h100_bare_metal_pcie_gen5_x16() -> None:
    node = read_identity(replay("h100_sxm5_x8.json"), source="recording")
    assert (node.driver_version, node.cuda_version, len(node.gpus)) == ("565.57.01", "12.7", 2), node
    g = node.gpus[0]
    assert (g.index, g.name, g.uuid, g.serial) == (
        0,
        "NVIDIA H100 80GB HBM3",
        "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1",
        "1654423001593",
    ), g
    assert (g.memory_total_mib, g.pcie_gen, g.pcie_gen_max, g.pcie_width, g.pcie_width_max) == (81559.0, 5, 5, 16, 16), g
    assert (g.mig_mode, g.virtualization, g.nvlink_links) == ("disabled", "none", None), g
    assert node.gpus[1].uuid != g.uuid


def test_an_a100_node_reads_as_a100_gen4() -> None:
    node = read_identity(replay("a100_sxm4_x4.json"))
    g = node.gpus[0]
    assert (g.name, g.memory_total_mib, g.pcie_gen, node.cuda_version) == ("NVIDIA A100-SXM4-80GB", 81920.0, 4, "12.5"), g


def test_a_vgpu_guest_reads_as_vgpu_with_what_it_hides_as_none() -> None:
    g = read_identity(replay("vgpu_v100d_8c.json")).gpus[0]
    assert (g.name, g.virtualization, g.memory_total_mib) == ("GRID V100D-8C", "vgpu", 8192.0), g
    assert (g.serial, g.pcie_gen, g.pcie_width) == (None, None, None), g


def test_nvlink_links_are_counted_when_nvml_answers() -> None:
    doc = json.loads((RECORDINGS / "h100_sxm5_x8.json").read_text())
    doc["devices"][0]["nvlink_state"] = [1] * 16 + [0, 0]  # link state as NVML answers it, 16 of 18 up
    assert read_identity(RecordedNvml(doc)).gpus[0].nvlink_links == 16


def test_a_recording_of_a_recording_is_the_same_recording() -> None:
    """``record`` (what ``suanli verify --record-nvml`` writes on a real GPU) asks the
    same questions ``RecordedNvml`` answers: recording a replay gives the file back."""
    doc = json.loads((RECORDINGS / "a100_sxm4_x4.json").read_text())
    again = record(RecordedNvml(doc), label=doc["label"])
    assert again["devices"] == doc["devices"] and again["driver_version"] == doc["driver_version"], again


@pytest.mark.parametrize("bad", [[], {"devices": "x"}, {"nodes": []}])
def test_a_malformed_recording_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="an NVML recording is a JSON object with a 'devices' list"):
        RecordedNvml(bad)  # type: ignore[arg-type]
