r"""Gram-matrix approximation error (Sec. 5.2, Fig. 7 ``fig:frobnorm``).

For data :math:`x_1, \ldots, x_N` and one draw of m features, the statistic
of Sec. 5.2 is the squared Frobenius error

.. math::
    E = \sum_{a,b=1}^N \big(\mathbf K_{ab} - \widehat{\mathbf K}_{ab}\big)^2,\qquad
    \widehat{\mathbf K}_{ab} = \phi(x_a)^\top\phi(x_b),

with :math:`\phi` the PRFs of eq. ``def_prf`` (or the softmax-kernel PRFs, or
any feature kind of :mod:`theory.feature_kinds` through ``kind=``: RFFs,
hyperbolic PRFs, ...).  Its expectation is
:math:`\sum_{a,b}\mathrm{MSE}(\widehat K(x_a, x_b))`, the pair MSEs of Thm 3.2
(the tests compare with :func:`theory.prf_mse`).  The functions here average E
over draws (vectorised over draws, in chunks of bounded memory) and return
means with standard errors; :func:`frobenius_curve` runs its cells in
parallel (:mod:`~montecarlo.experiments.sweeps`) with common random numbers
across couplings, and reports the paired differences (SimRF - IID, ...) with
their standard errors.

:func:`fig7_frobenius` is the paper's setting: N = 64 points in d = 64
dimensions drawn from :math:`\mathcal N(0, 0.1^2 I_d)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import montecarlo as mc
from montecarlo.features import log_kernel_matrix
from theory.feature_kinds import check_kernel

from ._common import (
    CHUNK_ELEMENTS,
    check_array,
    check_bool,
    check_budget,
    check_coupling,
    check_int,
    check_kind_params,
    check_positive_float,
    check_rng,
    chunks,
    distinct_couplings,
    projected_features,
    seed_entropy,
    z_score,
)
from .sweeps import (
    check_n_jobs,
    coupling_pairs,
    draw_blocks,
    paired_estimates,
    paired_weights,
    run_units,
    unit_seed,
    warm_up,
)


def exact_gram(X, kernel="gaussian"):
    r"""Exact Gram matrix: :math:`e^{-\|x_a-x_b\|^2/2}` (Gaussian) or :math:`e^{x_a^\top x_b}` (softmax),
    from :func:`montecarlo.features.log_kernel_matrix` (the one home of the exact kernels)."""
    X = check_array(X, "X", 2)
    check_kernel(kernel)
    check_budget(X.shape[0] ** 2, "the (N, N) Gram matrix", "use fewer points")
    return np.exp(log_kernel_matrix(X, None, kernel))


def _check_weights_stack(W, d):
    single = np.ndim(W) == 2
    if single:  # a view with a leading draw axis (a masked array stays masked, and is refused)
        W = (W if hasattr(W, "shape") else np.asarray(W))[None]
    return check_array(W, "W", 3, d, "X's width"), single


def _gram_errors(X, W, K, fmap):
    """Per-draw squared Frobenius errors of a validated stack W (R, m, d) against K (N, N)."""
    n = X.shape[0]
    width = fmap.width * W.shape[1]
    out = np.empty(W.shape[0])
    sq = np.einsum("nd,nd->n", X, X)
    step = max(1, CHUNK_ELEMENTS // (n * (n + width)))
    for sl in chunks(W.shape[0], step):
        phi = projected_features(X, W[sl], fmap, sq)
        G = np.matmul(phi, np.swapaxes(phi, 1, 2))
        G -= K
        out[sl] = np.einsum("rab,rab->r", G, G)
    return out


def gram_errors(X, W, kernel="gaussian", relative=False, *, kind="prf", kind_params=None):
    r"""Squared Frobenius error of the Gram estimate for each draw in W.

    Parameters
    ----------
    X : array (N, d)
    W : array (m, d) or (R, m, d)
        One or R draws of the projections.
    kernel : {'gaussian', 'softmax'}
        The target kernel (RFFs estimate the Gaussian one only).
    relative : bool
        Divide by :math:`\|\mathbf K\|_F^2`.
    kind : str, keyword-only
        A feature kind of :mod:`theory.feature_kinds` (``'prf'``, ``'rff'``, ``'hyperbolic'``, ...);
        its features come from the record's hook.
    kind_params : dict, keyword-only
        The kind's parameters, all of them (e.g. ``{'A': -0.1}`` for OPRFs); None for the paper's kinds.

    Returns
    -------
    float or ndarray (R,)
        :math:`\sum_{ab}(\mathbf K_{ab} - \phi(x_a)^\top\phi(x_b))^2` per draw.
    """
    X = check_array(X, "X", 2)
    rec, params = check_kind_params(kind, kind_params, "gram_errors")
    fmap = mc.FeatureMap(kind, kernel=kernel, where="gram_errors", **params)
    relative = check_bool(relative, "relative")
    W, single = _check_weights_stack(W, X.shape[1])
    K = exact_gram(X, kernel)
    check_budget(X.shape[0] * rec.width * W.shape[1], "the (N, width m) features of one draw", "lower m")
    out = _gram_errors(X, W, K, fmap)
    if relative:
        out /= np.sum(K * K)
    return float(out[0]) if single else out


def _estimate(err):
    n = err.size
    return mc.Estimate(float(err.mean()), float(err.std(ddof=1) / np.sqrt(n)), n)


def gram_frobenius_error(X, coupling, m, n_draws, rng=None, kernel="gaussian", relative=False,
                         return_samples=False, *, kind="prf", kind_params=None):
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
    kind, kind_params : keyword-only
        The feature kind and its parameters (:func:`gram_errors`).

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
    mc.FeatureMap(kind, kernel=kernel, where="gram_frobenius_error", **check_kind_params(
        kind, kind_params, "gram_frobenius_error")[1])  # (checked before drawing)
    W = mc.sample_weights(coupling, X.shape[1], m, rng=rng, n_draws=n_draws)
    err = gram_errors(X, W, kernel, relative, kind=kind, kind_params=kind_params)
    est = _estimate(err)
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
    diff_mean, diff_stderr : dict
        (a, b) -> ndarray (len(m),): mean and standard error of the per-draw difference
        a - b of the errors (every later coupling minus every earlier one).  With
        ``paired`` draws (common random numbers) this standard error is the one to judge
        an ordering by; with independent draws it is about ``hypot(stderr[a], stderr[b])``.
    paired : bool
    kind : str
    """

    m: np.ndarray
    mean: dict
    stderr: dict
    n_draws: int
    relative: bool
    diff_mean: dict = field(default_factory=dict)
    diff_stderr: dict = field(default_factory=dict)
    paired: bool = False
    kind: str = "prf"

    def z(self, a, b):
        """Paired z-scores of ``a - b`` per m (positive: a's error is larger); NaN (n/a) where the standard
        error is 0 or round-off relative to the two means (:func:`~montecarlo.experiments.runtime.z_score`)."""
        scale = np.maximum(np.abs(self.mean[a]), np.abs(self.mean[b]))
        if (a, b) in self.diff_mean:
            return z_score(self.diff_mean[a, b], self.diff_stderr[a, b], scale)
        return -z_score(self.diff_mean[b, a], self.diff_stderr[b, a], scale)


def frobenius_unit(X, K, couplings, m, n, seed, paired, kind, params, kernel, relative_norm):
    """One unit of :func:`frobenius_curve`: per-draw errors (len(couplings), n) of one block of n paired draws at
    one m (seed ``seed``, feature kind ``kind`` with parameters ``params`` for the target ``kernel``; divided by
    ``relative_norm`` unless it is None), against the exact Gram matrix ``K`` of the rows of ``X``."""
    Ws = paired_weights(couplings, X.shape[1], m, n, seed, paired=paired)
    fmap = mc.FeatureMap(kind, kernel=kernel, where="frobenius_unit", **params)
    out = np.stack([_gram_errors(X, Ws[cp], K, fmap) for cp in couplings])
    if relative_norm is not None:
        out /= relative_norm
    return out


def frobenius_curve(X, couplings=("iid", "orthogonal", "simplex"), m_values=(16, 32, 64, 128, 256), n_draws=100,
                    rng=0, kernel="gaussian", relative=False, *, kind="prf", kind_params=None, paired=True,
                    n_jobs=None, progress=None):
    """Gram-matrix error for several couplings and numbers of features (Fig. 7).

    The draws are cut into units of one m and one block of
    :data:`~montecarlo.experiments.sweeps.DRAW_BLOCK` draws, each with its own seed
    (:func:`~montecarlo.experiments.sweeps.unit_seed` of ``rng``, m and the block), run in
    parallel (:func:`~montecarlo.experiments.sweeps.run_units`): the numbers do not depend on
    ``n_jobs`` or on which other m are run.

    Parameters
    ----------
    X : array (N, d)
    couplings : sequence of str
    m_values : sequence of int >= 1
    n_draws : int >= 2
    rng : None, int >= 0, Generator or SeedSequence
    kernel : {'gaussian', 'softmax'}
    relative : bool
    kind, kind_params : keyword-only
        The feature kind and its parameters (:func:`gram_errors`).
    paired : bool, keyword-only
        Common random numbers across couplings (default; :func:`~montecarlo.experiments.sweeps.paired_weights`)
        or an independent stream per coupling.
    n_jobs : None or nonzero int, keyword-only
        Parallel workers (None: the machine's cores).
    progress : callable, optional
        Called with one-line progress messages.

    Returns
    -------
    FrobeniusCurve
    """
    X = check_array(X, "X", 2)
    couplings = distinct_couplings(couplings)
    if isinstance(m_values, (str, bytes)) or not hasattr(m_values, "__iter__"):
        raise TypeError(f"m_values must be a sequence of integers >= 1, got {m_values!r}")
    ms = np.array([check_int(m, "m_values", 1) for m in m_values])
    if ms.size == 0:
        raise ValueError("m_values must not be empty")
    n_draws = check_int(n_draws, "n_draws", 2)
    blocks = draw_blocks(n_draws)
    rec, params = check_kind_params(kind, kind_params, "frobenius_curve")
    mc.FeatureMap(kind, kernel=kernel, where="frobenius_curve", **params)  # (the kernel checked before the units)
    relative = check_bool(relative, "relative")
    paired = check_bool(paired, "paired")
    n_jobs = check_n_jobs(n_jobs)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be None or a callable taking one string, got {progress!r}")
    check_budget(X.shape[0] * rec.width * int(ms.max()), "the (N, width m) features of one draw", "lower m")
    entropy = seed_entropy(rng)
    K = exact_gram(X, kernel)
    norm = float(np.sum(K * K)) if relative else None
    units, costs = [], []
    for m in ms:
        for k, n in blocks:
            units.append((X, K, couplings, int(m), n, unit_seed(entropy, m, k), paired, kind, params, kernel, norm))
            costs.append(n * len(couplings) * X.shape[0] * (X.shape[0] + rec.width * int(m)))
    res = run_units(frobenius_unit, units, n_jobs=n_jobs, costs=costs, progress=progress, label="gram",
                    warm_up=warm_up(couplings, X.shape[1], int(ms.min()), kind, paired))
    nb = len(blocks)
    mean = {cp: np.empty(ms.size) for cp in couplings}
    se = {cp: np.empty(ms.size) for cp in couplings}
    pairs = coupling_pairs(couplings)
    dmean = {p: np.empty(ms.size) for p in pairs}
    dse = {p: np.empty(ms.size) for p in pairs}
    for j in range(ms.size):
        errs = np.concatenate(res[j * nb:(j + 1) * nb], axis=1)
        samples = dict(zip(couplings, errs))
        for cp in couplings:
            est = _estimate(samples[cp])
            mean[cp][j], se[cp][j] = est.mean, est.stderr
        for p, est in paired_estimates(samples, pairs).items():
            dmean[p][j], dse[p][j] = est.mean, est.stderr
    return FrobeniusCurve(ms, mean, se, int(n_draws), relative, dmean, dse, paired, kind)


def paper_gram_data(rng=0, n_points=64, d=64, scale=0.1):
    r"""The data of Sec. 5.2: ``n_points`` rows :math:`x \sim \mathcal N(0, \mathrm{scale}^2 I_d)`."""
    n_points = check_int(n_points, "n_points", 1)
    d = check_int(d, "d", 1)
    scale = check_positive_float(scale, "scale")
    check_budget(n_points * d, "the (n_points, d) data", "lower n_points or d")
    return np.random.default_rng(check_rng(rng, "rng")).normal(0.0, scale, (n_points, d))


def fig7_frobenius(couplings=("iid", "orthogonal", "simplex"), m_values=(16, 32, 64, 128, 256), n_draws=100, rng=0,
                   data_rng=0, *, kind="prf", kind_params=None, paired=True, n_jobs=None, progress=None):
    """Fig. 7: squared Frobenius Gram error, N = 64, d = 64, x ~ N(0, 0.1^2 I), for each coupling and m
    (:func:`frobenius_curve`; paired draws by default).

    Returns
    -------
    FrobeniusCurve
    """
    return frobenius_curve(paper_gram_data(check_rng(data_rng, "data_rng")), couplings, m_values, n_draws, rng,
                           kind=kind, kind_params=kind_params, paired=paired, n_jobs=n_jobs, progress=progress)
