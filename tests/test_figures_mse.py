"""The RFF SimRF/ORF map (beyond the paper): the plotted numbers against independent routes."""

import json

import numpy as np
import pytest
from mpmath import mp

from figures.cli import main


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("map")
    assert main(["--quick", "--no-progress", "--only", "new_rff_simplex_map", "--out", str(out)]) in (0, None)
    return json.loads((out / "new_rff_simplex_map.json").read_text())


def test_map_matches_independent_routes(data, routes):
    """Map cells against the quadrature of the simplex RFF conformity and Thm 4.5's printed ORF series,
    with the RFF MSE assembled in the test (theory.rff_mse_ratio uses the even Taylor route and 1F1)."""
    z, ratio = np.array(data["z"]), np.array(data["ratio"])
    rng = np.random.default_rng(0)
    with mp.workdps(20):
        for _ in range(6):
            i, j = rng.integers(len(data["d"])), rng.integers(1, len(z))
            exact = float(routes.rff_ratio("simplex", "orthogonal", data["d"][i], z[j]))
            assert abs(ratio[i, j] - exact) <= 1e-9 * exact


def test_map_shows_both_regimes(data):
    """SimRFs lose at z = 0 for every d (ratio (3 + d/(d-1))/3) and win somewhere at d = 3."""
    d, ratio = data["d"], np.array(data["ratio"])
    for i, dd in enumerate(d):
        assert abs(ratio[i, 0] - (3 + dd / (dd - 1)) / 3) < 1e-12
    assert ratio[d.index(3)].min() < 0.95
