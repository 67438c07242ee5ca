r"""Random feature maps as scikit-learn transformers (optional extra ``sklearn``).

The transformers, feature kinds, bandwidth, scale, number of features, randomness, threads and memory, with
examples: :ref:`guide-montecarlo.kernel_approximation` (``docs/guide/sampling.rst``).
"""

from __future__ import annotations

import contextvars
import math
import warnings
from concurrent.futures import ThreadPoolExecutor
from numbers import Integral, Real

import array_api_compat
import numpy as np

try:
    import scipy.sparse as _sparse
    from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin, _fit_context
    from sklearn.utils._param_validation import Interval, StrOptions
    from sklearn.utils.metaestimators import available_if
    from sklearn.utils.validation import check_is_fitted, validate_data
except ImportError as exc:  # missing, or older than 1.6 (no validate_data / __sklearn_tags__)
    raise ImportError("montecarlo.kernel_approximation needs scikit-learn >= 1.6 "
                      "(pip install 'simplex-rf[sklearn]'); the plain feature maps montecarlo.prf_features and "
                      f"montecarlo.rff_features work without it ({exc})") from exc

from theory import feature_kinds as _kinds
from theory import registry as _registry

from ._checks import AllocationError, check_budget, check_rng
from . import oprf as _oprf
from .couplings import _caller_level, sample_weights
from .features import FeatureMap, refuse_overflowed_rows, thread_limit

__all__ = ["FeatureUnderflowWarning", "PositiveRandomFeatures", "RandomFeatures", "RandomFourierFeatures"]

_DTYPES = [np.float64, np.float32]
_SPARSE = ("csr", "csc")

#: Entries of one row block of the elementwise work (the map and exp), and the least work worth a second thread.
_BLOCK = 1 << 16
_PARALLEL_MIN = 1 << 18

#: True while :meth:`RandomFeatures.log_transform` runs ``transform``: the map then returns the logarithms, and
#: scikit-learn's ``set_output`` wrapping of ``transform`` gives them transform's container.
_LOG = contextvars.ContextVar("montecarlo_kernel_approximation_log", default=False)


class FeatureUnderflowWarning(RuntimeWarning):
    """Every feature of some rows underflowed to 0: the data is too large for the bandwidth."""


def _row_blocks(n, width, job):
    """Run ``job(rows)`` over row blocks of about :data:`_BLOCK` entries; on several threads (per
    :func:`montecarlo.features.thread_limit`, which follows OMP_NUM_THREADS and ``threadpool_limits``) when
    the work is large.  Results do not depend on the number of threads."""
    step = max(1, _BLOCK // max(width, 1))
    blocks = [slice(lo, min(lo + step, n)) for lo in range(0, n, step)]
    threads = min(thread_limit(), len(blocks)) if n * width >= _PARALLEL_MIN else 1
    if threads <= 1:
        for rows in blocks:
            job(rows)
        return
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="montecarlo-sklearn") as pool:
        list(pool.map(job, blocks))


def _sq_norms(X):
    """Row squared norms (N, 1) of a dense array or a CSR/CSC matrix, in X's dtype."""
    if _sparse.issparse(X):
        return np.asarray(X.multiply(X).sum(axis=1), dtype=X.dtype).reshape(-1, 1)
    return np.einsum("ij,ij->i", X, X)[:, None]


def _generator(random_state):
    """A numpy Generator (or None) from ``random_state``; a RandomState seeds one with a 63-bit draw."""
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(int(random_state.randint(0, 2**63 - 1, dtype=np.int64)))
    rng = check_rng(random_state, "random_state", extra_types=(np.random.RandomState,))
    if isinstance(rng, np.random.SeedSequence):
        rng = np.random.default_rng(rng)
    return rng


def _names(items):
    return ", ".join(repr(n) for n in items)


def _constraints(kinds):
    """The declarative parameter constraints (scikit-learn's ``_parameter_constraints``), ``kind`` among
    ``kinds``; an invalid value makes ``fit`` raise :class:`sklearn.utils._param_validation.InvalidParameterError`
    (a ValueError and a TypeError) naming the parameter, the estimator and the allowed values."""
    return {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "coupling": [StrOptions(set(_registry.names()))],
        "kind": [StrOptions(set(kinds))],
        "kernel": [StrOptions(set(_kinds.KERNELS))],
        "gamma": [Interval(Real, 0, math.inf, closed="neither"), StrOptions({"scale"})],
        "A": [None, Interval(Real, None, 0.125, closed="neither")],
        "random_state": [None, Interval(Integral, 0, None, closed="left"), np.random.Generator,
                         np.random.SeedSequence, np.random.RandomState],
    }


def _has_log_features(est):
    """Whether ``est.kind`` has log-features (the positive kinds): :meth:`RandomFeatures.log_transform` exists
    only then."""
    return est.kind in _kinds.names(has="log_features")


class RandomFeatures(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    r"""Random features of any feature kind as a scikit-learn transformer.

    ``transform(X)`` returns :math:`\phi(\sqrt{2\gamma}\,x)` with :math:`\phi` the
    map of ``kind`` (the features of :func:`montecarlo.random_features`), so that
    :math:`\phi(x)^\top\phi(y)` estimates :math:`e^{-\gamma\|x-y\|^2}`
    (``kernel="gaussian"``) or, for the positive kinds, :math:`e^{2\gamma x^\top y}`
    (``kernel="softmax"``), unbiasedly for the exact couplings.
    :class:`PositiveRandomFeatures` (the positive kinds, with the same
    parameters) and :class:`RandomFourierFeatures` (``kind='rff'``) are its
    named forms, with the same features for the same parameters and seed.

    Parameters
    ----------
    n_components : int >= 1, default 100
        Number m of random projections; the output has ``width * m`` columns
        (width 1 for ``'prf'`` and ``'oprf'``, 2 for ``'hyperbolic'`` and
        ``'rff'``).  Any m, not only multiples of d.
    coupling : str, default 'simplex'
        Any coupling of the registry, ``theory.registry.names()`` (now
        {couplings}).  For ``kind='rff'`` prefer ``'orthogonal'``, the default
        of :class:`RandomFourierFeatures` (whose docstring gives the numbers).
    kind : str, default 'prf'
        Any feature kind, ``theory.feature_kinds.names()`` (now {all_kinds}).
    kernel : {'gaussian', 'softmax'}, default 'gaussian'
        The target kernel; ``'softmax'`` for the positive kinds only.
    gamma : float > 0 or 'scale', default 0.5
        Bandwidth as in :class:`sklearn.kernel_approximation.RBFSampler`
        (:ref:`guide-montecarlo.kernel_approximation`); 0.5 is the paper's kernel.
    A : float < 1/8 or None, default None
        Only for ``kind='oprf'``, as in :class:`PositiveRandomFeatures`.
    random_state : None, int >= 0, numpy.random.Generator, SeedSequence or RandomState
        Seed of the projections (:ref:`guide-montecarlo.kernel_approximation`).

    Attributes
    ----------
    weights_ : ndarray of shape (n_components, n_features)
        The projections :math:`w_i` (rows), float64.
    gamma_ : float
        The bandwidth used (``gamma``, or its value for ``'scale'``).
    A_ : float
        Only for ``kind='oprf'``: the A used.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``fit`` saw a DataFrame with string column names.

    See Also
    --------
    montecarlo.random_features : The plain function (any array backend, optional log-space offsets).
    PositiveRandomFeatures, RandomFourierFeatures : The named forms.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.random.default_rng(0).normal(size=(5, 3)) / 3
    >>> RandomFeatures(n_components=4, kind="rff", coupling="orthogonal", random_state=0).fit_transform(X).shape
    (5, 8)
    """

    _parameter_constraints: dict = _constraints(_kinds.names())

    def __init__(self, n_components=100, *, coupling="simplex", kind="prf", kernel="gaussian", gamma=0.5,
                 A=None, random_state=None):
        self.n_components = n_components
        self.coupling = coupling
        self.kind = kind
        self.kernel = kernel
        self.gamma = gamma
        self.A = A
        self.random_state = random_state

    def _check_params(self):
        """The rules between parameters, which the declarative constraints cannot state; the kind's record and
        the Generator of the draws."""
        for name in ("n_components", "gamma", "A"):  # scikit-learn's Interval takes True for 1: no coercion here
            if isinstance(getattr(self, name), (bool, np.bool_)):
                raise TypeError(f"{name} must be a number, not a bool, got {getattr(self, name)!r}")
        kind = self.kind
        rec = _kinds.get(kind)
        _kinds.kernel_c(kind, self.kernel)  # the kernel must be one the kind estimates
        unsupported = [p for p in rec.parameters if p != "A"]
        if unsupported:  # a kind whose parameters this class has no rule for
            usable = [k for k in _kinds.names() if set(_kinds.get(k).parameters) <= {"A"}]
            raise ValueError(f"kind={kind!r} has the parameter(s) {rec.parameters}, which {type(self).__name__} "
                             f"cannot choose; use one of {_names(usable)}")
        if self.A is not None and "A" not in rec.parameters:
            raise ValueError(f"A must be None for kind={kind!r} (only 'oprf' takes A), got {self.A!r}")
        return rec, _generator(self.random_state)

    def _validate(self, X, reset):
        try:
            return validate_data(self, X, reset=reset, dtype=_DTYPES, accept_sparse=_SPARSE)
        except ValueError as exc:
            if "could not convert" in str(exc):
                raise ValueError(f"X must hold numbers (it is converted to float64 or float32): {exc}; encode "
                                 "text or categorical columns first (e.g. sklearn.preprocessing.OneHotEncoder)"
                                 ) from exc
            raise

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Draw the random projections for data of X's width.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
            Training data; only its width (and, for ``gamma="scale"``, its
            variance) is used.
        y : None
            Ignored.

        Returns
        -------
        self : object
            The fitted estimator.

        Raises
        ------
        ValueError
            For a bad parameter: scikit-learn's ``InvalidParameterError`` (a
            ValueError and a TypeError) naming it and the allowed values.  For
            parameters that do not go together (a kernel the kind does not
            estimate, ``A`` for a kind without it), non-finite or empty data, or
            fewer features than the coupling needs (d >= 2 for the simplex
            couplings).
        """
        rec, rng = self._check_params()
        coupling, m, gamma = self.coupling, int(self.n_components), self.gamma
        X = self._validate(X, reset=True)
        d = X.shape[1]
        min_d = _registry.get(coupling).min_d
        if d < min_d:
            raise ValueError(f"X has {d} feature(s), but coupling {coupling!r} needs n_features = d >= {min_d}")
        if isinstance(gamma, str) and gamma == "scale":  # RBFSampler's rule, also for sparse X
            var = float(X.multiply(X).mean() - X.mean() ** 2) if _sparse.issparse(X) else float(X.var())
            gamma = 1.0 / (d * var) if var > 0 else 1.0
        self.gamma_ = float(gamma)
        if "A" in rec.parameters:
            self.A_ = self._fit_a(X, d)
        try:
            weights = sample_weights(coupling, d, m, rng=rng)
        except MemoryError as exc:
            if isinstance(exc, AllocationError):  # already names the arguments
                raise
            raise MemoryError(f"fit could not allocate weights_, the (n_components, d) = ({m}, {d}) projections "
                              f"({8 * m * d / 2**30:.3g} GiB in float64, and up to about 5.5 times that while sampling "
                              f"the {coupling!r} coupling): use fewer n_components or reduce d first (e.g. "
                              f"sklearn.random_projection); {exc}") from exc
        self.weights_ = weights
        self._n_features_out = rec.width * m
        return self

    def _fit_a(self, X, d):
        """OPRFs' A: the given one, or FAVOR++'s choice from the training data's mean statistics (of the scaled
        rows z = sqrt(2 gamma) x, queries and keys alike)."""
        if self.A is not None:
            return _oprf.check_a(self.A)
        scale2 = 2.0 * self.gamma_
        mean_sq = float(np.mean(_sq_norms(X))) * scale2
        mean = np.asarray(X.mean(axis=0), dtype=np.float64).ravel() * math.sqrt(scale2)
        return _oprf.moments_optimal_a(mean_sq, mean, mean_sq, mean)

    def _map(self, X, log=False):
        """The features (or, ``log=True``, the log-features of a positive kind) of validated X: one product
        for the projections, then the kind's hook and exp per row block."""
        rec = _kinds.get(self.kind)
        fmap = FeatureMap(self.kind, kernel=self.kernel, where=type(self).__name__,
                          **({"A": self.A_} if "A" in rec.parameters else {}))
        W = self.weights_.astype(X.dtype, copy=False)
        m = W.shape[0]
        n, width = X.shape[0], fmap.width * m
        check_budget(n * width, f"the (n_samples, {fmap.width} n_components) = ({n}, {width}) features",
                     "transform fewer rows at a time or use fewer n_components")
        scale = math.sqrt(2.0 * self.gamma_)
        with np.errstate(over="ignore"):  # (an overflow is refused just below, for every kind)
            sq = _sq_norms(X)
            if scale != 1.0:
                sq *= X.dtype.type(scale * scale)
        refuse_overflowed_rows(sq, array_api_compat.array_namespace(sq), X.dtype, " (times 2 gamma)",
                               " (or lower gamma)")
        proj = X @ W.T
        if not isinstance(proj, np.ndarray):  # np.matrix from some scipy.sparse products
            proj = np.asarray(proj)
        if scale != 1.0:  # the features of z = sqrt(2 gamma) x, without copying X
            proj *= X.dtype.type(scale)
        terms = fmap.direction_terms(W)
        out = proj if fmap.width == 1 else np.empty((n, width), dtype=X.dtype)
        zero_rows = []

        def job(rows):
            res = fmap.apply(proj[rows], sq[rows], m=m, d=W.shape[1], log=log, **terms)
            block = out[rows]
            if res is not block:
                block[...] = res
            if not log:  # (a row of positive features may underflow to 0: never one of sines and cosines)
                zero_rows.append(int(np.count_nonzero(~block.any(axis=1))))

        _row_blocks(n, width, job)
        if sum(zero_rows):
            self._warn_underflow(sum(zero_rows), n, sq, X)
        return out

    def _warn_underflow(self, n_zero, n, sq, X):
        d = X.shape[1]
        if _sparse.issparse(X):
            var = float(X.multiply(X).mean() - X.mean() ** 2)
        else:
            var = float(X.var())
        hint = f"gamma='scale' would be {1.0 / (d * var):.3g} for this data" if var > 0 else "gamma='scale'"
        warnings.warn(
            f"{type(self).__name__}: {n_zero} of {n} rows ({n_zero / n:.0%}) have every feature underflowing to 0 "
            f"in {X.dtype}: the data is too large for the bandwidth (2 gamma |x|^2 has median "
            f"{float(np.median(sq)):.4g} with gamma = {self.gamma_:.4g}; the features carry exp(-c 2 gamma |x|^2)). "
            f"Scale the data (sklearn.preprocessing.StandardScaler), use a smaller gamma ({hint}), "
            "or use log_transform for the logarithms of the features", FeatureUnderflowWarning,
            stacklevel=_caller_level())

    def _checked(self, X):
        check_is_fitted(self, "weights_")
        return self._validate(X, reset=False)

    def transform(self, X):
        """Map X to its random features.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
            Data of the width seen by ``fit``.

        Returns
        -------
        ndarray of shape (n_samples, n_features_out)
            n_features_out is the kind's width times ``n_components`` (1 for
            ``'prf'``, 2 for ``'hyperbolic'`` and RFFs); X's dtype (float32
            stays float32, anything else becomes float64); dense also for
            sparse X.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            Before ``fit`` (a ValueError).
        ValueError
            For data of another width, or with NaN or inf, or rows whose
            squared norm times 2 gamma overflows (every kind:
            :func:`montecarlo.features.refuse_overflowed_rows`).

        Warns
        -----
        FeatureUnderflowWarning
            When every feature of some rows underflows to 0 (:ref:`guide-montecarlo.kernel_approximation`:
            scale of the data).
        """
        return self._map(self._checked(X), log=_LOG.get())

    @available_if(_has_log_features)
    def log_transform(self, X):
        r"""Logarithms of the features: for PRFs :math:`w_i^\top z - c\|z\|^2 - \frac12\log m`,
        :math:`z = \sqrt{2\gamma}x` (each kind's ``log_features`` hook).

        Only for the kinds with log-features (the positive kinds); absent (``hasattr`` is False) for the others,
        so for :class:`RandomFourierFeatures` and ``RandomFeatures(kind='rff')``.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
            Data of the width seen by ``fit``.

        Returns
        -------
        ndarray of shape (n_samples, n_features_out)
            Finite even where :meth:`transform` underflows to 0; in the container that ``set_output``
            chose for :meth:`transform` (a DataFrame with its columns and X's index under
            ``set_output(transform="pandas")``).
        """
        token = _LOG.set(True)  # transform, as scikit-learn wraps it for set_output, computes the logarithms
        try:
            return self.transform(X)
        finally:
            _LOG.reset(token)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        tags.input_tags.sparse = True
        return tags



class PositiveRandomFeatures(RandomFeatures):
    r"""Positive random features of any positive feature kind as a scikit-learn transformer.

    ``transform(X)`` returns :math:`\phi(\sqrt{2\gamma}\,x)` with :math:`\phi` the
    map of ``kind``: for PRFs (eq. ``def_prf``)
    :math:`\phi(z) = m^{-1/2}e^{-c\|z\|^2}[e^{w_i^\top z}]_{i=1}^m`; for
    hyperbolic PRFs (FAVOR+)
    :math:`\phi(z) = (2m)^{-1/2}e^{-c\|z\|^2}[e^{w_i^\top z}, e^{-w_i^\top z}]`
    (2m columns, the m positive halves first), so that
    :math:`\phi(x)^\top\phi(y)` estimates :math:`e^{-\gamma\|x-y\|^2}`
    (``kernel="gaussian"``, c = 1) or :math:`e^{2\gamma x^\top y}`
    (``kernel="softmax"``, c = 1/2), unbiasedly for the exact couplings.

    Parameters
    ----------
    n_components : int >= 1, default 100
        Number m of random projections; the output has ``width * m`` columns
        (width 1 for ``'prf'``, 2 for ``'hyperbolic'``).  Any m, not only
        multiples of d.
    coupling : str, default 'simplex'
        Any coupling of the registry, ``theory.registry.names()`` (also
        :data:`montecarlo.COUPLINGS`; now {couplings}).  The fast couplings are
        not exactly Gaussian and are biased at small d (see
        :func:`montecarlo.sample_weights`).
    kind : str, default 'prf'
        A positive feature kind, ``theory.feature_kinds.names(log_space=True)``
        (now {kinds}).
    kernel : {'gaussian', 'softmax'}, default 'gaussian'
    gamma : float > 0 or 'scale', default 0.5
        Bandwidth as in :class:`sklearn.kernel_approximation.RBFSampler`
        (:ref:`guide-montecarlo.kernel_approximation`); 0.5 is the paper's kernel.
    A : float < 1/8 or None, default None
        Only for ``kind='oprf'`` (optimised PRFs, FAVOR++): the tilt of
        :math:`e^{A\|w\|^2 + \sqrt{1-4A}\,w^\top z}`.  None chooses it in ``fit``
        from the training data as FAVOR++ does
        (:func:`montecarlo.oprf.moments_optimal_a` of the scaled rows: :math:`A \le 0`,
        bounded features, stable in float32).
    random_state : None, int >= 0, numpy.random.Generator, SeedSequence or RandomState
        Seed of the projections (:ref:`guide-montecarlo.kernel_approximation`).

    Attributes
    ----------
    weights_ : ndarray of shape (n_components, n_features)
        The projections :math:`w_i` (rows), float64.
    gamma_ : float
        The bandwidth used (``gamma``, or its value for ``'scale'``).
    A_ : float
        Only for ``kind='oprf'``: the A used.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``fit`` saw a DataFrame with string column names.

    See Also
    --------
    montecarlo.random_features : The plain function (any array backend, optional log-space offsets).
    RandomFeatures : The general form (any kind, ``kind='rff'`` too), with the same parameters.
    RandomFourierFeatures : The RFF map with the same parameters.

    Notes
    -----
    The features of a row all underflow to 0 when :math:`2c\gamma\|x\|^2` is
    in the hundreds (float64; about 100 in float32): ``transform`` warns
    (:class:`FeatureUnderflowWarning`, with what to do), and
    :meth:`log_transform` returns their logarithms, which never underflow.

    References
    ----------
    Reid et al., "Simplex Random Features", ICML 2023, eq. ``def_prf`` and
    Sec. 3 (``simplex_block_eq``); Choromanski et al., "Rethinking Attention
    with Performers", ICLR 2021 (hyperbolic features, Lemma 1).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.linear_model import RidgeClassifier
    >>> X = np.random.default_rng(0).normal(size=(40, 5)) / 3
    >>> y = (X[:, 0] > 0).astype(int)
    >>> model = make_pipeline(PositiveRandomFeatures(n_components=33, random_state=0), RidgeClassifier())
    >>> model.fit(X, y).score(X, y) > 0.5
    True
    """

    _parameter_constraints: dict = _constraints(_kinds.names(log_space=True))


class RandomFourierFeatures(RandomFeatures):
    r"""Random Fourier features (eq. ``rffdef2``) as a scikit-learn transformer.

    ``transform(X)`` returns :math:`\phi(\sqrt{2\gamma}\,x)` with
    :math:`\phi(z) = m^{-1/2}(\sin w_1^\top z, \cos w_1^\top z, \ldots,
    \sin w_m^\top z, \cos w_m^\top z)`, so that :math:`\phi(x)^\top\phi(y) =
    \frac1m\sum_i\cos\big(\sqrt{2\gamma}\,w_i^\top(x-y)\big)` estimates
    :math:`e^{-\gamma\|x-y\|^2}`, unbiasedly for the exact couplings.

    Parameters
    ----------
    n_components : int >= 1, default 100
        Number m of random projections; the output has **2m** columns (sin
        and cos of each projection, interleaved), unlike RBFSampler's m
        cosines with random phases.
    coupling : str, default 'orthogonal'
        Any coupling of the registry, ``theory.registry.names()`` (now
        {couplings}).  The default is ``'orthogonal'`` because the simplex
        advantage is specific to PRFs: for RFFs the simplex coupling has the
        larger MSE at small :math:`z = \sqrt{2\gamma}\|x-y\|`
        (``theory.rff_mse_ratio("simplex", "orthogonal", d, z)`` at m = d:
        1.38, 1.50, 1.06 at d = 8 and z = 0.1, 1, 2; 1.34, 1.15, 1.007 at
        d = 64; the z -> 0 limit is (3 + d/(d-1))/3) and wins only in a narrow
        window near z = 3 at small d (0.994 at d = 8, z = 3).
    gamma : float > 0 or 'scale', default 0.5
        Bandwidth as in :class:`sklearn.kernel_approximation.RBFSampler`.
    random_state : None, int >= 0, numpy.random.Generator, SeedSequence or RandomState
        Seed of the projections (:ref:`guide-montecarlo.kernel_approximation`).

    Attributes
    ----------
    weights_ : ndarray of shape (n_components, n_features)
    gamma_ : float
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``fit`` saw a DataFrame with string column names.

    See Also
    --------
    montecarlo.random_features : The plain function (``kind='rff'``; any array backend).
    RandomFeatures : The general form; ``RandomFeatures(kind='rff', ...)`` gives the same features.
    PositiveRandomFeatures : The positive maps with the same parameters.

    References
    ----------
    Reid et al., "Simplex Random Features", ICML 2023, eq. ``rffdef2``;
    Rahimi and Recht, "Random Features for Large-Scale Kernel Machines", 2007.
    """

    _parameter_constraints: dict = {name: rule for name, rule in _constraints(("rff",)).items()
                                    if name in ("n_components", "coupling", "gamma", "random_state")}

    #: The named form's fixed settings (not parameters: ``get_params`` and ``set_params`` do not list them).
    kind = property(lambda self: "rff", doc="``'rff'``, fixed.")
    kernel = property(lambda self: "gaussian", doc="``'gaussian'``, fixed.")
    A = property(lambda self: None, doc="None, fixed (RFFs have no parameter).")

    def __init__(self, n_components=100, *, coupling="orthogonal", gamma=0.5, random_state=None):
        self.n_components = n_components
        self.coupling = coupling
        self.gamma = gamma
        self.random_state = random_state


# The registries' current names in the docstrings (derived, never hand-written).
for _cls in (RandomFeatures, PositiveRandomFeatures, RandomFourierFeatures):
    if _cls.__doc__:  # None under python -OO
        _cls.__doc__ = _cls.__doc__.replace("{couplings}", _names(_registry.names())).replace(
            "{kinds}", _names(_kinds.names(log_space=True))).replace("{all_kinds}", _names(_kinds.names()))
del _cls
