"""theory over grids (issue 14 item 3): sequences and numpy arrays of v, z, d (and m,
norms, w, cos(theta)) in, numpy object arrays of mpf of the broadcast shape out, at the
same precision contract as scalar calls; one argument order for the MSE functions."""


from fractions import Fraction

import mpmath
import numpy as np
import pytest
from mpmath import mp

import theory
from _support import LONG
from theory import _context
from theory.errors import ConvergenceError
from theory.validation import ArgumentTypeError


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


# ---------------------------------------------------------------------------
# Grids, budgets and input checks (third exploration run, findings 5 to 8).
#
# 5. Ragged grids were accepted: ``np.asarray([[1, 2], [3]], dtype=object)`` is a 1-D array of lists, each
#    list then mapped as a grid of its own, so ``mse_ratio("simplex", "iid", 4, [[1, 2], [3]])`` returned an
#    array of shape (2,) whose elements were arrays of shapes (2,) and (1,).  Now a ValueError naming v.
# 6. ``pnc.pair_conformity_u(kind=...)``: any kind but "prf" ("PRF", "hyperbolic", None, 1) gave the RFF value
#    (0.7694924781 at d = 3, v = 0.5, where the PRF value is 1.2712657666).  Now refused, naming kind.
# 7. The time budget applied per grid point: a 9-point grid under ``theory.budget(0.57)`` ran 2.6 s (0.38 s per
#    point).  An explicit budget now bounds the whole call; the default stays per point (documented in
#    ``theory.budget``).  Tested with a fake clock (one tick per reading), no wall clock.
# 8. pnc's pair functions refused lists (the package docstring promises grids of v, z and d); symbolic's
#    ``simplex_gram_matrix(2.7)`` used n = 2; ``geometry.simplex_apply({1: 2, 3: 4})`` used the dict's keys.


@pytest.mark.parametrize("args, name", [
    ((4, [[1, 2], [3]]), "v"),                 # returned array([array(2), array(1)])
    (([4, [5, 6]], 1.0), "d"),                 # returned [mpf, ndarray]
    ((4, [[1, 2], [3, [4]]]), "v"),            # a ragged element one level deeper
    ((4, np.array([[1, 2], [3]], dtype=object)), "v"),  # the same ragged nesting, built by the caller
], ids=["list_of_lists", "scalar_and_list", "deeper", "object_array"])
def test_ragged_grids_are_refused_naming_the_argument(args, name):
    with pytest.raises(ValueError, match=rf"^{name} must be a real number or a rectangular sequence/array"):
        theory.mse_ratio("simplex", "iid", *args)


def test_rectangular_grids_still_map_to_an_array_of_mpf():
    """Power: the rectangular grid of the same values gives an object array of mpf of the broadcast shape, each
    entry the scalar call; a 0-d array element counts as its scalar.  Reference: the iid / orthogonal ratio at
    d = 4 is independent of v to first order; the simplex / iid ratio at v = 1, d = 4 is 0.5103484092754779
    (the finding's run)."""
    out = theory.mse_ratio("simplex", "iid", 4, [[1, 2], [3, 4]])
    assert out.shape == (2, 2) and out.dtype == object
    assert all(isinstance(x, mpmath.mpf) for x in out.flat)
    for idx, v in np.ndenumerate(np.array([[1, 2], [3, 4]])):
        assert out[idx] == theory.mse_ratio("simplex", "iid", 4, int(v))
    assert abs(out[0, 0] - mpmath.mpf("0.51034840927547787")) < 1e-15
    mixed = theory.mse_ratio("simplex", "iid", 4, [np.array(1.0), 2])
    assert mixed.shape == (2,) and mixed[0] == out[0, 0] and mixed[1] == out[0, 1]
    # the caller's object array is not modified by the unwrapping of 0-d elements
    given = np.empty(2, dtype=object)
    given[0], given[1] = np.array(1.0), 2
    theory.mse_ratio("simplex", "iid", 4, given)
    assert isinstance(given[0], np.ndarray)


# ---------------------------------------------------------------------------
# Input handling, round 2: exact inputs of the certified mode, fractions and numpy's long floats,
# huge decimal strings, masked arrays, strings where sequences are expected, SimRFs+ arguments.
#
# References are independent of the code under test: mpmath at 400+ bits through its own exp / 1F1 (the
# certified balls are arb's), exact rationals from ``as_integer_ratio``, and Python's Decimal/Fraction.


def test_fraction_is_rounded_at_the_working_precision():
    """Before, a Fraction went through float(): conformity('iid', 2, 1/3) at 50 digits was
    1.11751906874186363483..., wrong from the 17th digit; the reference is mpmath at 100 digits."""
    with mpmath.mp.workdps(100):
        ref = mpmath.exp(mpmath.mpf(1) / 9)
    with mpmath.mp.workdps(50):
        got = theory.conformity("iid", 2, Fraction(1, 3))
        assert abs(got / ref - 1) < mpmath.mpf(10) ** -49
        old = mpmath.exp(mpmath.mpf(1 / 3) ** 2)  # what the float route gave
        assert abs(old / ref - 1) > mpmath.mpf(10) ** -20
    # a Fraction beyond a double's range: was "v must be a real number" (float overflow)
    with pytest.raises(ConvergenceError, match="beyond the reachable domain"):
        theory.conformity("iid", 2, Fraction(10 ** 400, 3))


@pytest.mark.skipif(not LONG, reason="numpy's longdouble is a double here")
def test_longdouble_is_converted_exactly():
    x = np.longdouble(1) / 3
    p, q = x.as_integer_ratio()
    with mpmath.mp.workdps(100):
        ref = mpmath.exp((mpmath.mpf(p) / q) ** 2)
    with mpmath.mp.workdps(40):
        got = theory.conformity("iid", 2, x)
        assert abs(got / ref - 1) < mpmath.mpf(10) ** -39
        assert abs(mpmath.exp(mpmath.mpf(float(x)) ** 2) / ref - 1) > mpmath.mpf(10) ** -20  # the old double route


def test_huge_decimal_strings_fail_fast_with_the_domain_error():
    """'1e100000' raised Python's 'Exceeds the limit (4300 digits) for integer string conversion' (from nstr
    of the 660000-bit value in the error message); '1e100000000' hung (a 6.6e8-bit conversion)."""
    for text in ("1e100000", "1e100000000"):
        used = _context.work_used()
        with pytest.raises(ConvergenceError, match="beyond the reachable domain"):
            theory.conformity("iid", 2, text)
        assert _context.work_used() - used == 0  # refused before any step of work (no clock: issue 38)
    with pytest.raises(ValueError, match="v must be >= 0"):
        theory.conformity("iid", 2, "-1e100000000")


def test_masked_grids_are_refused():
    """np.ma.masked_array([1, 2], mask=[0, 1]) was computed with the masked 2 (two values returned)."""
    with pytest.raises(ArgumentTypeError, match="v must not be a numpy masked array"):
        theory.conformity("simplex", 3, np.ma.masked_array([1, 2], [0, 1]))
    with pytest.raises(ArgumentTypeError, match="v must not be a numpy masked array"):
        theory.conformity("simplex", 3, np.ma.masked_array(1.0, False))  # 0-d too
    with pytest.raises(ArgumentTypeError, match="d must not be a numpy masked array"):
        theory.mse_ratio("simplex", "iid", np.ma.masked_array([3, 4]), 1)
    plain = theory.conformity("simplex", 3, np.array([1.0, 2.0]))
    assert plain.shape == (2,)
