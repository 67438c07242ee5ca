r"""Gram-matrix approximation error (Sec. 5.2, Fig. 7 ``fig:frobnorm``).

For data :math:`x_1, \ldots, x_N` and one draw of m features, the statistic
of Sec. 5.2 is the squared Frobenius error

.. math::
    E = \sum_{a,b=1}^N \big(\mathbf K_{ab} - \widehat{\mathbf K}_{ab}\big)^2,\qquad
    \widehat{\mathbf K}_{ab} = \phi(x_a)^\top\phi(x_b),

with :math:`\phi` the PRFs of eq. ``def_prf`` (or the softmax-kernel PRFs).
Its expectation is :math:`\sum_{a,b}\mathrm{MSE}(\widehat K(x_a, x_b))`, the
pair MSEs of Thm 3.2 (the tests compare with :func:`theory.prf_mse`).  The
functions here average E over independent draws (vectorised over draws, in
chunks of bounded memory) and return means with standard errors.

:func:`fig7_frobenius` is the paper's setting: N = 64 points in d = 64
dimensions drawn from :math:`\mathcal N(0, 0.1^2 I_d)`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import montecarlo as mc
from theory.kernels import check_kernel

from ._common import (
    CHUNK_ELEMENTS,
    check_array,
    check_bool,
    check_budget,
    check_coupling,
    check_couplings,
    check_int,
    check_positive_float,
    check_rng,
    child_rng,
    chunks,
    coupling_key,
    prf_logits,
    seed_entropy,
)



def exact_gram(X, kernel="gaussian"):
    r"""Exact Gram matrix: :math:`e^{-\|x_a-x_b\|^2/2}` (Gaussian) or :math:`e^{x_a^\top x_b}` (softmax)."""
    X = check_array(X, "X", 2)
    check_kernel(kernel)
    check_budget(X.shape[0] ** 2, "the (N, N) Gram matrix", "use fewer points")
    g = X @ X.T
    if kernel == "softmax":
        return np.exp(g)
    sq = np.diag(g)
    return np.exp(-0.5 * np.maximum(sq[:, None] + sq[None, :] - 2 * g, 0.0))


def gram_errors(X, W, kernel="gaussian", relative=False):
    r"""Squared Frobenius error of the PRF Gram estimate for each draw in W.

    Parameters
    ----------
    X : array (N, d)
    W : array (m, d) or (R, m, d)
        One or R draws of the projections.
    kernel : {'gaussian', 'softmax'}
    relative : bool
        Divide by :math:`\|\mathbf K\|_F^2`.

    Returns
    -------
    float or ndarray (R,)
        :math:`\sum_{ab}(\mathbf K_{ab} - \phi(x_a)^\top\phi(x_b))^2` per draw.
    """
    X = check_array(X, "X", 2)
    check_kernel(kernel)
    relative = check_bool(relative, "relative")
    single = np.ndim(W) == 2
    if single:  # a view with a leading draw axis (a masked array stays masked, and is refused)
        W = (W if hasattr(W, "shape") else np.asarray(W))[None]
    W = check_array(W, "W", 3, X.shape[1], "X's width")
    K = exact_gram(X, kernel)
    check_budget(X.shape[0] * W.shape[1], "the (N, m) features of one draw", "lower m")
    c = 1.0 if kernel == "gaussian" else 0.5
    n = X.shape[0]
    out = np.empty(W.shape[0])
    step = max(1, CHUNK_ELEMENTS // (n * (n + W.shape[1])))
    for sl in chunks(W.shape[0], step):
        phi = np.exp(prf_logits(X, W[sl], c))
        G = np.matmul(phi, np.swapaxes(phi, 1, 2))
        G -= K
        out[sl] = np.einsum("rab,rab->r", G, G)
    if relative:
        out /= np.sum(K * K)
    return float(out[0]) if single else out


def gram_frobenius_error(X, coupling, m, n_draws, rng=None, kernel="gaussian", relative=False,
                         return_samples=False):
    """Mean squared Frobenius error of the Gram estimate over ``n_draws`` draws (Sec. 5.2).

    Parameters
    ----------
    X : array (N, d)
    coupling : str
        Any of :data:`montecarlo.COUPLINGS`.
    m : int >= 1
    n_draws : int >= 2
    rng : None, int or numpy.random.Generator
    kernel : {'gaussian', 'softmax'}
    relative : bool
        Divide by :math:`\\|\\mathbf K\\|_F^2`.
    return_samples : bool

    Returns
    -------
    montecarlo.Estimate
        (and the per-draw errors if ``return_samples``).
    """
    X = check_array(X, "X", 2)
    coupling = check_coupling(coupling)
    m = check_int(m, "m", 1)
    n_draws = check_int(n_draws, "n_draws", 2)
    return_samples = check_bool(return_samples, "return_samples")
    check_kernel(kernel)
    W = mc.sample_weights(coupling, X.shape[1], m, rng=rng, n_draws=n_draws)
    err = gram_errors(X, W, kernel, relative)
    est = mc.Estimate(float(err.mean()), float(err.std(ddof=1) / np.sqrt(n_draws)), n_draws)
    return (est, err) if return_samples else est


@dataclass(frozen=True)
class FrobeniusCurve:
    """Gram error vs m per coupling.

    Attributes
    ----------
    m : ndarray of int
    mean, stderr : dict
        coupling -> ndarray (len(m),).
    n_draws : int
    relative : bool
    """

    m: np.ndarray
    mean: dict
    stderr: dict
    n_draws: int
    relative: bool


def frobenius_curve(X, couplings=("iid", "orthogonal", "simplex"), m_values=(16, 32, 64, 128, 256), n_draws=100,
                    rng=0, kernel="gaussian", relative=False):
    """Gram-matrix error for several couplings and numbers of features (Fig. 7).

    Each (coupling, m) cell draws from its own stream derived from ``rng``.

    Returns
    -------
    FrobeniusCurve
    """
    X = check_array(X, "X", 2)
    couplings = check_couplings(couplings)
    if isinstance(m_values, (str, bytes)) or not hasattr(m_values, "__iter__"):
        raise TypeError(f"m_values must be a sequence of integers >= 1, got {m_values!r}")
    ms = np.array([check_int(m, "m_values", 1) for m in m_values])
    if ms.size == 0:
        raise ValueError("m_values must not be empty")
    entropy = seed_entropy(rng)
    mean = {c: np.empty(ms.size) for c in couplings}
    se = {c: np.empty(ms.size) for c in couplings}
    for c in couplings:
        for j, m in enumerate(ms):
            est = gram_frobenius_error(X, c, int(m), n_draws, child_rng(entropy, coupling_key(c), m), kernel,
                                       relative)
            mean[c][j], se[c][j] = est.mean, est.stderr
    return FrobeniusCurve(ms, mean, se, int(n_draws), relative)


def paper_gram_data(rng=0, n_points=64, d=64, scale=0.1):
    r"""The data of Sec. 5.2: ``n_points`` rows :math:`x \sim \mathcal N(0, \mathrm{scale}^2 I_d)`."""
    n_points = check_int(n_points, "n_points", 1)
    d = check_int(d, "d", 1)
    scale = check_positive_float(scale, "scale")
    check_budget(n_points * d, "the (n_points, d) data", "lower n_points or d")
    return np.random.default_rng(check_rng(rng, "rng")).normal(0.0, scale, (n_points, d))


def fig7_frobenius(couplings=("iid", "orthogonal", "simplex"), m_values=(16, 32, 64, 128, 256), n_draws=100, rng=0,
                   data_rng=0):
    """Fig. 7: squared Frobenius Gram error, N = 64, d = 64, x ~ N(0, 0.1^2 I), for each coupling and m.

    Returns
    -------
    FrobeniusCurve
    """
    return frobenius_curve(paper_gram_data(check_rng(data_rng, "data_rng")), couplings, m_values, n_draws, rng)
