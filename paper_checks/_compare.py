"""The comparisons every check uses: the proof suite, its mutation tests and the unit tests.

One home for the statistical thresholds and the digit comparisons of both
suites (``tests/`` imports them from here).

Exact comparisons: relative difference of two independent computations at a
stated number of significant digits (:func:`agrees`, :func:`assert_agree`).

Monte Carlo comparisons: z = (estimate - expected) / standard error with
|z| <= Z_CRIT.  Z_CRIT = 4.5 gives a two-sided false-alarm probability of
6.8e-6 per comparison under the normal approximation; a check making k
comparisons states its family-wise bound k * 6.8e-6 in its docstring.
Ordering claims ("SimRF beats ORF") are one-sided tests at Z_ONE_SIDED =
3.09 (false alarm 1e-3 each); their power check is the reversed claim.
A test making k comparisons at a stated family-wise false-alarm probability
(FAMILY_ALPHA = 1e-4 unless it says otherwise) uses the Bonferroni threshold
:func:`z_limit` (k) for its z-scores and FAMILY_ALPHA / k for its p-values.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
from mpmath import mp

Z_CRIT = 4.5
FALSE_ALARM = math.erfc(Z_CRIT / math.sqrt(2))  # 6.8e-6
Z_ONE_SIDED = 3.09
FALSE_ALARM_ONE_SIDED = math.erfc(Z_ONE_SIDED / math.sqrt(2)) / 2  # 1.0e-3
Z_1E3 = 3.29  # two-sided, false-alarm probability 1.0e-3 per test
FAMILY_ALPHA = 1e-4


def z_limit(k, family_alpha=FAMILY_ALPHA):
    """Two-sided Bonferroni threshold for k comparisons at family-wise false-alarm probability family_alpha:
    |z| < z_limit(k) for each (normal approximation)."""
    return -NormalDist().inv_cdf(family_alpha / (2 * k))


def rel_diff(a, b):
    """|a - b| / max(|a|, |b|) (0 when both vanish)."""
    a, b = mp.mpf(a), mp.mpf(b)
    scale = max(abs(a), abs(b))
    return abs(a - b) / scale if scale else mp.mpf(0)


def agrees(a, b, digits):
    """True when a and b agree to `digits` significant digits."""
    return rel_diff(a, b) <= mp.mpf(10) ** (-digits)


def assert_agree(a, b, digits, record=None, what=""):
    r = rel_diff(a, b)
    if record is not None:
        record(r, "rel")
    assert r <= mp.mpf(10) ** (-digits), f"{what}: relative difference {mp.nstr(r, 3)} > 1e-{digits}"
    return r


def z_score(mean, stderr, expected):
    return (float(mean) - float(expected)) / float(stderr)


def mc_agrees(estimate, expected, z_crit=Z_CRIT):
    """True when a Monte Carlo Estimate is within z_crit standard errors of `expected`."""
    return abs(z_score(estimate.mean, estimate.stderr, expected)) <= z_crit


def assert_mc_agree(estimate, expected, record=None, what="", z_crit=Z_CRIT):
    z = z_score(estimate.mean, estimate.stderr, expected)
    if record is not None:
        record(abs(z), "sigma")
    assert abs(z) <= z_crit, (f"{what}: Monte Carlo {float(estimate.mean):.6g} +- {float(estimate.stderr):.2g} "
                              f"vs {float(expected):.6g} (z = {z:.2f})")
    return z


class SampleEstimate:
    """Mean and standard error of per-draw samples (the interface of montecarlo.Estimate)."""

    def __init__(self, samples):
        samples = np.asarray(samples, dtype=float)
        self.mean = samples.mean()
        self.stderr = samples.std(ddof=1) / np.sqrt(samples.size)


def point_pair(d, seed, xn, dist):
    """x with |x| = xn in a random direction and y = x + a random step of length dist (seeded)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(d)
    x *= xn / np.linalg.norm(x)
    e = rng.standard_normal(d)
    return x, x + dist * e / np.linalg.norm(e)


def pair_with_norms(d, xn, yn, v, seed=0):
    """Vectors x, y in R^d with |x| = xn, |y| = yn and |x + y| = v (a random plane)."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((d, 2)))
    cos = (v * v - xn * xn - yn * yn) / (2 * xn * yn)
    return xn * q[:, 0], yn * (cos * q[:, 0] + np.sqrt(max(0.0, 1 - cos * cos)) * q[:, 1])
