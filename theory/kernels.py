r"""Kernels, the estimators' MSE as a function of the RF-conformity, ensembles.

The formulas: :ref:`guide-theory.kernels` (``docs/guide/derivations.rst``).
"""

from __future__ import annotations

from collections.abc import Sequence

import mpmath

from ._context import mp
from ._checks import (
    check_int,
    check_nonnegative,
    check_norms_and_v,
    guarded,
    square,
    to_mpf,
)
from .registry import check_dimension
from .validation import show_int

from .feature_kinds import KERNELS, check_kernel  # noqa: F401  (one home: the feature-kind registry)


@guarded(grid=("distance",))
def gaussian_kernel(distance):
    r"""Gaussian kernel :math:`\exp(-z^2/2)` as a function of :math:`z = \|x-y\|` (scalar or array_like)."""
    z = check_nonnegative(distance, "distance")
    return mp.exp(-square(z) / 2)


@guarded(grid=("dot",))
def softmax_kernel(dot):
    r"""Softmax kernel :math:`\exp(x^\top y)` as a function of the dot product (scalar or array_like)."""
    return mp.exp(to_mpf(dot, "dot"))


@guarded(grid=("x_norm", "y_norm"))
def softmax_to_gaussian_factor(x_norm, y_norm):
    r"""Factor :math:`e^{-\|x\|^2/2-\|y\|^2/2}` with :math:`K_{\mathrm{gauss}} = K_{\mathrm{smax}}\cdot` factor."""
    xn = check_nonnegative(x_norm, "x_norm")
    yn = check_nonnegative(y_norm, "y_norm")
    return mp.exp(norm_exponent(xn, yn, -0.5))


def norm_exponent(xn, yn, scale):
    r""":math:`s(\|x\|^2 + \|y\|^2)` exactly (no rounding), the argument of every kernel prefactor
    :math:`e^{-2c(\|x\|^2+\|y\|^2)}`.

    ``xn``, ``yn`` are mpfs and ``scale`` a binary number (a float such as -2c or -1/2, an int or an mpf).
    Formed at mpmath's prec 0 (exact): ``exp`` of an argument of size :math:`\|x\|^2` magnifies a rounding of it
    by :math:`\|x\|^2` (at the working precision, a relative error 2.2e-14 at :math:`\|x\| = 6\times10^4`, the
    decimal exponent off by 85 at :math:`6\times10^{12}`); exp of the exact argument is correctly rounded.
    """
    libmp = mpmath.libmp
    total = libmp.mpf_add(square(xn)._mpf_, square(yn)._mpf_, 0)
    s = scale._mpf_ if hasattr(scale, "_mpf_") else (
        libmp.from_int(scale) if isinstance(scale, int) else libmp.from_float(float(scale)))
    return mp.make_mpf(libmp.mpf_mul(s, total, 0))


class BlockSizes(Sequence):
    """The block sizes of m features in dimension d, as a read-only sequence in O(1) memory.

    Equal to (and compares equal with) the list ``[d] * (m // d) + [m % d]``
    (the last entry only when d does not divide m), without building it:
    ``len``, indexing, iteration and ``==`` work as for that list, and a slice
    returns a list of its own length.
    """

    __slots__ = ("d", "full", "remainder")

    def __init__(self, d, m):
        self.d = d
        self.full, self.remainder = divmod(m, d)

    def __len__(self):
        return self.full + (1 if self.remainder else 0)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError(f"block indices must be integers or slices, got {type(index).__name__}")
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("block index out of range")
        return self.d if index < self.full else self.remainder

    def __eq__(self, other):
        if isinstance(other, BlockSizes):
            return (self.d, self.full, self.remainder) == (other.d, other.full, other.remainder) or (
                len(self) == len(other) == 0)
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __hash__(self):
        return hash((self.d, self.full, self.remainder))

    def __repr__(self):
        tail = f" + [{self.remainder}]" if self.remainder else ""
        return f"BlockSizes([{self.d}] * {self.full}{tail})"


def block_sizes(d, m):
    """Sizes of the independent blocks used for m features in dimension d.

    ``m // d`` full blocks of d rows, then one truncated block of ``m % d``
    rows when d does not divide m.  Returned as a :class:`BlockSizes`
    sequence, O(1) in memory for any m (it compares equal to the list).
    """
    d = check_int(d, "d", 1)
    m = check_int(m, "m", 1)
    return BlockSizes(d, m)


def coupled_pairs(d, m):
    r"""Number P of ordered pairs (i, j), i != j, lying in the same block.

    Closed form: with m = q d + r (0 <= r < d), :math:`P = q\,d(d-1) + r(r-1)`
    (O(1) for any m, no list of blocks).
    """
    d = check_int(d, "d", 1)
    m = check_int(m, "m", 1)
    q, r = divmod(m, d)
    return q * d * (d - 1) + r * (r - 1)


@guarded(grid=("rho_block", "rho_independent", "d", "m"))
def ensemble_conformity(rho_block, rho_independent, d, m):
    r"""Pair-averaged conformity of an ensemble of independent blocks.

    :math:`\rho_{\mathrm{ens}} = (P\rho_c + (m(m-1)-P)\rho_{\mathrm{ind}})/(m(m-1))`
    with P from :func:`coupled_pairs`.

    Parameters
    ----------
    rho_block, rho_independent : real
        Conformity of a coupled pair and of an independent pair.
    d : int >= 1
    m : int >= 2
        With one feature there are no pairs and the conformity is undefined.
    """
    rb = to_mpf(rho_block, "rho_block")
    ri = to_mpf(rho_independent, "rho_independent")
    d = check_dimension(d)
    m = check_int(m, "m", 2, "(the conformity averages over pairs of features)")
    p = coupled_pairs(d, m)
    total = m * (m - 1)
    return (p * rb + (total - p) * ri) / total


def _prf_prefactor(xn, yn, kernel):
    return mp.exp(norm_exponent(xn, yn, -2 if kernel == "gaussian" else -1))


def _check_pair_conformity(rho, m, mean, var, second_moment, kind):
    r"""rho as an mpf, refused unless some joint law of m features has it.

    The variance of the sum of the m features is
    :math:`m\,\mathrm{Var} + m(m-1)(\rho - \mu^2) \ge 0` and, by
    Cauchy-Schwarz, :math:`\rho \le \mathbb E[b^2]`; outside
    :math:`[\mu^2 - \mathrm{Var}/(m-1), \mathbb E[b^2]]` the MSE formula would
    return a negative number.
    """
    r = to_mpf(rho, "rho")
    if m == 1:
        return r
    lo = mean - var / (m - 1)
    hi = second_moment
    slack = mp.mpf(2) ** (8 - mp.prec) * max(abs(lo), abs(hi), 1)
    if not lo - slack <= r <= hi + slack:
        raise ValueError(
            f"rho must lie in [{mp.nstr(lo, 8)}, {mp.nstr(hi, 8)}] for m = {show_int(m)} {kind} features (no joint law "
            f"of the features has another pair-averaged conformity), got {mp.nstr(r, 8)}")
    return r


@guarded(grid=("rho", "v", "m", "x_norm", "y_norm"))
def prf_mse_from_conformity(rho, v, *, m, x_norm, y_norm, kernel="gaussian"):
    r"""PRF MSE from the pair-averaged RF-conformity (Thm 3.2, ``mse_and_conformity``).

    Parameters
    ----------
    rho : real or array_like
        Pair-averaged conformity :math:`\frac{1}{m(m-1)}\sum_{i\ne j}\mathbb{E}[b_ib_j]`
        (ignored when m = 1); must lie in
        :math:`[e^{v^2} - \frac{e^{2v^2}-e^{v^2}}{m-1}, e^{2v^2}]`, the values a joint law
        of m features can have.
    v : real >= 0 or array_like
        :math:`v = \|x+y\|`.
    m : int >= 1, keyword-only
        Number of random features.
    x_norm, y_norm : real >= 0, keyword-only
        :math:`\|x\|`, :math:`\|y\|`.
    kernel : {'gaussian', 'softmax'}, keyword-only
        The Gaussian-kernel estimator of eq. ``def_prf`` or the softmax one
        (whose MSE is :math:`e^{\|x\|^2+\|y\|^2}` times larger).

    Returns
    -------
    mpf
        :math:`\frac{e^{-2x^2-2y^2}}{m}((e^{2v^2}-e^{v^2}) + (m-1)(\rho-e^{v^2}))`.
    """
    m = check_int(m, "m", 1)
    xn, yn, vv = check_norms_and_v(x_norm, y_norm, v)
    check_kernel(kernel)
    v2 = square(vv)
    e1 = mp.exp(v2)
    diag = e1 * mp.expm1(v2)
    r = _check_pair_conformity(rho, m, e1, diag, e1 * e1, "PRF")
    pairs = (m - 1) * (r - e1) if m > 1 else 0
    return _prf_prefactor(xn, yn, kernel) * (diag + pairs) / m


@guarded(grid=("rho", "z", "m"))
def rff_mse_from_conformity(rho, z, *, m):
    r"""RFF MSE from the pair-averaged RFF conformity (App. A.5).

    :math:`\frac1m\big(\frac{(1-e^{-z^2})^2}{2} + (m-1)(\rho - e^{-z^2})\big)`
    where :math:`\rho = \frac{1}{m(m-1)}\sum_{i\ne j}\mathbb{E}[a_ia_j]`,
    :math:`a_i = \cos(w_i^\top z)`; rho must lie in
    :math:`[e^{-z^2} - \frac{(1-e^{-z^2})^2}{2(m-1)}, \frac{1+e^{-2z^2}}{2}]`.
    m (keyword-only) >= 1.
    """
    m = check_int(m, "m", 1)
    zz = check_nonnegative(z, "z")
    z2 = square(zz)
    mean2 = mp.exp(-z2)
    diag = mp.expm1(-z2) ** 2 / 2
    r = _check_pair_conformity(rho, m, mean2, diag, (1 + mp.exp(-2 * z2)) / 2, "RFF")
    pairs = (m - 1) * (r - mean2) if m > 1 else 0
    return (diag + pairs) / m
