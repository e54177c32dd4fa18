"""The published-results checks: every seed finding must hold and the median error stay <= 25%."""
import pytest

from gpuadvisor.validation import validate

# Findings the analytical model does not reproduce yet (documented in docs/cost-model.md, known gaps).
# Any other failing finding fails this test.
KNOWN_GAPS: dict[str, str] = {}


@pytest.fixture(scope="module")
def report():
    return validate()


def test_findings_hold(report):
    failed = {f.id: f.detail for f in report.findings if not f.holds}
    unexpected = {k: v for k, v in failed.items() if k not in KNOWN_GAPS}
    assert not unexpected, unexpected


def test_median_error_within_target(report):
    assert report.median_abs_error is not None and report.median_abs_error <= 0.25


def test_every_row_predicted(report):
    assert report.rows and all(r.predicted is not None for r in report.rows)
    assert {r.id.split("-")[0] for r in report.rows} >= {"seed000", "seed002"}
