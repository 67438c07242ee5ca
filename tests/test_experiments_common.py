"""Tests of :mod:`montecarlo.experiments._common`: the z-scores and their formatting."""

import math
import statistics
import warnings
from fractions import Fraction

import numpy as np
import pytest

from montecarlo.experiments._common import format_z, Z_RTOL, z_score


# ---------------------------------------------------------------------------
# Second round of command-line findings (exploration helper): z-scores of zero or round-off standard errors,
# repeated couplings, ``--out`` checked before any work, strict audit JSON, SIGTERM, an empty ``--only``,
# ``--redraw-study`` conflicts, sigma-search progress and the help and data-error texts.


def test_z_score_is_na_for_zero_or_round_off_stderr():
    """Two draws whose accuracy differences are the same number (20/69 - 0/69 and 22/69 - 2/69): in exact
    rational arithmetic (fractions) their standard deviation is 0, so z is undefined; numpy's float std gives
    3.9e-17 and the plain division a z of 7.4e15 (the old output, asserted below: it fails the NaN check), and
    an exact 0 gave ZeroDivisionError."""
    n = 69
    diffs = np.array([20 / n - 0 / n, 22 / n - 2 / n])
    se = diffs.std(ddof=1) / math.sqrt(2)
    assert 0 < se < 1e-15 and abs(diffs.mean() / se) > 1e15  # the old z
    exact = [Fraction(20, n) - Fraction(0, n), Fraction(22, n) - Fraction(2, n)]  # the true differences
    assert statistics.stdev(exact) == 0
    assert math.isnan(z_score(diffs.mean(), se, 1.0))
    assert math.isnan(z_score(0.0, 0.0, 1.0)) and math.isnan(z_score(0.3, 0.0)) and math.isnan(z_score(0.3, math.nan))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy RuntimeWarning on the way
        z = z_score(np.array([0.0, 0.5, 0.2]), np.array([0.0, 0.0, 0.1]), 1.0)
    assert math.isnan(z[0]) and math.isnan(z[1])
    # a measured spread keeps its z, checked against statistics on the same per-draw values
    draws = [0.31, 0.29, 0.35, 0.30, 0.27]
    ref = statistics.mean(draws) / (statistics.stdev(draws) / math.sqrt(len(draws)))
    arr = np.array(draws)
    assert z_score(arr.mean(), arr.std(ddof=1) / math.sqrt(arr.size), 1.0) == pytest.approx(ref, rel=1e-12)
    # the threshold is relative: a standard error just above Z_RTOL of the scale counts
    assert z_score(1.0, 3 * Z_RTOL) == pytest.approx(1 / (3 * Z_RTOL))
    assert format_z(math.nan) == "n/a" and format_z(-2.04) == "-2.0" and format_z(math.inf) == "n/a"


def test_gram_and_attention_z_are_na_for_zero_stderr():
    """FrobeniusCurve.z and AttentionScan.z / uniform_z (and its format) on a result whose standard errors are
    set to 0: NaN (n/a) without a numpy warning; before, the plain division gave inf or NaN with a
    RuntimeWarning, and the attention table printed '+inf'."""
    import dataclasses

    from montecarlo.experiments import attention, gram

    res = gram.fig7_frobenius(m_values=(4,), n_draws=2, rng=0, n_jobs=1)
    zero = dataclasses.replace(res, diff_stderr={k: np.zeros_like(v) for k, v in res.diff_stderr.items()})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(zero.z("orthogonal", "iid")).all()
        assert np.isfinite(res.z("orthogonal", "iid")).all()
    scan = attention.attention_scan(("iid", "simplex"), seq_lens=(8,), logit_stds=(0.5,), m_values=(4,),
                                    n_draws=2, d_head=4, n_jobs=1)
    zero = dataclasses.replace(scan, diff_stderr={k: np.zeros_like(v) for k, v in scan.diff_stderr.items()},
                               stderr={k: np.zeros_like(v) for k, v in scan.stderr.items()})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(zero.z(("prf", "simplex"), ("prf", "iid"))).all()
        assert np.isnan(zero.uniform_z("prf", "simplex")).all()
        text = zero.format()
    assert "(n/a)" in text and "inf" not in text
