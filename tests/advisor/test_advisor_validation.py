"""The estimator against published measurements (see suanli.advisor.validation and
BENCHMARKS.md): every row within its tolerance, memory median error <= 10 %."""

from __future__ import annotations

import pytest

from suanli.advisor.validation import reference_points, summarise

POINTS = reference_points()


@pytest.mark.parametrize("point", POINTS, ids=lambda p: f"{p.kind}:{p.case}")
def test_reference_point_within_tolerance(point):
    assert abs(point.relative_error) <= point.tolerance, (
        f"{point.case}: estimated {point.estimated:.4g} {point.unit} vs published {point.published:.4g} ({point.source})"
    )


def test_memory_median_error_target():
    summary = {s.kind: s for s in summarise(POINTS)}
    assert summary["memory (all)"].median_abs_error <= 0.10
    assert summary["memory (all)"].count >= 80
    assert summary["training-memory"].median_abs_error <= 0.05


def test_qlora_bound_holds():
    qlora = next(p for p in POINTS if p.case.startswith("QLoRA"))
    assert qlora.estimated < qlora.published  # fits the 48 GB GPU


def test_sources_are_named():
    assert all(p.source and p.confidence in ("V", "R") for p in POINTS)
