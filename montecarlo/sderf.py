r"""Symmetric dense-exponential random features (SDERFs, FAVOR#): parameters, feature maps, Monte Carlo.

The features and how they are computed: :ref:`guide-montecarlo.sderf` (``docs/guide/sampling.rst``).
"""

from __future__ import annotations

import math

import array_api_compat
import numpy as np

from theory.feature_kinds import kernel_c
from theory.validation import describe, show_int

from ._backend import check_rng, exp_inplace, namespace, resolve_device, resolve_dtype, to_numpy
from ._checks import (
    ArgumentTypeError,
    check_budget,
    check_coupling,
    check_data,
    check_dimension,
    check_int,
    check_kernel,
    check_weights,
    check_work,
)
from .couplings import RandomProjection, sample_weights
from .estimators import CHUNK_ELEMENTS, _draw_chunks, _finite, _log_kernel_value, _Moments, _Progress
from .features import _check_stabilize
from .oprf import optimal_a

__all__ = [
    "ORTHOGONALITY_TOL",
    "sderf_empirical_mse",
    "sderf_features",
    "sderf_kernel_estimate",
    "sderf_log_features",
    "sderf_moment_matrix",
    "sderf_parameters",
    "sderf_projection",
]

#: Largest deviation max|Q^T Q - I| accepted for an orthogonal Q.
ORTHOGONALITY_TOL = 1e-6

# ---------------------------------------------------------------------------
# parameters


def _host(X, name, d=None):
    """A validated float64 numpy copy of a data array of any backend."""
    if array_api_compat.is_array_api_obj(X) and not isinstance(X, np.ndarray):
        X = to_numpy(X)
    X = check_data(X, namespace("numpy"), name, 2, d)
    return np.asarray(X, dtype=np.float64)


def sderf_moment_matrix(X, Y=None):
    r"""The pair statistic :math:`\mathbf M = \frac1{LL'}\sum_{i,j}(x_i+y_j)(x_i+y_j)^\top` (float64 numpy).

    :math:`\overline{xx^\top} + \overline{yy^\top} + \bar x\bar y^\top + \bar y\bar x^\top`, O((L + L') d^2).

    Parameters
    ----------
    X : array (L, d)
        Queries (numpy, torch or cupy; finite).
    Y : array (L', d), optional
        Keys; default X.

    Returns
    -------
    ndarray (d, d), float64
        :func:`theory.sderf.sderf_moment_matrix` of the host (numpy) copies.
    """
    from theory.sderf import sderf_moment_matrix as on_host  # the formula's one home

    X = _host(X, "X")
    return on_host(X, None if Y is None else _host(Y, "Y", X.shape[1]))


def sderf_parameters(X, Y=None):
    r"""FAVOR#'s SDERF parameters for queries X and keys Y, in float64.

    With :math:`\mathbf M = \mathbf Q\Lambda\mathbf Q^\top` (:func:`sderf_moment_matrix`,
    ``numpy.linalg.eigh``), :math:`a_k = (1 - 2\lambda_k - \sqrt{(2\lambda_k+1)^2 + 8\lambda_k})/16 \le 0`,
    the global minimiser of the pair-averaged log second moment (proof in :mod:`theory.sderf`;
    :func:`theory.sderf.sderf_optimal_parameters` computes it in arbitrary precision).

    Parameters
    ----------
    X : array (L, d)
    Y : array (L', d), optional
        Default X.

    Returns
    -------
    a : ndarray (d,), float64
        Eigenvalues of :math:`\mathbf A`, ascending :math:`\lambda_k` (so descending a).
    Q : ndarray (d, d), float64
        Orthogonal; column k belongs to ``a[k]``.

    Raises
    ------
    ValueError
        X or Y not a finite real 2-D array (named), Y with another d.
    """
    M = sderf_moment_matrix(X, Y)
    lam, Q = np.linalg.eigh(M)
    # M is positive semidefinite: eigenvalues of order eps * tr M below 0 are rounding
    lam = np.maximum(lam, 0.0)
    return np.asarray(optimal_a(lam), dtype=np.float64), Q  # the OPRF optimum at s = lambda_k, per direction


def _check_params(a, Q, d):
    """(a, Q) as float64 numpy arrays: a (d,) finite, each < 1/8; Q (d, d) orthogonal (None: identity)."""
    if isinstance(a, (str, bytes)) or not (isinstance(a, (list, tuple)) or array_api_compat.is_array_api_obj(a)):
        raise ArgumentTypeError(f"a must be a 1-D array of d = {d} reals < 1/8 (the eigenvalues of A; "
                                f"numpy.full(d, A) for the isotropic OPRF), got {describe(a)}")
    a = check_data(to_numpy(a) if array_api_compat.is_array_api_obj(a) else a, namespace("numpy"), "a", 1, d)
    a = np.asarray(a, dtype=np.float64)
    if not np.all(a < 0.125):
        k = int(np.argmax(~(a < 0.125)))
        raise ValueError(f"a[{k}] must be < 1/8 (I - 8A must be positive definite for a finite variance), "
                         f"got {a[k]!r}")
    if Q is None:
        return a, None
    if isinstance(Q, (str, bytes)) or not (isinstance(Q, (list, tuple)) or array_api_compat.is_array_api_obj(Q)):
        raise ArgumentTypeError(f"Q must be a (d, d) = ({d}, {d}) orthogonal array or None (the identity), got "
                                f"{describe(Q)}")
    Q = check_data(to_numpy(Q) if array_api_compat.is_array_api_obj(Q) else Q, namespace("numpy"), "Q", 2, d)
    Q = np.asarray(Q, dtype=np.float64)
    if Q.shape != (d, d):
        raise ValueError(f"Q must have shape (d, d) = ({d}, {d}), got shape {Q.shape}")
    dev = float(np.max(np.abs(Q.T @ Q - np.eye(d))))
    if not dev <= ORTHOGONALITY_TOL:
        raise ValueError(f"Q must be an orthogonal matrix (max |Q^T Q - I| <= {ORTHOGONALITY_TOL:g}), got "
                         f"max |Q^T Q - I| = {dev:.3g}")
    return a, Q


def _b_matrix(a, Q):
    r""":math:`\mathbf B = \mathbf Q\,\mathrm{diag}(\sqrt{1-4a_k})\mathbf Q^\top` (float64) and :math:`\log D`."""
    s = np.sqrt(1.0 - 4.0 * a)
    B = np.diag(s) if Q is None else (Q * s) @ Q.T
    return (B + B.T) / 2, 0.25 * float(np.sum(np.log1p(-4.0 * a)))


def _to(xp, arr, like):
    """A float64 numpy array on the backend, device and dtype of ``like``."""
    out = xp.asarray(arr, device=getattr(like, "device", None))
    return xp.astype(out, like.dtype) if out.dtype != like.dtype else out


def _weights(W):
    """(W array, xp): a validated (m, d) array (a RandomProjection gives its dense weights)."""
    if isinstance(W, RandomProjection):
        W = W.weights
    xp = check_weights(W, "W")
    return W, xp


def _offsets(W, a, Q, log_d, xp):
    r""":math:`o_i = \sum_k a_k((\mathbf WQ)_{ik})^2 + \log D` for W of shape (..., m, d)."""
    Z = W if Q is None else xp.matmul(W, _to(xp, Q, W))
    return xp.sum(Z * Z * _to(xp, a, W), axis=-1) + log_d


def sderf_projection(W, a, Q=None):
    r"""The per-draw precomputation of SDERFs: :math:`\mathbf W_B = \mathbf W\mathbf B` and the offsets.

    Parameters
    ----------
    W : array (m, d) or RandomProjection
        Rows :math:`w_i` (numpy, torch or cupy; float32 or float64).
    a : array (d,)
        Eigenvalues of :math:`\mathbf A`, each < 1/8.
    Q : array (d, d) or None
        Orthogonal eigenvectors of :math:`\mathbf A` (columns); None is the identity.

    Returns
    -------
    W_B : array (m, d)
        Rows :math:`(\mathbf Bw_i)^\top`, so that :math:`w_i^\top\mathbf Bx = (\mathbf W_B x)_i`.
    offsets : array (m,)
        :math:`o_i = w_i^\top\mathbf Aw_i + \log D`.
    """
    W, xp = _weights(W)
    a, Q = _check_params(a, Q, W.shape[1])
    B, log_d = _b_matrix(a, Q)
    return xp.matmul(W, _to(xp, B, W)), _offsets(W, a, Q, log_d, xp)


def _log_map(X, W_B, offsets, c, xp):
    r""":math:`XW_B^\top + o - c\|x\|^2 - \frac12\log m` (N, m)."""
    m = W_B.shape[0]
    z = xp.matmul(X, xp.matrix_transpose(W_B))
    z += offsets[None, :]
    z -= c * xp.sum(X * X, axis=1)[:, None] + 0.5 * math.log(m)
    return z


def _logits(X, W, a, Q, kernel):
    W, xp = _weights(W)
    c = kernel_c("prf", check_kernel(kernel))  # the positive kinds' c: 1 (Gaussian) or 1/2 (softmax)
    m, d = W.shape
    X = check_data(X, xp, "X", 2, device=getattr(W, "device", None), dtype=W.dtype)
    if X.shape[1] != d:
        raise ValueError(f"X and W disagree on the dimension d: X has {X.shape[1]} columns but W has {d}")
    check_budget(X.shape[0] * m, f"the (N, m) = ({X.shape[0]}, {m}) features",
                 "pass fewer rows of X at a time or fewer features")
    W_B, off = sderf_projection(W, a, Q)
    return _log_map(X, W_B, off, c, xp), xp


def sderf_log_features(X, W, a, Q=None, kernel="gaussian"):
    r"""Logarithm of the SDERF features, :math:`\log\phi(x)_i = w_i^\top\mathbf Aw_i + w_i^\top\mathbf Bx
    - c\|x\|^2 + \log D - \frac12\log m`, shape (N, m).

    Parameters
    ----------
    X : array (N, d)
        Finite; converted to W's backend, device and dtype.
    W : array (m, d) or RandomProjection
    a : array (d,)
        Each < 1/8 (:func:`sderf_parameters` gives the data-driven optimum, all <= 0).
    Q : array (d, d) or None
        Orthogonal (columns: eigenvectors of A); None is the identity.
    kernel : {'gaussian', 'softmax'}
        c = 1 (unbiased for :math:`e^{-\|x-y\|^2/2}`) or c = 1/2 (:math:`e^{x^\top y}`).

    Returns
    -------
    array (N, m) of W's backend and dtype
    """
    return _logits(X, W, a, Q, kernel)[0]


def sderf_features(X, W, a, Q=None, kernel="gaussian", stabilize=None):
    r"""SDERF features of a batch, exponentiated once from :func:`sderf_log_features`.

    Parameters
    ----------
    X, W, a, Q, kernel
        As in :func:`sderf_log_features`.
    stabilize : {None, 'row', 'global'}
        Log-space offset, as in :func:`montecarlo.random_features`: ``'row'`` subtracts each
        row's largest log-feature (every row's largest entry is then 1; preserves ratios
        within a row, e.g. normalised attention when used on the queries), ``'global'`` one
        offset for the batch (preserves every ratio).

    Returns
    -------
    phi : array (N, m)
    offset : array (N,) or 0-d array
        Only when ``stabilize`` is not None: the unstabilised features are :math:`\phi e^{o}`.
    """
    _check_stabilize(stabilize)
    z, xp = _logits(X, W, a, Q, kernel)
    if stabilize is None:
        return exp_inplace(z, xp)
    off = xp.max(z, axis=1) if stabilize == "row" else xp.max(z)
    z -= off[:, None] if stabilize == "row" else off
    return exp_inplace(z, xp), off


# ---------------------------------------------------------------------------
# Monte Carlo


def _pointwise(stat, coupling, x, y, m, n_draws, a, Q, kernel, rng, xp, device, dtype, progress, label):
    c = kernel_c("prf", check_kernel(kernel))
    xn = _host_vector(x, "x")
    d = xn.shape[0]
    yn = _host_vector(y, "y", d)
    coupling = check_coupling(coupling)
    d = check_dimension(d, coupling)
    m = check_int(m, "m", 1)
    n_draws = check_int(n_draws, "n_draws", 2)
    a, Q = _check_params(a, Q, d)
    xpn = namespace(xp)
    dev = resolve_device(xpn, device)
    dt = resolve_dtype(xpn, dtype)
    rng = check_rng(rng)
    gen = np.random.default_rng(rng) if rng is None or isinstance(rng, (int, np.random.SeedSequence)) else rng
    log_target = _log_kernel_value(kernel, xn, yn)
    target = math.exp(log_target) if log_target < 709.0 else math.inf
    B, log_d = _b_matrix(a, Q)
    ref = xpn.zeros((1,), dtype=dt, device=dev)
    bv = _to(xpn, B @ (xn + yn), ref)
    log_pref = -c * float(xn @ xn + yn @ yn) - math.log(m)
    per = 3 * m * d
    check_budget(per, f"one draw of m = {show_int(m)} features in d = {show_int(d)}", "reduce m or d")
    size = max(1, CHUNK_ELEMENTS // per)
    check_work(n_draws * per, f"{label} with n_draws = {show_int(n_draws)} ({show_int(per)} entries per draw)",
               "reduce n_draws")
    acc = _Moments()
    bar = _Progress(progress, n_draws, label)
    done = 0
    for k in _draw_chunks(n_draws, size, label):
        W = sample_weights(coupling, d, m, rng=gen, xp=xpn, device=dev, n_draws=k, dtype=dt)
        # log b_i = 2 log D + 2 w_i^T A w_i + w_i^T B v
        logb = xpn.matmul(W, bv)
        logb += 2.0 * _offsets(W, a, Q, log_d, xpn)
        top = xpn.max(logb, axis=1)
        lse = top + xpn.log(xpn.sum(exp_inplace(logb - top[:, None], xpn), axis=1))
        khat = xpn.exp(lse + log_pref)
        acc.add(xpn, khat if stat == "kernel" else (khat - target) ** 2)
        done += k
        bar.update(done)
    est = acc.result(xpn, scalar=True)
    return _finite(est, f"the SDERF {label} estimate for |x| = {np.linalg.norm(xn):.4g}, |y| = "
                   f"{np.linalg.norm(yn):.4g}", "x and y are too large for the kernel or its estimator to be "
                   "represented: scale the data down, or use theory.sderf.sderf_mse for exact values")


def _host_vector(v, name, d=None):
    if array_api_compat.is_array_api_obj(v) and not isinstance(v, np.ndarray):
        v = to_numpy(v)
    return np.asarray(check_data(v, namespace("numpy"), name, 1, d), dtype=np.float64)


_DOC = """
    Parameters
    ----------
    coupling : str
        Any coupling of :func:`~montecarlo.sample_weights` ('iid', 'orthogonal', 'simplex',
        'simplex_plus', ...); the unbiasedness needs rows exactly :math:`\\mathcal N(0, I_d)`.
    x, y : array (d,)
        The two points (finite).
    m : int >= 1
        Directions per draw.
    n_draws : int >= 2
        Independent draws of the m directions (chunks of a size fixed by (m, d), so the
        result depends on ``rng`` only).
    a : array (d,)
        Eigenvalues of A, each < 1/8.
    Q : array (d, d) or None
        Orthogonal eigenvectors of A (columns); None is the identity.
    kernel : {'gaussian', 'softmax'}, keyword-only
    rng : None, int >= 0, numpy.random.Generator, SeedSequence or native generator, keyword-only
        One stream for all chunks (numpy draws from it; torch/cupy are seeded from it per chunk).
    xp, device, dtype : keyword-only
        As in :func:`~montecarlo.sample_weights`.
    progress : bool or callable, keyword-only

    Returns
    -------
    Estimate
        Mean over draws with its standard error (ddof = 1).
"""


def sderf_kernel_estimate(coupling, x, y, m, n_draws, a, Q=None, *, kernel="gaussian", rng=None, xp=None,
                          device=None, dtype=None, progress=False):
    r"""Mean of the SDERF kernel estimator :math:`\hat K = \phi(x)^\top\phi(y)` over n_draws draws
    (unbiased for the kernel under every exact coupling).
    """
    return _pointwise("kernel", coupling, x, y, m, n_draws, a, Q, kernel, rng, xp, device, dtype, progress,
                      "sderf kernel")


def sderf_empirical_mse(coupling, x, y, m, n_draws, a, Q=None, *, kernel="gaussian", rng=None, xp=None,
                        device=None, dtype=None, progress=False):
    r"""Empirical MSE :math:`\mathbb E[(\hat K - K)^2]` of SDERFs against the exact kernel value.

    Compare with :func:`theory.sderf.sderf_mse` (i.i.d. directions, closed form).
    """
    return _pointwise("mse", coupling, x, y, m, n_draws, a, Q, kernel, rng, xp, device, dtype, progress,
                      "sderf mse")


sderf_kernel_estimate.__doc__ += _DOC
sderf_empirical_mse.__doc__ += _DOC
