"""The RFF SimRF/ORF map (beyond the paper): the plotted numbers are the closed forms."""

import json

import numpy as np
import pytest
from mpmath import mp

import theory
from figures.cli import main


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("map")
    assert main(["--quick", "--no-progress", "--only", "new_rff_simplex_map", "--out", str(out)]) in (0, None)
    return json.loads((out / "new_rff_simplex_map.json").read_text())


def test_map_equals_closed_forms(data):
    z, ratio = np.array(data["z"]), np.array(data["ratio"])
    rng = np.random.default_rng(0)
    with mp.workdps(20):
        for _ in range(6):
            i, j = rng.integers(len(data["d"])), rng.integers(len(z))
            exact = float(theory.rff_mse_ratio("simplex", "orthogonal", data["d"][i], z[j]))
            assert abs(ratio[i, j] - exact) <= 1e-10 * exact


def test_map_shows_both_regimes(data):
    """SimRFs lose at z = 0 for every d (ratio (3 + d/(d-1))/3) and win somewhere at d = 3."""
    d, ratio = data["d"], np.array(data["ratio"])
    for i, dd in enumerate(d):
        assert abs(ratio[i, 0] - (3 + dd / (dd - 1)) / 3) < 1e-12
    assert ratio[d.index(3)].min() < 0.95
