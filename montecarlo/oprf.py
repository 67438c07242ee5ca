r"""Optimised positive random features (OPRFs, FAVOR++): the sampling side of the ``"oprf"`` feature kind.

:math:`\phi(x) = (1-4A)^{d/4}m^{-1/2}e^{A\|w_i\|^2 + \sqrt{1-4A}\,w_i^\top x - c\|x\|^2}`, A < 1/8
(closed forms and the theorem that the pair term does not depend on A: :mod:`theory.oprf`).  The log-feature
map needs :math:`\|w_i\|^2` (the record's ``statistics``); the estimators draw it with the projections on the
fast path.  A <= 0 keeps every log-feature below :math:`\|x\|^2(1-4A)/(4|A|)\cdot` ... bounded: the exponent
:math:`A\|w\|^2 + Bw^\top x` is at most :math:`B^2\|x\|^2/(4|A|)` for A < 0, so no overflow in float32 for
unit-scale data.

A for a data set (FAVOR++): :func:`data_optimal_a` from the mean statistics of queries and keys,
:math:`s = (\overline{\|x\|^2} + \overline{\|y\|^2} + 2\bar x^\top\bar y)/d`, the mean of
:math:`\|x_i + y_j\|^2/d` over all pairs, in O((N + N') d).
"""

from __future__ import annotations

import math
import sys

import array_api_compat
import numpy as np

from theory.feature_kinds import register
from theory.validation import ArgumentTypeError, describe

from ._backend import namespace, to_numpy
from ._checks import check_data

__all__ = ["batch_pair_statistic", "check_a", "data_optimal_a", "moments_optimal_a", "optimal_a", "pair_statistic"]


def check_a(A, name="A"):
    """A as a float, refused unless a finite real < 1/8."""
    if isinstance(A, (bool, np.bool_)) or not isinstance(A, (int, float, np.integer, np.floating)):
        raise ArgumentTypeError(f"{name} must be a real number < 1/8, got {describe(A)}")
    a = float(A)
    if not (math.isfinite(a) and a < 0.125):
        raise ValueError(f"{name} must be a finite real < 1/8 (the OPRF variance is finite only there; A <= 0 "
                         f"keeps the features bounded), got {describe(A)}")
    return a


def optimal_a(s):
    r""":math:`A^* = (1 - 2s - \sqrt{(2s+1)^2 + 8s})/16` (float64 twin of :func:`theory.oprf.optimal_a`,
    evaluated as :math:`-s/(16A_+)` with the other root :math:`A_+`, accurate at tiny s); ``s >= 0`` a float
    or numpy array (checked), or a torch / cupy array (elementwise on its device, in its dtype, not read back
    to the host: the caller checks it)."""
    backend = _device_backend(s)
    if backend:
        return _a_star(s, namespace(backend))
    s = np.asarray(s, dtype=np.float64)
    if not np.all(np.isfinite(s)) or np.any(s < 0):
        raise ValueError(f"s must be finite and >= 0 (a mean squared norm over d), got {describe(s)}")
    out = _a_star(s, np)
    return float(out) if out.ndim == 0 else out


def _a_star(s, xp):
    """A* without cancellation on either side of s = 1/2: -s / (16 A_+), A_+ = ((1 - 2s) + sqrt((2s + 1)^2 + 8s))
    / 16, below (at tiny s A* ~ -s / 2); -(sqrt((2s + 1)^2 + 8s) + 2s - 1) / 16, a sum of non-negative terms,
    above (at large s A* ~ -s / 4; the first form's denominator cancels there: A* 2x off at s = 1e7 and -inf at
    1e8 in float32), with the root as t sqrt(1 + 4 (s / t)(2 / t)), t = 2s + 1, and each term over 16 first,
    so that nothing overflows before A* does.  Each branch sees s clipped to its side (no inf or NaN in the
    branch not taken); NaN stays NaN."""
    lo = xp.clip(s, None, 0.5)
    hi = xp.clip(s, 0.5, None)
    small = -lo / ((1 - 2 * lo) + xp.sqrt((2 * lo + 1) ** 2 + 8 * lo))
    t = 2 * hi + 1
    big = -(t / 16 * xp.sqrt(1 + 4 * (hi / t) * (2 / t)) + (hi / 8 - 1 / 16))
    return xp.where(s < 0.5, small, big)


def _device_backend(x):
    """"torch" or "cupy" for an array of theirs (used as it is, never read back), else None."""
    for name, cls in (("torch", "Tensor"), ("cupy", "ndarray")):  # (isinstance: torch.compile traces it)
        module = sys.modules.get(name)
        if module is not None and isinstance(x, getattr(module, cls)):
            return name
    return None


@register("oprf", "data_parameters")
def _data_parameters(rho, xp):
    r"""FAVOR++'s rule: :math:`A = A^*(\rho)` (:func:`optimal_a`, elementwise)."""
    return {"A": _a_star(rho, xp)}


def data_optimal_a(X, Y=None):
    r"""FAVOR++'s A for queries X (N, d) and keys Y (N', d) (default X): :func:`optimal_a` of
    :func:`pair_statistic` (:math:`s = \frac1d\overline{\|x_i + y_j\|^2}` over all pairs)."""
    return optimal_a(pair_statistic(X, Y))


def pair_statistic(X, Y=None):
    r""":math:`s = \frac1d\overline{\|x_i + y_j\|^2}` over all pairs of rows of X (N, d) and Y (N', d)
    (default X), computed from the means in O((N + N') d): the statistic a kind's ``data_parameters`` rule
    reads.  (:func:`batch_pair_statistic`: per sequence, with padding, on the arrays' device.)"""
    xp = namespace("numpy")
    X = np.asarray(to_numpy(check_data(X, xp, "X", 2)), dtype=np.float64)
    Y = X if Y is None else np.asarray(to_numpy(check_data(Y, xp, "Y", 2, X.shape[1])), dtype=np.float64)
    if X.shape[0] == 0 or Y.shape[0] == 0:
        raise ValueError("X and Y must hold at least one row each")
    return float(batch_pair_statistic(X, Y))


def batch_pair_statistic(X, Y, x_pad=None, y_pad=None, xp=None):
    r""":func:`pair_statistic` per sequence: X (..., N, d), Y (..., N', d) arrays of one backend (numpy, torch,
    cupy), ``x_pad`` (..., N) / ``y_pad`` (..., N') bool, True at rows left out (padding), or None; returns
    the statistic (...) over the unpadded pairs (0 for a sequence with no unpadded row), elementwise on the
    arrays' device, in their dtype, with no check and no read-back: the form
    :class:`montecarlo.nn.PRFAttention` reads for a kind's data rule.  ``xp``: the arrays' namespace where the
    caller has it (under torch.compile no lookup is traced).  Rows whose squared norm is not finite (NaN, inf,
    or overflowing) are left out as padded rows are: they change no other row's statistic."""
    xp = array_api_compat.array_namespace(X) if xp is None else xp
    mean_sq_x, mean_x = _row_moments(X, x_pad, xp)
    mean_sq_y, mean_y = _row_moments(Y, y_pad, xp)
    return _moments_statistic(mean_sq_x, mean_x, mean_sq_y, mean_y, xp)


def _row_moments(X, pad, xp):
    """Mean squared norm (...) and mean row (..., d) over the rows of X (..., N, d) not marked in ``pad`` and with
    a finite squared norm: padded content (NaN, inf or anything else) and a non-finite row never reach the
    statistic (selected out, not multiplied by 0: 0 * NaN is NaN), so they change no other row's A; a row left
    out alone is NaN in its own output only."""
    sq = xp.sum(X * X, axis=-1)
    kept = xp.isfinite(sq)
    if pad is not None:
        kept = xp.logical_and(kept, xp.logical_not(pad))
    zero = xp.zeros_like(sq)
    count = xp.sum(xp.astype(kept, X.dtype), axis=-1)
    count = xp.where(count > 0, count, xp.ones_like(count))
    return (xp.sum(xp.where(kept, sq, zero), axis=-1) / count,
            xp.sum(xp.where(kept[..., None], X, xp.zeros_like(X)), axis=-2) / count[..., None])


def moments_optimal_a(mean_sq_x, mean_x, mean_sq_y, mean_y):
    r"""FAVOR++'s A from the mean statistics: :math:`s = (\overline{\|x\|^2} + \overline{\|y\|^2}
    + 2\bar x^\top\bar y)/d` (the mean of :math:`\|x_i + y_j\|^2/d` over all pairs), then :func:`optimal_a`.
    For callers that hold the moments already (sparse data, running statistics)."""
    mean_x = np.asarray(mean_x, dtype=np.float64).ravel()
    mean_y = np.asarray(mean_y, dtype=np.float64).ravel()
    return optimal_a(float(_moments_statistic(np.float64(mean_sq_x), mean_x, np.float64(mean_sq_y), mean_y, np)))


def _moments_statistic(mean_sq_x, mean_x, mean_sq_y, mean_y, xp):
    """s from the moments, elementwise over leading axes (at least 0: rounding can take the sum of a
    near-cancelling pair below; NaN stays NaN)."""
    s = mean_sq_x + mean_sq_y + 2 * xp.sum(mean_x * mean_y, axis=-1)
    return xp.maximum(s, xp.zeros_like(s)) / mean_x.shape[-1]


def _a_terms(A, xp):
    """(A, sqrt(1 - 4A), log(1 - 4A)): a Python number is checked (< 1/8); an array of the backend (e.g. one A
    per sequence, broadcastable against the projections) is used as given, without reading it back to the host
    (the caller checks it when it asks for checks)."""
    if hasattr(A, "shape") and getattr(A, "ndim", 0) > 0 or _device_backend(A):
        return A, xp.sqrt(1 - 4 * A), xp.log1p(-4 * A)
    a = check_a(A)
    return a, math.sqrt(1 - 4 * a), math.log1p(-4 * a)


@register("oprf", "log_features")
def _log_features(proj, sq, m, c, xp, w_sq=None, d=None, A=None):
    r""":math:`\sqrt{1-4A}\,w_i^\top x + A\|w_i\|^2 - c\|x\|^2 - \tfrac12\log m + \tfrac d4\log(1-4A)`
    (overwrites ``proj``; A a number, or an array broadcastable against ``proj``)."""
    a, b, log_1m4a = _map_terms(A, w_sq, d, xp)
    proj *= b
    proj += a * w_sq
    proj += -(c * sq - _constant(m, d, log_1m4a))  # (as the prf map)
    return proj


@register("oprf", "linear_log_features")
def _linear_form(w, m, xp, w_sq=None, d=None, A=None):
    r"""Rows :math:`\sqrt{1-4A}\,w_i`, constants :math:`A\|w_i\|^2 - \tfrac12\log m + \tfrac d4\log(1-4A)`
    for one A (a number or a 0-d array); ``None`` for an array of several values (one A per sequence)."""
    if getattr(A, "ndim", 0) > 0:
        return None
    a, b, log_1m4a = _map_terms(A, w_sq, d, xp)
    return w * b, a * w_sq + _constant(m, d, log_1m4a)


def _map_terms(A, w_sq, d, xp):
    """_a_terms(A) once the map's arguments are all there."""
    if A is None or w_sq is None or d is None:
        raise ValueError("the OPRF map needs A, the squared norms w_sq of the directions and d "
                         "(montecarlo.random_features(kind='oprf', A=...) passes them)")
    return _a_terms(A, xp)


def _constant(m, d, log_1m4a):
    r""":math:`\tfrac d4\log(1-4A) - \tfrac12\log m`, the map's constant."""
    return 0.25 * d * log_1m4a - 0.5 * math.log(m)


@register("oprf", "statistic")
def _statistic(proj, xp, w_sq=None, d=None, A=None):
    r""":math:`\log b_i = 2A\|w_i\|^2 + \sqrt{1-4A}\,w_i^\top v + \tfrac d2\log(1-4A)`."""
    a, b, log_1m4a = _a_terms(A, xp)
    return b * proj + 2 * a * w_sq + 0.5 * d * log_1m4a


@register("oprf", "float_parameters")
def _float_parameters(d, v_norm, A=None):
    """{"A": A} checked; None -> the pointwise optimum A*(|v|^2 / d)."""
    return {"A": optimal_a(v_norm * v_norm / d) if A is None else check_a(A)}
