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
from theory.validation import check_real, describe

from ._backend import backend_name, exp_inplace
from ._checks import ArgumentTypeError, check_budget, check_data, check_kernel, check_kind, check_weights
from .couplings import RandomProjection

#: log of float64's largest number (709.78): an exponent above it overflows.
_LOG_LARGEST = math.log(np.finfo(np.float64).max)

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


def check_kind_params(kind, params, where=None, *, name="params", chosen=None, reals=False, d=None):
    """The parameters of a feature kind as given by a caller, checked once for every layer: a dict (or None)
    holding only the kind's parameters (``FeatureKind.parameters``) and every
    required one, returned as a new dict.

    Parameters
    ----------
    kind : str
        A feature kind (checked).
    params : dict or None
        The values given.
    where : str, optional
        The caller, prefixed to the messages.
    name : str
        How the caller spells the argument (``'params'``, ``'kind_params'``), named by the messages.
    chosen : {None, 'data', 'pair'}
        Where a parameter left out is chosen, if the kind has the rule: ``'data'``, from the data by its
        ``data_parameters`` hook (:class:`montecarlo.nn.PRFAttention`); ``'pair'``, at the pair by its
        ``float_parameters`` hook (the pointwise estimators: e.g. OPRFs' optimal A).  None: every parameter
        the kind does not declare optional is required (a map of one batch cannot choose it: the partner batch
        is unknown).
    reals : bool
        Each value must be a real number (not an array, not a tensor), returned as a float.
    d : int, optional
        Check the given values with the kind's own rule now (its ``float_parameters`` hook at dimension d,
        e.g. OPRFs' A < 1/8) rather than at the first use.

    Raises
    ------
    TypeError
        ``params`` not a dict; a parameter the kind does not take (also a ValueError); a tensor where a
        real is needed.
    ValueError
        A required parameter missing; a value the kind's rule refuses.
    """
    rec = kinds.get(check_kind(kind))
    at = f"{where}: " if where else ""
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise TypeError(f"{at}{name} must be None or a dict of the parameters of kind={kind!r} "
                        f"({', '.join(map(repr, rec.parameters)) or 'none'}), got {describe(params)}")
    unknown = [p for p in params if p not in rec.parameters]
    if unknown:
        raise ArgumentTypeError(f"{at}{name} has {unknown[0]!r}, which kind={kind!r} does not take (its "
                                f"parameters: {', '.join(map(repr, rec.parameters)) or 'none'})")
    rule = {"data": "data_parameters", "pair": "float_parameters"}.get(chosen)
    optional = set(rec.optional_parameters) | (set(rec.parameters) if rule and rec.has(rule) else set())
    missing = [p for p in rec.parameters if params.get(p) is None and p not in optional]
    if missing:
        why = (f"the kind has no rule choosing it from the {chosen}" if rule else
               "a feature map of one batch cannot choose it from the data: the partner batch is unknown")
        raise ValueError(f"{at}kind={kind!r} needs {', '.join(f'{p}=' for p in missing)} (in {name}; {why})")
    out = {p: v for p, v in params.items() if v is not None or p not in optional}
    if reals:
        for p, value in out.items():
            if not isinstance(value, (int, float, np.integer, np.floating)) and hasattr(value, "shape"):
                raise TypeError(f"{at}{name}[{p!r}] must be a real number, got {describe(value)}")
            out[p] = float(check_real(value, f"{name}[{p!r}]"))
    if d is not None and out and rec.has("float_parameters"):
        try:
            kinds.hook(kind, "float_parameters")(d, 0.0, **out)
        except ValueError as exc:
            raise ValueError(f"{at}{name}={params} for kind={kind!r}: {exc}") from None
    return out


def feature_params(kind, params, where="random_features"):
    """:func:`check_kind_params` of a feature map (every parameter given)."""
    return check_kind_params(kind, params, where)


class FeatureMap:
    r"""The feature map of one feature kind for one target kernel, with its parameters and (optionally) its
    projections: the one place that turns a kind's record and hooks (:mod:`theory.feature_kinds`) into
    features, log-features and the Monte Carlo estimator's statistic.

    Every consumer goes through it: :func:`random_features`, the estimators
    (:func:`montecarlo.estimators.kernel_estimate`, :func:`montecarlo.estimators.gram_estimate`, ...), the
    scikit-learn transformers, :class:`montecarlo.nn.PRFAttention`, the experiments and the sampler audit.  It owns the projection :math:`w_i^\top x` (after the kind's
    ``prepare`` hook, for kinds whose map transforms the directions, e.g. SDERFs' :math:`\mathbf B`),
    :math:`\|x\|^2` and :math:`\|w_i\|^2`, the kernel prefactor :math:`e^{a\|x\|^2}` and the pair vector
    (:math:`x + y` or :math:`x - y`), and reads the record's named properties ``log_space``, ``argument``
    and ``prefactor_exponent(kernel)``.

    Parameters
    ----------
    kind : str
        A feature kind (``theory.feature_kinds.names()``).
    W : array (m, d) or RandomProjection, optional
        The projections (needed by ``__call__``; the estimators draw their own).
    kernel : {'gaussian', 'softmax'}
        The target kernel; a kernel the kind does not estimate is a ValueError naming the kind, the kernel and
        the kernels it estimates.
    where : str, keyword-only
        The caller, named by the messages.
    chosen : {None, 'data', 'pair'}, keyword-only
        Where parameters left out are chosen (:func:`check_kind_params`; None: all required).  Those chosen
        later are passed to :meth:`apply` as ``params``.
    **params
        The kind's parameters.

    Examples
    --------
    >>> import numpy as np, montecarlo as mc
    >>> W = mc.sample_weights("orthogonal", 3, 4, rng=0)
    >>> fmap = mc.FeatureMap("hyperbolic", W, "softmax")
    >>> fmap(np.full((2, 3), 0.1)).shape, fmap.log_space, fmap.argument
    ((2, 8), True, 'v')
    """

    __slots__ = ("kind", "record", "kernel", "c", "params", "W", "d", "m", "xp", "_map", "_project", "_rows",
                 "_terms", "_w_sq", "_statistic")

    def __init__(self, kind="prf", W=None, kernel="gaussian", *, where=None, chosen=None, **params):
        rec = kinds.get(check_kind(kind))
        self.kind, self.record = kind, rec
        self.kernel = check_kernel(kernel)
        self.c = kernel_c(kind, kernel)  # (refuses a kernel the kind does not estimate)
        self.params = check_kind_params(kind, params, where, chosen=chosen)
        self._map = kinds.hook(kind, "log_features" if rec.log_space else "features")
        self._statistic = None
        self.W = W
        self._rows = self._terms = self._w_sq = None
        if W is None:
            self.d = self.m = self.xp = self._project = None
            return
        if rec.has("prepare"):  # the directions transformed once per draw (dense weights)
            if isinstance(W, RandomProjection):
                W = W.weights
            xp = check_weights(W, "W")
            transform, self._terms = kinds.hook(kind, "prepare")(W, xp, **self.params)
            self._rows = W if transform is None else xp.matmul(W, _like(xp, transform, W))
            rows_t = xp.matrix_transpose(self._rows)
            self._project, self.d, self.m, self.xp = (lambda x: xp.matmul(x, rows_t)), W.shape[1], W.shape[0], xp
        else:
            self._project, self.d, self.m, self.xp = _as_projection(W)
            self._rows = None if isinstance(W, RandomProjection) else W
            self._terms = {}

    # -- the record's named properties -------------------------------------------------------------------

    @property
    def log_space(self):
        """Whether the features are the exp of log-features (the positive kinds)."""
        return self.record.log_space

    @property
    def argument(self):
        """``'v'`` (the statistic depends on x + y) or ``'z'`` (on x - y)."""
        return self.record.argument

    @property
    def width(self):
        """Features per direction."""
        return self.record.width

    @property
    def prefactor_exponent(self):
        r"""a in the features' factor :math:`e^{a\|x\|^2}` (the record's ``prefactor_exponent(kernel)``)."""
        return -self.c

    def needs_w_sq(self):
        """Whether the kind's hooks take the squared norms of the directions."""
        return self.record.needs_w_sq()

    def needs_weights(self):
        """Whether the statistic needs the directions themselves (a ``prepare`` hook), not only their
        projections on the pair vector: the estimators then draw whole weight matrices."""
        return self.record.has("prepare")

    # -- features --------------------------------------------------------------------------------------

    def project(self, X):
        """The projections of validated rows X (N, d): (N, m)."""
        return self._project(X)

    def direction_terms(self, W=None, rows_axis=False, xp=None):
        r"""Keywords of the kind's hooks computed from the directions: ``w_sq`` (kinds that need
        :math:`\|w_i\|^2`) and the per-direction terms of the ``prepare`` hook; for ``W`` (..., m, d) or the
        map's own projections.  ``rows_axis``: shaped (..., 1, m), against projections (..., N, m); ``xp``: W's
        array namespace, if the caller has it."""
        if W is None:
            if self._w_sq is None and self.needs_w_sq():
                self._w_sq = row_sq_norms(self.W)
            return {"w_sq": self._w_sq, **self._terms}
        return self.prepared(W, rows_axis, xp)[1]

    def prepared(self, W, rows_axis=False, xp=None):
        """``(rows, terms)`` for directions W (..., m, d): the rows whose products with x are the projections
        (W itself, or W times the ``prepare`` hook's transform) and :meth:`direction_terms`."""
        xp = _ns(W) if xp is None else xp
        w_sq = xp.sum(W * W, axis=-1) if self.needs_w_sq() else None
        rows, terms = W, {}
        if self.needs_weights():
            transform, terms = kinds.hook(self.kind, "prepare")(W, xp, **self.params)
            if transform is not None:
                rows = xp.matmul(W, _like(xp, transform, W))
        terms = {"w_sq": w_sq, **terms}
        if rows_axis:
            terms = {k: (None if t is None else t[..., None, :]) for k, t in terms.items()}
        return rows, terms

    def transform_vector(self, vec):
        """A float64 numpy pair vector transformed as the directions' ``prepare`` hook says (itself for most
        kinds): the projections on it are those of :meth:`prepared`'s rows."""
        if self.needs_weights():
            transform = kinds.hook(self.kind, "prepare")(None, None, **self.params)[0]
            if transform is not None:
                return transform @ vec
        return vec

    def apply(self, proj, sq, *, m=None, d=None, log=False, params=None, xp=None, **terms):
        r"""The kind's map on given projections ``proj`` (..., m) and squared norms ``sq`` (broadcastable to
        ``proj[..., :1]``): log-features (``log=True``, log-space kinds only) or features (the exp taken in
        place for the log-space kinds), (..., width m).  ``proj`` may be overwritten.  ``m``, ``d``: default
        the map's; ``params`` replace the map's parameters (e.g. tensors chosen from the data); ``terms``:
        :meth:`direction_terms` (``w_sq=...``); ``xp``: proj's array namespace, if the caller has it."""
        if log and not self.record.log_space:
            self._refuse_log()
        xp = _ns(proj) if xp is None else xp
        out = self._map(proj, sq, proj.shape[-1] if m is None else m, self.c, xp,
                        d=self.d if d is None else d, **terms, **(self.params if params is None else params))
        if self.record.log_space and not log:
            out = exp_inplace(out, xp)
        return out

    def _refuse_log(self):
        raise ValueError(f"log=True needs a kind computed in log space "
                         f"({', '.join(map(repr, kinds.names(log_space=True)))}), got kind={self.kind!r} (its "
                         "features can be negative)")

    def linear_form(self, w, params=None, xp=None):
        """The kind's log-features as one linear map (hook ``linear_log_features``: ``(rows, bias)`` or None)
        for projections ``w`` (m, d)."""
        xp = _ns(w) if xp is None else xp
        w_sq = xp.sum(w * w, axis=-1) if self.needs_w_sq() else None
        return kinds.hook(self.kind, "linear_log_features")(w, w.shape[0], xp, w_sq=w_sq, d=w.shape[1],
                                                             **(self.params if params is None else params))

    def check_X(self, X):
        """X validated against the projections (backend, device, dtype, d columns)."""
        return _check_X(X, self._rows if self._rows is not None else self.W, self.xp, self.d)

    def __call__(self, X, log=False, stabilize=None):
        r"""Features (N, width m) of the rows of X (:func:`random_features`), or with ``log=True`` their
        logarithms (log-space kinds); ``stabilize`` ('row' or 'global', log-space kinds) returns
        ``(features, offset)``."""
        if self.W is None:
            raise ValueError("this FeatureMap has no projections: pass W=...")
        _check_stabilize(stabilize)
        rec = self.record
        if not rec.log_space:
            if stabilize is not None:
                raise ValueError(f"stabilize must be None for kind={self.kind!r} (its features are not positive), "
                                 f"got {describe(stabilize)}")
            if log:
                self._refuse_log()
            X = self.check_X(X)
            self._budget(X.shape[0])
            sq = _row_sq(X, self.xp)  # (refused before projecting: an overflowing row's projection would warn first)
            return self.apply(self._project(X), sq, **self.direction_terms())
        if log or stabilize is None:
            finish = None if log else (lambda zr, rows: exp_inplace(zr, _ns(zr)))
            return self._log_rows(X, finish)[0]
        if stabilize == "row":
            offs = {}

            def finish(zr, rows):
                xq = _ns(zr)
                o = xq.max(zr, axis=1)
                zr -= o[:, None]
                exp_inplace(zr, xq)
                offs[rows.start] = o

            z, xp = self._log_rows(X, finish)
            off = xp.concat([offs[k] for k in sorted(offs)]) if len(offs) > 1 else offs[0]
            return z, off
        z, xp = self._log_rows(X)
        off = xp.max(z)
        z -= off
        return exp_inplace(z, xp), off

    def _budget(self, n):
        width = self.record.width * self.m
        check_budget(n * width, f"the (N, {self.record.width} m) = ({n}, {width}) features",
                     "pass fewer rows of X at a time or fewer features")

    def _log_rows(self, X, finish=None):
        """Validated log-features (N, width m), with ``finish(z_rows, rows)`` applied per row block (in place);
        on numpy split across threads (:func:`_row_jobs`)."""
        X = self.check_X(X)
        xp, m, d, rec = self.xp, self.m, self.d, self.record
        n, width = X.shape[0], rec.width * m
        self._budget(n)
        terms = self.direction_terms()
        sq = _row_sq(X, xp)
        log_map, c, params = self._map, self.c, self.params
        if backend_name(xp) == "numpy" and self._rows is not None:
            z = np.empty((n, width), dtype=X.dtype)
            wt = self._rows.T

            def job(rows):
                zr = z[rows]
                if rec.width == 1:  # project straight into the output (the map works in place)
                    np.matmul(X[rows], wt, out=zr)
                    out = log_map(zr, sq[rows], m, c, xp, d=d, **terms, **params)
                else:
                    out = log_map(X[rows] @ wt, sq[rows], m, c, xp, d=d, **terms, **params)
                if out is not zr:
                    zr[...] = out
                if finish is not None:
                    finish(zr, rows)

            _row_jobs(xp, n, width, job)
            return z, xp
        z = log_map(self._project(X), sq, m, c, xp, d=d, **terms, **params)
        if finish is not None:
            finish(z, slice(0, n))
        return z, xp

    # -- the Monte Carlo estimator ----------------------------------------------------------------------

    def pair(self, x, y):
        r"""(pair vector, log prefactor) of two float64 numpy vectors: :math:`v = x + y` or :math:`z = x - y`
        (the record's ``argument``), transformed by the kind's ``prepare`` transform where it has one, and
        :math:`\log P = a(\|x\|^2 + \|y\|^2)` with :math:`\hat K = P\frac1m\sum_i b_i`."""
        return self.transform_vector(pair_vector(self.kind, x, y)), self.prefactor_exponent * float(x @ x + y @ y)

    def statistic(self, proj, xp, d=None, **terms):
        r"""The per-direction statistic :math:`b_i` of the projections on the pair vector (its logarithm for a
        log-space kind); ``terms``: :meth:`direction_terms` of the same draws."""
        if self._statistic is None:
            self._statistic = kinds.hook(self.kind, "statistic")
        return self._statistic(proj, xp, d=d, **terms, **self.params)

    def pair_values(self, b):
        """:math:`b_i` from :meth:`statistic` (the exp of a log-space kind's)."""
        return _ns(b).exp(b) if self.record.log_space else b

    def kernel_estimates(self, b, log_pref, on_host=False):
        r"""Per draw :math:`\hat K = P\frac1m\sum_i b_i` from the statistic b (k, m) (overwritten) and
        :math:`\log P` of :meth:`pair`."""
        xp = _ns(b)
        if not self.record.log_space:
            if log_pref > _LOG_LARGEST:
                raise ValueError(f"kind={self.kind!r}: the prefactor P = exp({log_pref:.6g}) of the kernel estimate "
                                 "overflows float64 (|x|^2 + |y|^2 too large for this kind); scale the points down or "
                                 "use a positive kind, computed in log space")
            return xp.mean(b, axis=1) * math.exp(log_pref)
        log_pref = log_pref - math.log(b.shape[1])
        if on_host and float(xp.max(b)) < 700.0:  # exp cannot overflow: sum directly
            return xp.sum(exp_inplace(b, xp), axis=1) * math.exp(log_pref)
        rtop = xp.max(b, axis=1)  # per-row log-sum-exp (no host synchronisation on a device backend)
        lse = rtop + xp.log(xp.sum(exp_inplace(b - rtop[:, None], xp), axis=1))
        return xp.exp(lse + log_pref)

    def statistic_log_mean(self, t):
        r""":math:`\log\mathbb E b` for a pair vector of norm t under Gaussian directions: :math:`t^2/2` (argument
        v) or :math:`-t^2/2` (argument z)."""
        return (0.5 if self.record.argument == "v" else -0.5) * t * t


def pair_vector(kind, x, y):
    """The pair vector of a feature kind's statistic: x + y (the record's ``argument`` 'v') or x - y ('z')."""
    return x + y if kinds.get(kind).argument == "v" else x - y


def _like(xp, arr, like):
    """A float64 numpy array on the backend, device and dtype of ``like``."""
    out = xp.asarray(arr, device=getattr(like, "device", None))
    return xp.astype(out, like.dtype) if out.dtype != like.dtype else out


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
    check_kind(kind, log_space=True)
    return FeatureMap(kind, W, kernel, where="log_features", **params)(X, log=True)


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
    return FeatureMap("prf", W, kernel, where="prf_log_features")(X, log=True)


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
    _check_stabilize(stabilize)
    return FeatureMap(kind, W, kernel, where="random_features", **params)(X, stabilize=stabilize)


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
