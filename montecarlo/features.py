r"""Random feature maps of every feature kind: PRFs (Gaussian and softmax kernels), RFFs (Sec. 1), and the
kinds of :mod:`theory.feature_kinds` (one record each; :func:`random_features` takes ``kind=``).

The maps written out, and their numerical safety: :ref:`guide-montecarlo.features`
(``docs/guide/sampling.rst``).
"""

from __future__ import annotations

import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import array_api_compat
import numpy as np

from theory import feature_kinds as kinds
from theory.feature_kinds import kernel_c
from theory.validation import describe

from ._backend import backend_name, exp_inplace
from ._checks import ArgumentTypeError, check_budget, check_data, check_kernel, check_kind, check_weights
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
    if backend_name(xp) != "numpy" or n_rows * width < _PARALLEL_MIN:
        job(slice(0, n_rows))
        return
    threads = thread_limit()
    if threads == 1 or n_rows < 2 * threads:
        job(slice(0, n_rows))
        return
    bounds = [n_rows * i // threads for i in range(threads + 1)]
    list(_pool().map(job, [slice(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]))


_PARALLEL_MIN = 1 << 16
_POOL = None
_POOL_PID = None
_POOL_LOCK = threading.Lock()


def thread_limit():
    """Threads for the row blocks: the smallest limit the loaded BLAS/OpenMP pools report (so that
    ``OMP_NUM_THREADS`` and ``threadpoolctl.threadpool_limits`` are respected), at most 8.

    The libraries are found once per process (``threadpoolctl.ThreadpoolController``, about 1 ms); each call
    then asks them for their current limit (microseconds), not the 0.5 ms of ``threadpool_info``."""
    counts = [n for n in (lib.get_num_threads() for lib in _controllers()) if n]
    return max(1, min(min(counts) if counts else (os.cpu_count() or 1), 8))


_CONTROLLERS = None


def _controllers():
    global _CONTROLLERS
    if _CONTROLLERS is None:
        from threadpoolctl import ThreadpoolController

        _CONTROLLERS = tuple(ThreadpoolController().lib_controllers)
    return _CONTROLLERS


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
            _POOL = ThreadPoolExecutor(max_workers=thread_limit(), thread_name_prefix="montecarlo-prf")
            _POOL_PID = os.getpid()
        return _POOL


def _forget_pool_in_child():
    global _POOL, _POOL_PID, _POOL_LOCK
    _POOL, _POOL_PID, _POOL_LOCK = None, None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


# ---------------------------------------------------------------------------
# The maps of the paper's kinds (hooks of theory.feature_kinds; one home for each formula)


@kinds.register("prf", "log_features")
def _prf_log_map(proj, sq, m, c, xp, w_sq=None, d=None):
    r""":math:`w_i^\top x - c\|x\|^2 - \tfrac12\log m` (overwrites ``proj``)."""
    proj += -(c * sq + 0.5 * math.log(m))  # (x - y == x + (-y); autograd then negates only the norms)
    return proj


@kinds.register("prf", "linear_log_features")
def _prf_linear_form(w, m, xp, w_sq=None, d=None):
    r"""Rows :math:`w_i`, constant :math:`-\tfrac12\log m`."""
    return w, -0.5 * math.log(m)


@kinds.register("prf", "statistic")
def _prf_statistic(proj, xp, w_sq=None, d=None):
    r""":math:`\log b_i = w_i^\top v`."""
    return proj


@kinds.register("rff", "features")
def _rff_map(proj, sq, m, c, xp, w_sq=None, d=None):
    r""":math:`m^{-1/2}(\sin w_1^\top x, \cos w_1^\top x, \ldots)`, interleaved."""
    out = xp.stack([xp.sin(proj), xp.cos(proj)], axis=-1)
    return xp.reshape(out, (*proj.shape[:-1], 2 * proj.shape[-1])) * (1.0 / math.sqrt(m))


@kinds.register("rff", "statistic")
def _rff_statistic(proj, xp, w_sq=None, d=None):
    r""":math:`b_i = \cos w_i^\top z`."""
    return xp.cos(proj)


def row_sq_norms(W):
    r"""Squared norms :math:`\|w_i\|^2` of the rows of an (m, d) array or a RandomProjection, shape (m,)."""
    if isinstance(W, RandomProjection):
        return W.row_sq_norms()
    xp = check_weights(W, "W")
    return xp.sum(W * W, axis=1)


def feature_params(kind, params, where="random_features"):
    """The parameters of a kind for a feature map: exactly the record's, none missing (a map of one batch
    cannot choose a data-driven default: the partner batch is unknown)."""
    rec = kinds.get(kind)
    unknown = set(params) - set(rec.parameters)
    if unknown:
        raise TypeError(f"{where}: kind={kind!r} takes the parameters {', '.join(rec.parameters) or 'none'}, got "
                        f"{', '.join(sorted(unknown))}")
    missing = [p for p in rec.parameters if params.get(p) is None]
    if missing:
        hint = " (e.g. A=montecarlo.oprf.data_optimal_a(X, Y), FAVOR++'s choice)" if kind == "oprf" else ""
        raise ValueError(f"{where}: kind={kind!r} needs {', '.join(f'{p}=' for p in missing)}{hint}")
    return dict(params)


def _row_sq(X, xp):
    """Squared norms (N, 1) of the validated rows of X, refused by :func:`refuse_overflowed_rows` where one
    overflows."""
    with np.errstate(over="ignore"):  # (numpy's warning would precede the error)
        sq = xp.sum(X * X, axis=1)[:, None]
    return refuse_overflowed_rows(sq, xp, X.dtype)


def refuse_overflowed_rows(sq, xp, dtype, scaled="", hint="", name="X"):
    r"""``sq``, the squared row norms of the data, if all are finite; else a ValueError, for every feature kind.

    One rule for the feature maps (:func:`random_features` and the scikit-learn transformers): a finite row
    whose squared norm overflows (entries near 1e154 in float64, 1e19 in float32) has no usable features, of any
    kind: the positive kinds' exponent :math:`-c\|z\|^2` would be -inf (NaN features), and the RFF
    projections :math:`w^\top z` are beyond any phase resolution (their spacing in ``dtype`` exceeds
    :math:`2\pi` by a hundred orders of magnitude) or overflow to inf, whose sine is NaN.
    """
    if not bool(xp.all(xp.isfinite(sq))):
        raise ValueError(f"{name} has rows whose squared norm{scaled} overflows {dtype}: they have no usable features "
                         "(the positive kinds' exponent -c |z|^2 is -inf; the RFF phases w^T z are beyond resolution, "
                         f"or inf and their sines NaN); scale {name} down{hint}")
    return sq


def _positive_logits(X, W, kind, kernel, finish=None, params=None):
    """Validated log-features (N, width m) of a positive kind, with ``finish(z_rows, rows)`` applied per row
    block (in place)."""
    rec = kinds.get(check_kind(kind, positive=True))
    c = kernel_c(kind, kernel)
    params = feature_params(kind, params or {})
    project, d, m, xp = _as_projection(W)
    X = _check_X(X, W, xp, d)
    n, width = X.shape[0], rec.width * m
    check_budget(n * width, f"the (N, {rec.width} m) = ({n}, {width}) features",
                 "pass fewer rows of X at a time or fewer features")
    log_map = kinds.hook(kind, "log_features")
    w_sq = row_sq_norms(W) if rec.needs_w_sq() else None
    sq = _row_sq(X, xp)
    if backend_name(xp) == "numpy" and not isinstance(W, RandomProjection):
        z = np.empty((n, width), dtype=X.dtype)
        wt = W.T

        def job(rows):
            zr = z[rows]
            if rec.width == 1:  # project straight into the output (the map works in place)
                np.matmul(X[rows], wt, out=zr)
                out = log_map(zr, sq[rows], m, c, xp, w_sq=w_sq, d=d, **params)
            else:
                out = log_map(X[rows] @ wt, sq[rows], m, c, xp, w_sq=w_sq, d=d, **params)
            if out is not zr:
                zr[...] = out
            if finish is not None:
                finish(zr, rows)

        _row_jobs(xp, n, width, job)
        return z, xp
    z = log_map(project(X), sq, m, c, xp, w_sq=w_sq, d=d, **params)
    if finish is not None:
        finish(z, slice(0, n))
    return z, xp


def log_features(X, W, kind="prf", kernel="gaussian", **params):
    r"""Logarithm of the features of a positive kind, shape (N, width m).

    Parameters
    ----------
    X : array (N, d), finite
    W : array (m, d) or RandomProjection
    kind : str
        A positive feature kind (``theory.feature_kinds.names(positive=True)``: 'prf', 'hyperbolic').
    kernel : {'gaussian', 'softmax'}
        The target kernel: c = 1 in :math:`e^{-c\|x\|^2}` (eq. ``def_prf``) or c = 1/2.
    **params
        The kind's parameters (``A`` for 'oprf'), all required.
    """
    return _positive_logits(X, W, kind, kernel, params=params)[0]


def prf_log_features(X, W, kernel="gaussian"):
    r"""Logarithm of the PRF features, :math:`w_i^\top z - c\|z\|^2 - \tfrac12\log m`, shape (N, m)
    (:func:`log_features` with ``kind='prf'``).

    Parameters
    ----------
    X : array (N, d), finite
    W : array (m, d) or RandomProjection
    kernel : {'gaussian', 'softmax'}
        c = 1 (eq. ``def_prf``) or c = 1/2.
    """
    return _positive_logits(X, W, "prf", kernel)[0]


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


def random_features(X, W, kind="prf", kernel="gaussian", stabilize=None, **params):
    r"""Random features of a batch for any feature kind, vectorised (numpy, torch or cupy arrays).

    Parameters
    ----------
    X : array (N, d)
        Data (finite; NaN or inf raise ValueError, and so do rows whose
        squared norm overflows, for every kind: :func:`refuse_overflowed_rows`).
    W : array (m, d) or RandomProjection
        Projections from :func:`~montecarlo.sample_weights` or
        :func:`~montecarlo.sample_projection`.
    kind : str
        A feature kind of :mod:`theory.feature_kinds`: ``'prf'`` (eq. ``def_prf``),
        ``'rff'`` (eq. ``rffdef2``), ``'hyperbolic'`` (FAVOR+'s
        :math:`[e^{w^\top x}, e^{-w^\top x}]/\sqrt{2m}`), ...
    kernel : {'gaussian', 'softmax'}
        The target kernel (RFFs: 'gaussian').  For the positive kinds,
        ``'gaussian'`` carries :math:`e^{-\|z\|^2}` (unbiased for
        :math:`e^{-\|x-y\|^2/2}`), ``'softmax'`` :math:`e^{-\|z\|^2/2}` (unbiased for
        :math:`e^{x^\top y}`).
    stabilize : {None, 'row', 'global'}
        Positive kinds only: log-space offset (:ref:`guide-montecarlo.features`).
    **params
        The kind's parameters, all required: ``A`` (< 1/8) for ``'oprf'``
        (:func:`montecarlo.oprf.data_optimal_a` gives FAVOR++'s choice for a pair
        of batches).

    Returns
    -------
    phi : array (N, width m)
        Features (rescaled by :math:`e^{-o}` when stabilised).
    offset : array (N,) or 0-d array
        Only when ``stabilize`` is not None: the subtracted log offset
        :math:`o`, so that the unstabilised features are :math:`\phi e^{o}`.
    """
    rec = kinds.get(check_kind(kind))
    _check_stabilize(stabilize)
    if not rec.positive:
        if stabilize is not None:
            raise ValueError(f"stabilize must be None for kind={kind!r} (its features are not positive), "
                             f"got {describe(stabilize)}")
        c = kernel_c(kind, kernel)
        params = feature_params(kind, params)
        project, d, m, xp = _as_projection(W)
        X = _check_X(X, W, xp, d)
        check_budget(rec.width * X.shape[0] * m, f"the (N, {rec.width} m) = ({X.shape[0]}, {rec.width * m}) "
                     "features", "pass fewer rows of X at a time or fewer features")
        w_sq = row_sq_norms(W) if rec.needs_w_sq() else None
        sq = _row_sq(X, xp)  # (refused before projecting: an overflowing row's projection would warn first)
        return kinds.hook(kind, "features")(project(X), sq, m, c, xp, w_sq=w_sq, d=d, **params)
    if stabilize is None:
        return _positive_logits(X, W, kind, kernel, lambda zr, rows: exp_inplace(zr, _ns(zr)), params)[0]
    if stabilize == "row":
        offs = {}

        def finish(zr, rows):
            xq = _ns(zr)
            o = xq.max(zr, axis=1)
            zr -= o[:, None]
            exp_inplace(zr, xq)
            offs[rows.start] = o

        z, xp = _positive_logits(X, W, kind, kernel, finish, params)
        off = xp.concat([offs[k] for k in sorted(offs)]) if len(offs) > 1 else offs[0]
        return z, off
    z, xp = _positive_logits(X, W, kind, kernel, params=params)
    off = xp.max(z)
    z -= off
    return exp_inplace(z, xp), off


def prf_features(X, W, kernel="gaussian", stabilize=None):
    r"""Positive random features of a batch (eq. ``def_prf``): :func:`random_features` with ``kind='prf'``.

    Parameters
    ----------
    X : array (N, d)
    W : array (m, d) or RandomProjection
    kernel : {'gaussian', 'softmax'}
        ``'gaussian'``: :math:`m^{-1/2}e^{-\|z\|^2}e^{w_i^\top z}` (unbiased for
        :math:`e^{-\|x-y\|^2/2}`); ``'softmax'``: :math:`m^{-1/2}e^{-\|z\|^2/2}e^{w_i^\top z}`
        (unbiased for :math:`e^{x^\top y}`).
    stabilize : {None, 'row', 'global'}
        Log-space offset (see :ref:`guide-montecarlo.features` for what it preserves).

    Returns
    -------
    phi : array (N, m)
    offset : array, only when ``stabilize`` is not None
    """
    return random_features(X, W, "prf", kernel, stabilize)


def _check_stabilize(stabilize):
    if stabilize is not None and not (isinstance(stabilize, str) and stabilize in STABILIZE):
        kind = ValueError if isinstance(stabilize, str) else ArgumentTypeError
        raise kind(f"stabilize must be None, 'row' or 'global', got {describe(stabilize)}")


def rff_features(X, W):
    r"""Random Fourier features of a batch (eq. ``rffdef2``), shape (N, 2m): :func:`random_features` with
    ``kind='rff'``.

    :math:`\phi(z) = m^{-1/2}(\sin w_1^\top z, \cos w_1^\top z, \ldots,
    \sin w_m^\top z, \cos w_m^\top z)`; :math:`\phi(x)^\top\phi(y) =
    \frac1m\sum_i\cos w_i^\top(x-y)`, unbiased for :math:`e^{-\|x-y\|^2/2}`
    when every :math:`w_i\sim\mathcal N(0, I_d)`.

    Parameters
    ----------
    X : array (N, d)
    W : array (m, d) or RandomProjection
    """
    return random_features(X, W, "rff")


def log_kernel_matrix(X, Y=None, kernel="gaussian"):
    r"""Logarithm of the exact kernel between the rows of X and Y, shape (N, N'): one home for the targets.

    ``'gaussian'``: :math:`-\|x_a - y_b\|^2/2` (clipped at 0 against rounding);
    ``'softmax'``: :math:`x_a^\top y_b`.  X and Y are validated arrays of one
    backend (numpy, torch or cupy); Y defaults to X.
    """
    kernel = check_kernel(kernel)
    xp = _ns(X)
    Y = X if Y is None else Y
    g = xp.matmul(X, xp.matrix_transpose(Y))
    if kernel == "softmax":
        return g
    g *= 2.0
    g -= xp.sum(X * X, axis=1)[:, None]
    g -= xp.sum(Y * Y, axis=1)[None, :]
    if isinstance(g, np.ndarray):
        np.minimum(g, 0.0, out=g)  # in place: no second (N, N') array
    else:
        g = xp.minimum(g, xp.zeros_like(g[:1, :1]))
    g *= 0.5
    return g
