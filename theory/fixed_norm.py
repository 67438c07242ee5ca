r"""Fixed-norm orthogonal random features: the bias and MSE of a scheme libraries ship (beyond the paper).

performer-pytorch's ``gaussian_orthogonal_random_matrix(..., scaling=1)`` (and other
libraries' "regularised" orthogonal features) give every row the norm
:math:`\sqrt d` instead of a :math:`\chi_d` norm: :math:`w_i = \sqrt d\,u_i` with
:math:`u_i` the orthonormal rows of a Haar matrix (blocks of d rows, the last
truncated, independent blocks).  The rows are not Gaussian, so the estimators
are biased.  With :math:`F(t) = {}_0F_1(;\frac d2;t)` (for a uniform unit vector
u, :math:`\mathbb E e^{r u^\top v} = F(r^2v^2/4)`, :math:`\mathbb E\cos(ru^\top z)
= F(-r^2z^2/4)`):

* PRF mean per direction :math:`\mu = \mathbb E e^{w^\top v} = F(dv^2/4)` instead of
  :math:`e^{v^2/2}` (1.612 vs 1.649 at d = 8, v = 1), second moment
  :math:`F(dv^2)`; within a block :math:`\|w_i + w_j\| = \sqrt{2d}`, so the pair
  term is :math:`F(dv^2/2)`; across blocks (independent) :math:`\mu^2`.
* RFF mean :math:`F(-dz^2/4) = \Gamma(\frac d2)(\frac2t)^{d/2-1}J_{d/2-1}(t)`,
  :math:`t = \sqrt d\,z` (the Bessel kernel, not the Gaussian one), second moment
  :math:`(1 + F(-dz^2))/2`, pair term within a block :math:`F(-dz^2/2)`.

With P coupled ordered pairs (:func:`theory.coupled_pairs`) and the squared
prefactor :math:`\pi^2` of the kind (:math:`e^{-2c(\|x\|^2+\|y\|^2)}` for PRFs, 1
for RFFs), the estimator :math:`\hat K = \pi\frac1m\sum_i b_i` has

.. math::
    \mathbb E\hat K - K = \pi(\mu - \mu_0),\qquad
    \mathrm{MSE} = \frac{\pi^2}{m}\Big(\mathrm{Var}\,b + \frac Pm(\rho - \mu^2)\Big) + \pi^2(\mu - \mu_0)^2,

:math:`\mu_0 = e^{v^2/2}` (PRF) or :math:`e^{-z^2/2}` (RFF).  The squared bias does not
shrink with m: for m large the fixed-norm MSE is worse than the unbiased ORF's
whatever its variance.  ``python -m montecarlo audit`` reports a sampler's measured
bias against :func:`fixed_norm_bias` when its rows all have one norm.

Domain: d >= 1, v (or z) >= 0 as far as mpmath's 0F1 reaches (any v for PRFs;
RFFs: the alternating series costs about :math:`\sqrt d z` guard digits).
"""

from __future__ import annotations

from ._checks import check_dimension, check_int, check_norms_and_v, guarded, square
from ._context import mp
from .conformities import check_v
from .feature_kinds import check_kind, kernel_c
from .kernels import coupled_pairs

__all__ = ["fixed_norm_bias", "fixed_norm_mean", "fixed_norm_mse"]


def _f(d, t):
    return mp.hyp0f1(mp.mpf(d) / 2, t)


def _moments(kind, d, vv):
    """(mu, E b^2, pair term within a block, mu_0) for 'prf' (t = v) or 'rff' (t = z)."""
    v2 = square(vv)
    sign = 1 if kind == "prf" else -1
    mu = _f(d, sign * d * v2 / 4)
    if kind == "prf":
        second = _f(d, d * v2)
    else:
        second = (1 + _f(d, -d * v2)) / 2
    pair = _f(d, sign * d * v2 / 2)
    return mu, second, pair, mp.exp(sign * v2 / 2)


def _kind(kind):
    check_kind(kind)
    if kind not in ("prf", "rff"):
        raise ValueError(f"kind must be 'prf' or 'rff' for the fixed-norm closed forms, got {kind!r}")
    return kind


@guarded(grid=("d", "v"))
def fixed_norm_mean(d, v, *, kind="prf"):
    r"""Mean of one direction's statistic, :math:`{}_0F_1(;\frac d2;\pm\frac{dv^2}{4})` (PRF: +,
    :math:`v = \|x + y\|`; RFF: -, :math:`v = \|x - y\|`), against :math:`e^{\pm v^2/2}` for Gaussian rows."""
    kind = _kind(kind)
    d = check_dimension(d)
    vv = check_v(v, "v" if kind == "prf" else "z")
    return _moments(kind, d, vv)[0]


@guarded(grid=("d", "v"))
def fixed_norm_bias(d, v, *, kind="prf"):
    r"""Relative bias of the fixed-norm estimate, :math:`\mathbb E\hat K/K - 1 = \mu/\mu_0 - 1` (independent of m,
    of the target kernel and of the norms of x and y): -0.0222 for PRFs at d = 8, v = 1."""
    kind = _kind(kind)
    d = check_dimension(d)
    vv = check_v(v, "v" if kind == "prf" else "z")
    mu, _, _, mu0 = _moments(kind, d, vv)
    return mu / mu0 - 1


@guarded(grid=("d", "v", "m", "x_norm", "y_norm"))
def fixed_norm_mse(d, v, *, kind="prf", x_norm=None, y_norm=None, m=None, kernel="gaussian"):
    r"""MSE of the fixed-norm orthogonal estimator (variance plus squared bias, module docstring).

    Parameters
    ----------
    d : int >= 1
    v : real >= 0
        :math:`\|x + y\|` (PRF) or :math:`z = \|x - y\|` (RFF).
    kind : {'prf', 'rff'}, keyword-only
    x_norm, y_norm : real >= 0, keyword-only
        Required for PRFs, None for RFFs.
    m : int >= 1, keyword-only
        Default d.
    kernel : {'gaussian', 'softmax'}, keyword-only
    """
    kind = _kind(kind)
    d = check_dimension(d)
    m = d if m is None else check_int(m, "m", 1)
    if kind == "prf":
        if x_norm is None or y_norm is None:
            raise ValueError("x_norm and y_norm are required for kind='prf', got None")
        xn, yn, vv = check_norms_and_v(x_norm, y_norm, v)
        log_pref = -2 * mp.mpf(kernel_c(kind, kernel)) * (square(xn) + square(yn))
    else:
        for name, value in (("x_norm", x_norm), ("y_norm", y_norm)):
            if value is not None:
                raise ValueError(f"{name} must be None for kind='rff', got {value!r}")
        kernel_c(kind, kernel)
        vv, log_pref = check_v(v, "z"), mp.mpf(0)
    mu, second, pair, mu0 = _moments(kind, d, vv)
    p_over_m = mp.mpf(coupled_pairs(d, m)) / m
    variance = ((second - mu * mu) + p_over_m * (pair - mu * mu)) / m
    return mp.exp(log_pref) * (variance + (mu - mu0) ** 2)
