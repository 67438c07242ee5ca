"""theory over grids (issue 14 item 3): sequences and numpy arrays of v, z, d (and m,
norms, w, cos(theta)) in, numpy object arrays of mpf of the broadcast shape out, at the
same precision contract as scalar calls; one argument order for the MSE functions."""


import mpmath
import numpy as np
import pytest
from mpmath import mp

import theory


def same(a, b):
    """Bit-identical mpf (the grid path must be the scalar path)."""
    return isinstance(a, type(b)) and a == b and a._mpf_ == b._mpf_


@pytest.mark.parametrize("func,args,grid_kw", [
    (theory.conformity, ("simplex", 64), "v"),
    (theory.rff_conformity, ("orthogonal", 1024), "z"),
    (theory.mse_ratio, ("simplex", "iid", 16), "v"),
    (theory.rff_mse_ratio, ("simplex", "orthogonal", 16), "z"),
    (theory.rff_orthogonality_gap, (64,), "z"),
    (theory.rff_asymptotic_ratio, (64,), "z"),
    (theory.conformity_iid, (8,), "v"),
])
def test_a_list_of_v_or_z_is_the_scalar_calls(func, args, grid_kw):
    grid = ["0.1", 0.5, 1, mp.mpf("2.5")]
    with mp.workdps(40):
        out = func(*args, grid)
        assert isinstance(out, np.ndarray) and out.dtype == object and out.shape == (4,)
        for got, x in zip(out, grid):
            assert same(got, func(*args, x))
            assert got._mpf_[3] > 53  # 40 digits, not doubles


def test_broadcasting_d_and_v_and_keyword_grids():
    ds = np.array([[8], [64], [1024]])
    vs = np.linspace(0.25, 2, 4)
    with mp.workdps(30):
        out = theory.mse_ratio("simplex", "iid", ds, vs)
        assert out.shape == (3, 4)
        for i in range(3):
            for j in range(4):
                assert same(out[i, j], theory.mse_ratio("simplex", "iid", int(ds[i, 0]), vs[j]))
        ms = theory.mse_ratio("orthogonal", "iid", 8, "0.5", m=[1, 8, 9, 10 ** 9])
        assert ms.shape == (4,) and same(ms[2], theory.mse_ratio("orthogonal", "iid", 8, "0.5", m=9))
        mse = theory.prf_mse("simplex", 16, [0.2, 0.4], x_norm=[0.1, 0.2], y_norm=0.2)
        assert same(mse[1], theory.prf_mse("simplex", 16, 0.4, x_norm=0.2, y_norm=0.2))
        zc = theory.z_crit([3, 64])
        assert zc.shape == (2,) and same(zc[1], theory.z_crit(64))
        pdf = theory.pdf_wij(np.array([0.5, 1.0, 2.0]), 8, [-1 / 7])
        assert pdf.shape == (3,)


def test_scalars_stay_scalars():
    with mp.workdps(20):
        for value in (0.5, "0.5", np.float64(0.5), np.array(0.5), mp.mpf("0.5")):
            assert isinstance(theory.conformity("simplex", 8, value), mpmath.mpf)
        assert isinstance(theory.conformity("simplex", np.int64(8), 0.5), mpmath.mpf)


def test_grid_errors_name_the_argument_and_shapes():
    with pytest.raises(ValueError, match="v must be >= 0"):
        theory.conformity("simplex", 8, [0.5, -1])
    with pytest.raises(ValueError, match="broadcast"):
        theory.mse_ratio("simplex", "iid", [8, 16, 32], [0.1, 0.2])
    with pytest.raises(TypeError, match="d must be an integer"):
        theory.conformity("simplex", [8.0], 0.5)


def test_one_precision_for_the_whole_grid():
    """The caller's precision is read once for the grid, in the caller's thread."""
    with theory.precision(dps=50):
        out = theory.conformity("orthogonal", 16, [0.5, 1.0])
    with mp.workdps(50):
        assert same(out[0], theory.conformity("orthogonal", 16, 0.5))


# ---------------------------------------------------------------------------
# one argument order for the MSE functions


def test_keyword_only_arguments_are_enforced():
    with pytest.raises(TypeError):
        theory.prf_mse("simplex", 4, "1.5", 11)  # m positional in the new order: refused (not read as x_norm)
    with pytest.raises(TypeError, match="positional"):  # the old order (m fifth) is gone with its shim
        theory.mse_ratio("simplex", "iid", 16, "0.5", 40)
    with pytest.raises(TypeError):
        theory.prf_mse("simplex", 4, "1.5", m=11, x_norm=1)  # y_norm is required


def test_defaults_m_is_d():
    with mp.workdps(30):
        assert same(theory.rff_mse("simplex", 8, "1"), theory.rff_mse("simplex", 8, "1", m=8))
        assert same(theory.prf_mse("iid", 8, "1", x_norm="0.5", y_norm="0.5"),
                    theory.prf_mse("iid", 8, "1", m=8, x_norm="0.5", y_norm="0.5"))
