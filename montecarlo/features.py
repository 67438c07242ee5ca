r"""Random feature maps: PRFs (Gaussian and softmax kernels) and RFFs (Sec. 1).

For a batch :math:`X \in \mathbb R^{N\times d}` and projections
:math:`w_1, \ldots, w_m` (an (m, d) array or a
:class:`~montecarlo.couplings.RandomProjection`):

* PRF, Gaussian kernel (eq. ``def_prf``):
  :math:`\phi(z) = m^{-1/2}e^{-\|z\|^2}[e^{w_i^\top z}]_{i}`, so that
  :math:`\phi(x)^\top\phi(y)` is unbiased for
  :math:`K_{\mathrm{gauss}} = e^{-\|x-y\|^2/2}` (eq. ``def_gauss_kern``) when
  every :math:`w_i \sim \mathcal N(0, I_d)`.
* PRF, softmax kernel: :math:`\phi(z) = m^{-1/2}e^{-\|z\|^2/2}[e^{w_i^\top z}]_i`,
  unbiased for :math:`K_{\mathrm{smax}} = e^{x^\top y}`.
* RFF (eq. ``rffdef2``): :math:`\phi(z) = m^{-1/2}\odot_i[\sin w_i^\top z, \cos w_i^\top z]`
  (interleaved: sin, cos of feature 1, then of feature 2, ...), so that
  :math:`\phi(x)^\top\phi(y) = \frac1m\sum_i\cos w_i^\top(x-y)`.

Numerical safety
----------------
The PRF exponent is formed as one number,
:math:`w_i^\top z - c\|z\|^2 - \tfrac12\log m` (c = 1 Gaussian, 1/2
softmax), before a single ``exp``; since
:math:`\max_z(w^\top z - c\|z\|^2) = \|w\|^2/(4c)`, this never overflows for
:math:`\|w\|^2 < 1400` (Gaussian) or 700 (softmax), far beyond any
:math:`\chi_d` norm in practice, whereas ``exp(w.z) * exp(-|z|^2)`` overflows
as soon as :math:`w^\top z > 709`.  What remains is **underflow**: for large
:math:`\|z\|` every feature of a row can round to 0.

``stabilize="row"`` subtracts from each row its largest exponent
:math:`o(z) = \max_i(\cdot)` (the Performer trick) and returns
:math:`\tilde\phi(z) = \phi(z)e^{-o(z)}` together with :math:`o(z)`; the
largest entry of every row is then exactly 1.  It preserves: ratios of
features within a row, hence anything homogeneous of degree 0 in
:math:`\phi(q)` for each query row, in particular **normalised attention**
:math:`\phi(q)^\top\phi(k_j)/\sum_l\phi(q)^\top\phi(k_l)` when the row offset
is used on the queries only.  It does **not** preserve absolute kernel
values (:math:`\tilde\phi(x)^\top\tilde\phi(y) = \hat K e^{-o(x)-o(y)}`;
recover :math:`\log\hat K` by adding the offsets back in log space), nor
normalised attention if keys get different row offsets (each key would be
reweighted by :math:`e^{-o(k_j)}`).  ``stabilize="global"`` subtracts one
offset for the whole batch (use it on keys): every ratio, including across
rows, is preserved, but rows far below the maximum can still underflow.
"""

from __future__ import annotations

import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import array_api_compat
import numpy as np

from ._backend import backend_name, exp_inplace
from ._checks import PRF_KERNELS, ArgumentTypeError, check_budget, check_data, check_kernel, check_weights
from theory.validation import describe
from .couplings import RandomProjection

STABILIZE = (None, "row", "global")


def _as_projection(W):
    """(projection callable on validated arrays, d, m, xp); ``W`` is validated (shape, dtype, finite)."""
    if isinstance(W, RandomProjection):
        return W.project, W.d, W.m, W.xp
    xp = check_weights(W, "W")
    wt = xp.matrix_transpose(W)
    return (lambda x: xp.matmul(x, wt)), W.shape[1], W.shape[0], xp


def _row_jobs(xp, n_rows, width, job):
    """Run ``job(rows)`` over row slices: on numpy, split across a thread pool when large.

    numpy's ``exp`` is single-threaded while the matrix product uses every
    core; ufuncs and BLAS release the GIL, so computing blocks of rows in
    parallel threads (matmul + offset + exp per block) uses all cores for the
    whole pipeline.  Other backends parallelise internally: one job.
    """
    threads = _numpy_threads() if backend_name(xp) == "numpy" else 1
    if threads == 1 or n_rows * width < _PARALLEL_MIN or n_rows < 2 * threads:
        job(slice(0, n_rows))
        return
    bounds = [n_rows * i // threads for i in range(threads + 1)]
    list(_pool().map(job, [slice(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]))


_PARALLEL_MIN = 1 << 16
_POOL = None
_POOL_PID = None
_POOL_LOCK = threading.Lock()


def _numpy_threads():
    return max(1, min(os.cpu_count() or 1, 8))


def _pool():
    """The module's thread pool, created on first use in each process.

    Fork safety: a child forked after the parent used the pool inherits the
    executor object but none of its worker threads, so work submitted there
    would wait forever.  The pool is therefore keyed by process id, and an
    ``os.register_at_fork`` handler drops the inherited one (and its lock) in
    the child; the child builds its own on first use.
    """
    global _POOL, _POOL_PID
    with _POOL_LOCK:
        if _POOL is None or _POOL_PID != os.getpid():
            _POOL = ThreadPoolExecutor(max_workers=_numpy_threads(), thread_name_prefix="montecarlo-prf")
            _POOL_PID = os.getpid()
        return _POOL


def _forget_pool_in_child():
    global _POOL, _POOL_PID, _POOL_LOCK
    _POOL, _POOL_PID, _POOL_LOCK = None, None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def _prf_logits(X, W, kernel, finish=None):
    """Validated logits (N, m), with ``finish(z_rows, rows)`` applied per row block (in place)."""
    kernel = check_kernel(kernel, PRF_KERNELS)
    project, d, m, xp = _as_projection(W)
    X = _check_X(X, W, xp, d)
    n = X.shape[0]
    check_budget(n * m, f"the (N, m) = ({n}, {m}) features", "pass fewer rows of X at a time or fewer features")
    c = 1.0 if kernel == "gaussian" else 0.5
    offset = -c * xp.sum(X * X, axis=1) - 0.5 * math.log(m)
    if backend_name(xp) == "numpy" and not isinstance(W, RandomProjection):
        z = np.empty((n, m), dtype=X.dtype)
        wt = W.T

        def job(rows):
            zr = z[rows]
            np.matmul(X[rows], wt, out=zr)
            zr += offset[rows, None]
            if finish is not None:
                finish(zr, rows)

        _row_jobs(xp, n, m, job)
        return z, xp
    z = project(X)
    z += offset[:, None]
    if finish is not None:
        finish(z, slice(0, n))
    return z, xp


def prf_log_features(X, W, kernel="gaussian"):
    r"""Logarithm of the PRF features, :math:`w_i^\top z - c\|z\|^2 - \tfrac12\log m`, shape (N, m).

    Parameters
    ----------
    X : array (N, d), finite
    W : array (m, d) or RandomProjection
    kernel : {'gaussian', 'softmax'}
        c = 1 (eq. ``def_prf``) or c = 1/2.
    """
    return _prf_logits(X, W, kernel)[0]


def _ns(a):
    return array_api_compat.array_namespace(a)


def _ref_array(W):
    if isinstance(W, RandomProjection):
        return W._weights if W._weights is not None else W._norms
    return W


def _check_X(X, W, xp, d):
    """X validated against W: same backend, device and dtype as W, and d columns (both arguments named)."""
    ref = _ref_array(W)
    X = check_data(X, xp, "X", 2, device=getattr(ref, "device", None), dtype=ref.dtype)
    if X.shape[1] != d:
        raise ValueError(f"X and W disagree on the dimension d: X has {X.shape[1]} columns but W has {d} "
                         f"(W must be an (m, d) array or a RandomProjection drawn for d = X.shape[1])")
    return X


def prf_features(X, W, kernel="gaussian", stabilize=None):
    r"""Positive random features of a batch (eq. ``def_prf``), vectorised.

    Parameters
    ----------
    X : array (N, d)
        Data (finite; NaN or inf raise ValueError).
    W : array (m, d) or RandomProjection
        Projections from :func:`~montecarlo.sample_weights` or
        :func:`~montecarlo.sample_projection`.
    kernel : {'gaussian', 'softmax'}
        ``'gaussian'``: :math:`m^{-1/2}e^{-\|z\|^2}e^{w_i^\top z}` (unbiased for
        :math:`e^{-\|x-y\|^2/2}`); ``'softmax'``: :math:`m^{-1/2}e^{-\|z\|^2/2}e^{w_i^\top z}`
        (unbiased for :math:`e^{x^\top y}`).
    stabilize : {None, 'row', 'global'}
        Log-space offset (see the module docstring for what it preserves).

    Returns
    -------
    phi : array (N, m)
        Features (rescaled by :math:`e^{-o}` when stabilised).
    offset : array (N,) or 0-d array
        Only when ``stabilize`` is not None: the subtracted log offset
        :math:`o`, so that the unstabilised features are :math:`\phi e^{o}`.
    """
    _check_stabilize(stabilize)
    if stabilize is None:
        return _prf_logits(X, W, kernel, lambda zr, rows: exp_inplace(zr, _ns(zr)))[0]
    if stabilize == "row":
        offs = {}

        def finish(zr, rows):
            xq = _ns(zr)
            o = xq.max(zr, axis=1)
            zr -= o[:, None]
            exp_inplace(zr, xq)
            offs[rows.start] = o

        z, xp = _prf_logits(X, W, kernel, finish)
        off = xp.concat([offs[k] for k in sorted(offs)]) if len(offs) > 1 else offs[0]
        return z, off
    z, xp = _prf_logits(X, W, kernel)
    off = xp.max(z)
    z -= off
    return exp_inplace(z, xp), off


def _check_stabilize(stabilize):
    if stabilize is not None and not (isinstance(stabilize, str) and stabilize in STABILIZE):
        kind = ValueError if isinstance(stabilize, str) else ArgumentTypeError
        raise kind(f"stabilize must be None, 'row' or 'global', got {describe(stabilize)}")


def rff_features(X, W):
    r"""Random Fourier features of a batch (eq. ``rffdef2``), shape (N, 2m).

    :math:`\phi(z) = m^{-1/2}(\sin w_1^\top z, \cos w_1^\top z, \ldots,
    \sin w_m^\top z, \cos w_m^\top z)`; :math:`\phi(x)^\top\phi(y) =
    \frac1m\sum_i\cos w_i^\top(x-y)`, unbiased for :math:`e^{-\|x-y\|^2/2}`
    when every :math:`w_i\sim\mathcal N(0, I_d)`.

    Parameters
    ----------
    X : array (N, d)
    W : array (m, d) or RandomProjection
    """
    project, d, m, xp = _as_projection(W)
    X = _check_X(X, W, xp, d)
    check_budget(2 * X.shape[0] * m, f"the (N, 2m) = ({X.shape[0]}, {2 * m}) features",
                 "pass fewer rows of X at a time or fewer features")
    z = project(X)
    out = xp.stack([xp.sin(z), xp.cos(z)], axis=-1)
    return xp.reshape(out, (X.shape[0], 2 * m)) * (1.0 / math.sqrt(m))


#: The estimator classes that live in :mod:`montecarlo.kernel_approximation` (they need scikit-learn).
_ESTIMATORS = ("PositiveRandomFeatures", "RandomFourierFeatures")


def __getattr__(name):
    """``PositiveRandomFeatures`` and ``RandomFourierFeatures``: aliases of the scikit-learn estimators of
    :mod:`montecarlo.kernel_approximation`, imported on first use so that this module (and every plain
    feature map above) works without scikit-learn."""
    if name in _ESTIMATORS:
        from . import kernel_approximation

        return getattr(kernel_approximation, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
