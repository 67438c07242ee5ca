r"""Symmetric dense-exponential random features (SDERFs, FAVOR#): parameters, feature maps, Monte Carlo.

The features and how they are computed: :ref:`guide-montecarlo.sderf` (``docs/guide/sampling.rst``).
"""

from __future__ import annotations

import math

import array_api_compat
import numpy as np

from theory import feature_kinds as kinds
from theory.validation import describe

from ._backend import namespace, to_numpy
from ._checks import ArgumentTypeError, check_data, check_kernel, check_weights
from .couplings import RandomProjection
from . import estimators as _estimators
from .features import FeatureMap, _check_stabilize
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
    B, terms = _sderf_prepare(W, xp, a, Q)
    return xp.matmul(W, _to(xp, B, W)), terms["offsets"]


# ---------------------------------------------------------------------------
# the kind's hooks (theory.feature_kinds: kind "sderf"; the map's one home)


@kinds.register("sderf", "prepare")
def _sderf_prepare(W, xp, a, Q=None):
    r"""T = :math:`\mathbf B` (the projections are :math:`w_i^\top\mathbf Bx`) and, for directions W (..., m, d),
    the offsets :math:`o_i = w_i^\top\mathbf Aw_i + \log D`; (a, Q) checked (each a_k < 1/8, Q orthogonal)."""
    a, Q = _check_params(a, Q, len(a) if W is None else W.shape[-1])
    B, log_d = _b_matrix(a, Q)
    return B, ({} if W is None else {"offsets": _offsets(W, a, Q, log_d, xp)})


@kinds.register("sderf", "log_features")
def _sderf_log_map(proj, sq, m, c, xp, w_sq=None, d=None, offsets=None, a=None, Q=None):
    r""":math:`w_i^\top\mathbf Bx + o_i - c\|x\|^2 - \tfrac12\log m` (overwrites ``proj``, the projections on
    the rows :math:`\mathbf W\mathbf B`)."""
    proj += offsets
    proj -= c * sq + 0.5 * math.log(m)
    return proj


@kinds.register("sderf", "statistic")
def _sderf_statistic(proj, xp, w_sq=None, d=None, offsets=None, a=None, Q=None):
    r""":math:`\log b_i = w_i^\top\mathbf Bv + 2o_i` (:math:`= 2\log D + 2w_i^\top\mathbf Aw_i +
    w_i^\top\mathbf Bv`), from the projections on :math:`\mathbf Bv`."""
    proj += 2.0 * offsets
    return proj


@kinds.register("sderf", "float_parameters")
def _sderf_float_parameters(d, v_norm, a=None, Q=None):
    """(a, Q) of a Monte Carlo call at one pair, checked as float64 numpy arrays.  ``a`` left out: the isotropic
    choice a_k = A*(|x + y|^2 / d) for every k (FAVOR++'s OPRF optimum, :func:`montecarlo.oprf.optimal_a`: the
    estimators pass the pair's norm only; :func:`sderf_parameters` gives FAVOR#'s anisotropic choice for data)."""
    if a is None:
        if Q is not None:
            raise ValueError("kind='sderf' needs a= when Q is given (the d eigenvalues of A, each < 1/8)")
        return {"a": np.full(d, float(optimal_a(v_norm * v_norm / d)), dtype=np.float64), "Q": None}
    a, Q = _check_params(a, Q, d)
    return {"a": a, "Q": Q}


@kinds.register("sderf", "batch_parameters")
def _sderf_batch_parameters(X, Y):
    """FAVOR#'s (a, Q) for queries X and keys Y: :func:`sderf_parameters`."""
    a, Q = sderf_parameters(X, Y)
    return {"a": a, "Q": Q}


def _feature_map(W, a, Q, kernel, where):
    """The kind's :class:`~montecarlo.FeatureMap` of W (a RandomProjection gives its dense weights), with (a, Q)
    checked against W's d first (the errors of :func:`_check_params`)."""
    W, _ = _weights(W)
    a, Q = _check_params(a, Q, W.shape[1])
    return FeatureMap("sderf", W, kernel, where=where, a=a, Q=Q)


def sderf_log_features(X, W, a, Q=None, kernel="gaussian"):
    r"""Logarithm of the SDERF features, :math:`\log\phi(x)_i = w_i^\top\mathbf Aw_i + w_i^\top\mathbf Bx
    - c\|x\|^2 + \log D - \frac12\log m`, shape (N, m): ``FeatureMap("sderf", W, kernel, a=a, Q=Q)(X, log=True)``.

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
    check_kernel(kernel)
    return _feature_map(W, a, Q, kernel, "sderf_log_features")(X, log=True)


def sderf_features(X, W, a, Q=None, kernel="gaussian", stabilize=None):
    r"""SDERF features of a batch, exponentiated once from :func:`sderf_log_features`
    (:func:`montecarlo.random_features` with ``kind='sderf'``).

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
    check_kernel(kernel)
    return _feature_map(W, a, Q, kernel, "sderf_features")(X, stabilize=stabilize)


# ---------------------------------------------------------------------------
# Monte Carlo (the estimators of every kind, montecarlo.estimators, with kind="sderf")


def _host_vector(v, name, d=None):
    if array_api_compat.is_array_api_obj(v) and not isinstance(v, np.ndarray):
        v = to_numpy(v)
    return np.asarray(check_data(v, namespace("numpy"), name, 1, d), dtype=np.float64)


def _estimate(stat, coupling, x, y, m, n_draws, a, Q, kernel, rng, xp, device, dtype, progress, label):
    xn = _host_vector(x, "x")
    yn = _host_vector(y, "y", xn.shape[0])
    return _estimators._pointwise(stat, coupling, xn, yn, m, n_draws, kernel, "sderf", rng, xp, device, dtype, "auto",
                      progress, None, label, {"a": a, "Q": Q})[0]


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
    return _estimate("kernel", coupling, x, y, m, n_draws, a, Q, kernel, rng, xp, device, dtype, progress,
                     "sderf kernel")


def sderf_empirical_mse(coupling, x, y, m, n_draws, a, Q=None, *, kernel="gaussian", rng=None, xp=None,
                        device=None, dtype=None, progress=False):
    r"""Empirical MSE :math:`\mathbb E[(\hat K - K)^2]` of SDERFs against the exact kernel value.

    Compare with :func:`theory.sderf.sderf_mse` (i.i.d. directions, closed form).
    """
    return _estimate("mse", coupling, x, y, m, n_draws, a, Q, kernel, rng, xp, device, dtype, progress,
                     "sderf mse")


sderf_kernel_estimate.__doc__ += _DOC
sderf_empirical_mse.__doc__ += _DOC
