"""pytest plumbing for the proof regression suite.

* ``@pytest.mark.claim("id", ...)`` ties a check to rows of the claim registry
  (:mod:`paper_checks.registry`); an unknown id is a collection error.
* the ``record`` fixture stores the largest discrepancy a check observed
  (relative error, or a z-score for Monte Carlo checks) on the test report,
  so that ``python -m paper_checks`` can print it (it travels with xdist).
"""

import pytest

from paper_checks.registry import CLAIMS_BY_ID


def pytest_configure(config):
    config.addinivalue_line("markers", "claim(*ids): the registry claims this check verifies")


def pytest_collection_modifyitems(config, items):
    for item in items:
        marker = item.get_closest_marker("claim")
        if marker is None:
            continue
        unknown = [c for c in marker.args if c not in CLAIMS_BY_ID]
        if unknown:
            raise pytest.UsageError(f"{item.nodeid}: unknown claim id(s) {unknown} (add them to registry.py)")


@pytest.fixture(autouse=True)
def _claims(request):
    marker = request.node.get_closest_marker("claim")
    if marker is not None:
        request.node.user_properties.append(("claims", list(marker.args)))


@pytest.fixture
def record(request):
    """``record(value, unit="rel", worst="high")``: note a discrepancy.

    The report keeps the worst value per claim and unit: the largest, or the
    smallest for margins and p-values (``worst="low"``)."""

    def _record(value, unit="rel", worst="high"):
        if worst not in ("high", "low"):
            raise ValueError(f"worst must be 'high' or 'low', got {worst!r}")
        request.node.user_properties.append(("discrepancy", (float(value), unit, worst)))

    return _record
