r"""Kernels, the estimators' MSE as a function of the RF-conformity, ensembles.

Kernels (Sec. 1 of the paper)
-----------------------------
:math:`K_{\mathrm{gauss}}(x, y) = \exp(-\|x-y\|^2/2)`,
:math:`K_{\mathrm{smax}}(x, y) = \exp(x^\top y)`, and
:math:`K_{\mathrm{gauss}} = K_{\mathrm{smax}}\exp(-\|x\|^2/2 - \|y\|^2/2)`.

MSE and conformity (Thm 3.2, ``mse_and_conformity``; App. A.5 for RFFs)
-----------------------------------------------------------------------
For PRFs with m features and pair-averaged conformity
:math:`\rho = \frac{1}{m(m-1)}\sum_{i\ne j}\mathbb{E}[b_i b_j]`,
:math:`b_i = e^{w_i^\top(x+y)}`,

.. math::
    \mathrm{MSE} = \frac{e^{-2\|x\|^2-2\|y\|^2}}{m}\Big((e^{2v^2}-e^{v^2})
                   + (m-1)(\rho - e^{v^2})\Big),

and for RFFs with :math:`\rho_{\mathrm{RFF}} = \frac{1}{m(m-1)}\sum_{i\ne j}
\mathbb{E}[\cos(w_i^\top z)\cos(w_j^\top z)]`,

.. math::
    \mathrm{MSE} = \frac1m\Big(\frac{(1-e^{-z^2})^2}{2} + (m-1)(\rho_{\mathrm{RFF}}-e^{-z^2})\Big).

Ensembles of independent blocks
-------------------------------
For m > d the paper uses independent blocks of d coupled vectors (footnote 1);
when d does not divide m the last block holds the first ``m mod d`` rows of an
independent d x d block.  Pairs inside a block are coupled (conformity
:math:`\rho_c`), pairs across blocks are independent (:math:`\mathbb{E}[b_ib_j]
= e^{v^2}`).  With :math:`P = \sum_{\mathrm{blocks}} b(b-1)` coupled ordered pairs,

.. math::
    \rho_{\mathrm{ens}} = \frac{P\rho_c + (m(m-1)-P)e^{v^2}}{m(m-1)},\qquad
    \mathrm{MSE} = \frac{e^{-2\|x\|^2-2\|y\|^2}}{m}\Big((e^{2v^2}-e^{v^2})
                   + \frac{P}{m}(\rho_c - e^{v^2})\Big).

A truncated block keeps the pairwise geometry of the full block, so the same
:math:`\rho_c` applies to its pairs.
"""

from __future__ import annotations

from ._context import mp

from ._checks import (
    check_int,
    check_nonnegative,
    check_norms_and_v,
    guarded,
    to_mpf,
)

KERNELS = ("gaussian", "softmax")


def _check_kernel(kernel):
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of 'gaussian', 'softmax', got {kernel!r}")
    return kernel


@guarded()
def gaussian_kernel(distance):
    r"""Gaussian kernel :math:`\exp(-z^2/2)` as a function of :math:`z = \|x-y\|`."""
    z = check_nonnegative(distance, "distance")
    return mp.exp(-z * z / 2)


@guarded()
def softmax_kernel(dot):
    r"""Softmax kernel :math:`\exp(x^\top y)` as a function of the dot product."""
    return mp.exp(to_mpf(dot, "dot"))


@guarded()
def softmax_to_gaussian_factor(x_norm, y_norm):
    r"""Factor :math:`e^{-\|x\|^2/2-\|y\|^2/2}` with :math:`K_{\mathrm{gauss}} = K_{\mathrm{smax}}\cdot` factor."""
    xn = check_nonnegative(x_norm, "x_norm")
    yn = check_nonnegative(y_norm, "y_norm")
    return mp.exp(-(xn * xn + yn * yn) / 2)


def block_sizes(d, m):
    """Sizes of the independent blocks used for m features in dimension d.

    ``m // d`` full blocks of d rows, then one truncated block of ``m % d``
    rows when d does not divide m.
    """
    d = check_int(d, "d", 1)
    m = check_int(m, "m", 1)
    sizes = [d] * (m // d)
    if m % d:
        sizes.append(m % d)
    return sizes


def coupled_pairs(d, m):
    r"""Number P of ordered pairs (i, j), i != j, lying in the same block.

    Closed form: with m = q d + r (0 <= r < d), :math:`P = q\,d(d-1) + r(r-1)`
    (O(1) for any m, no list of blocks).
    """
    d = check_int(d, "d", 1)
    m = check_int(m, "m", 1)
    q, r = divmod(m, d)
    return q * d * (d - 1) + r * (r - 1)


def ensemble_conformity(rho_block, rho_independent, d, m):
    r"""Pair-averaged conformity of an ensemble of independent blocks.

    :math:`\rho_{\mathrm{ens}} = (P\rho_c + (m(m-1)-P)\rho_{\mathrm{ind}})/(m(m-1))`
    with P from :func:`coupled_pairs`.  Requires m >= 2 (with one feature
    there are no pairs and the conformity is undefined).
    """
    m = check_int(m, "m", 2, "(the conformity averages over pairs of features)")
    p = coupled_pairs(d, m)
    total = m * (m - 1)
    return (p * rho_block + (total - p) * rho_independent) / total


def _prf_prefactor(xn, yn, kernel):
    if kernel == "gaussian":
        return mp.exp(-2 * (xn * xn + yn * yn))
    return mp.exp(-(xn * xn + yn * yn))


@guarded()
def prf_mse_from_conformity(rho, m, x_norm, y_norm, v, kernel="gaussian"):
    r"""PRF MSE from the pair-averaged RF-conformity (Thm 3.2, ``mse_and_conformity``).

    Parameters
    ----------
    rho : real
        Pair-averaged conformity :math:`\frac{1}{m(m-1)}\sum_{i\ne j}\mathbb{E}[b_ib_j]`
        (ignored when m = 1).
    m : int
        Number of random features, >= 1.
    x_norm, y_norm, v : real
        :math:`\|x\|`, :math:`\|y\|` and :math:`v = \|x+y\|`.
    kernel : {'gaussian', 'softmax'}
        The Gaussian-kernel estimator of eq. ``def_prf`` or the softmax one
        (whose MSE is :math:`e^{\|x\|^2+\|y\|^2}` times larger).

    Returns
    -------
    mpf
        :math:`\frac{e^{-2x^2-2y^2}}{m}((e^{2v^2}-e^{v^2}) + (m-1)(\rho-e^{v^2}))`.
    """
    m = check_int(m, "m", 1)
    xn, yn, vv = check_norms_and_v(x_norm, y_norm, v)
    _check_kernel(kernel)
    v2 = vv * vv
    diag = mp.exp(v2) * mp.expm1(v2)
    pairs = (m - 1) * (to_mpf(rho, "rho") - mp.exp(v2)) if m > 1 else 0
    return _prf_prefactor(xn, yn, kernel) * (diag + pairs) / m


@guarded()
def rff_mse_from_conformity(rho, m, z):
    r"""RFF MSE from the pair-averaged RFF conformity (App. A.5).

    :math:`\frac1m\big(\frac{(1-e^{-z^2})^2}{2} + (m-1)(\rho - e^{-z^2})\big)`
    where :math:`\rho = \frac{1}{m(m-1)}\sum_{i\ne j}\mathbb{E}[a_ia_j]`,
    :math:`a_i = \cos(w_i^\top z)`.
    """
    m = check_int(m, "m", 1)
    zz = check_nonnegative(z, "z")
    z2 = zz * zz
    diag = mp.expm1(-z2) ** 2 / 2
    pairs = (m - 1) * (to_mpf(rho, "rho") - mp.exp(-z2)) if m > 1 else 0
    return (diag + pairs) / m
