r"""Random feature maps as scikit-learn transformers (optional extra ``sklearn``).

:class:`PositiveRandomFeatures` (PRFs, eq. ``def_prf``) and
:class:`RandomFourierFeatures` (RFFs, eq. ``rffdef2``) are genuine
scikit-learn estimators, drop-in neighbours of
:class:`sklearn.kernel_approximation.RBFSampler`: parameters in
``__init__``, the random projections drawn in ``fit`` by
:func:`montecarlo.sample_weights` for any coupling of the paper,
``transform(X)`` returning one numpy array.  They pass
:func:`sklearn.utils.estimator_checks.check_estimator`, and work in
:class:`~sklearn.pipeline.Pipeline`, :class:`~sklearn.model_selection.GridSearchCV`,
:func:`~sklearn.base.clone`, ``pickle``, ``copy.deepcopy`` and ``set_output``.

This module imports scikit-learn (``pip install 'simplex-rf[sklearn]'``);
the plain feature maps :func:`montecarlo.prf_features` and
:func:`montecarlo.rff_features` do not, and also run on torch and cupy arrays.
The estimators work on numpy arrays (float64, or float32 kept as float32).

Bandwidth
---------
``gamma`` has RBFSampler's meaning: the Gaussian kernel estimated is
:math:`K(x, y) = e^{-\gamma\|x-y\|^2}`.  The inputs are multiplied by
:math:`\sqrt{2\gamma}` before the feature map of the paper (which estimates
:math:`e^{-\|x-y\|^2/2}`), so the default ``gamma=0.5`` is the paper's kernel
and reproduces the plain functions exactly (RBFSampler's default is 1.0).
For the softmax kernel of :class:`PositiveRandomFeatures` the same scaling
gives :math:`e^{2\gamma x^\top y}` (``gamma=0.5``: :math:`e^{x^\top y}`; the
attention logits :math:`e^{q^\top k/\sqrt d}` need ``gamma = 0.5 / sqrt(d)``).
``gamma="scale"`` uses RBFSampler's rule :math:`1/(d\,\mathrm{Var}[X])`.

Number of features
------------------
``n_components`` is the number m of random projections :math:`w_i`: any
m >= 1, not only multiples of d (the couplings draw independent blocks of d
rows, p = 2^k rows for the fast ones, the last block truncated).  A PRF map
has m output columns; an RFF map has 2m (sin and cos of each projection,
interleaved), unlike RBFSampler's m cosines with random phases.

Randomness
----------
``random_state`` is None (fresh entropy at every ``fit``), an int >= 0
(the same projections as ``montecarlo.sample_weights(coupling, d, m, rng=random_state)``),
a :class:`numpy.random.Generator` (advanced by every ``fit``, as scikit-learn does
with a ``RandomState``) or a :class:`numpy.random.SeedSequence`.  A legacy
``numpy.random.RandomState`` is refused (see :func:`theory.validation.check_rng`).

Examples
--------
>>> import numpy as np
>>> from montecarlo.kernel_approximation import PositiveRandomFeatures
>>> X = np.random.default_rng(0).normal(size=(5, 3)) / 3
>>> prf = PositiveRandomFeatures(n_components=7, coupling="simplex", random_state=0).fit(X)
>>> prf.transform(X).shape
(5, 7)
"""

from __future__ import annotations

import numpy as np

try:
    from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
    from sklearn.utils.validation import check_is_fitted, validate_data
except ImportError as exc:  # missing, or older than 1.6 (no validate_data / __sklearn_tags__)
    raise ImportError("montecarlo.kernel_approximation needs scikit-learn >= 1.6 "
                      "(pip install 'simplex-rf[sklearn]'); the plain feature maps montecarlo.prf_features and "
                      f"montecarlo.rff_features work without it ({exc})") from exc

from theory.registry import get as _coupling_record
from theory.validation import renamed_arguments

from ._checks import check_choice, check_coupling, check_int, check_positive_float, check_rng
from .couplings import sample_weights
from .features import PRF_KERNELS, prf_features, prf_log_features, rff_features

__all__ = ["PositiveRandomFeatures", "RandomFourierFeatures"]

_DTYPES = [np.float64, np.float32]


class _RandomFeatures(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Shared ``fit`` (validation and draws) of the two feature maps."""

    #: Output columns per random projection.
    _columns_per_projection = 1

    def _check_params(self):
        coupling = check_coupling(self.coupling)
        m = check_int(self.n_components, "n_components", 1)
        if isinstance(self.gamma, str):
            gamma = check_choice(self.gamma, "gamma", ("scale",))
        else:
            gamma = check_positive_float(self.gamma, "gamma")
        rng = check_rng(self.random_state, "random_state")
        if isinstance(rng, np.random.SeedSequence):
            rng = np.random.default_rng(rng)
        return coupling, m, gamma, rng

    def fit(self, X, y=None):
        """Draw the random projections for data of X's width.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
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
            For a bad parameter (naming it and the allowed values), non-finite
            or empty data, or fewer features than the coupling needs
            (d >= 2 for the simplex couplings).
        """
        coupling, m, gamma, rng = self._check_params()
        X = validate_data(self, X, dtype=_DTYPES)
        d = X.shape[1]
        min_d = _coupling_record(coupling).min_d
        if d < min_d:
            raise ValueError(f"X has {d} feature(s), but coupling {coupling!r} needs n_features = d >= {min_d}")
        if gamma == "scale":
            var = float(X.var())
            gamma = 1.0 / (d * var) if var > 0 else 1.0
        self.gamma_ = float(gamma)
        self.weights_ = sample_weights(coupling, d, m, rng=rng)
        self._n_features_out = self._columns_per_projection * m
        return self

    def _scaled(self, X):
        """Validated X times :math:`\\sqrt{2\\gamma}`, and the projections in X's dtype."""
        check_is_fitted(self, "weights_")
        X = validate_data(self, X, reset=False, dtype=_DTYPES)
        scale = np.sqrt(2.0 * self.gamma_)
        if scale != 1.0:
            X = X * X.dtype.type(scale)
        return X, self.weights_.astype(X.dtype, copy=False)

    def transform(self, X):
        """Map X to its random features.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Data of the width seen by ``fit``.

        Returns
        -------
        ndarray of shape (n_samples, n_features_out)
            n_features_out is ``n_components`` (PRFs) or ``2 * n_components``
            (RFFs); X's dtype (float32 stays float32, anything else becomes
            float64).

        Raises
        ------
        sklearn.exceptions.NotFittedError
            Before ``fit`` (a ValueError).
        ValueError
            For data of another width, or with NaN or inf.
        """
        X, W = self._scaled(X)
        return self._map(X, W)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags


class PositiveRandomFeatures(_RandomFeatures):
    r"""Positive random features (eq. ``def_prf``) as a scikit-learn transformer.

    ``transform(X)`` returns :math:`\phi(\sqrt{2\gamma}\,x)` with
    :math:`\phi(z) = m^{-1/2}e^{-c\|z\|^2}[e^{w_i^\top z}]_{i=1}^m`, so that
    :math:`\phi(x)^\top\phi(y)` estimates :math:`e^{-\gamma\|x-y\|^2}`
    (``kernel="gaussian"``, c = 1) or :math:`e^{2\gamma x^\top y}`
    (``kernel="softmax"``, c = 1/2), unbiasedly for the exact couplings.

    Parameters
    ----------
    n_components : int >= 1, default 100
        Number m of random projections (= output columns); any m, not only
        multiples of d.
    coupling : str, default 'simplex'
        Any coupling of :data:`montecarlo.COUPLINGS` (``'iid'``,
        ``'orthogonal'``, ``'simplex'``, ``'simplex_plus'``,
        ``'fast_orthogonal'``, ``'fast_simplex'``), looked up in
        :mod:`theory.registry`.  The fast couplings are not exactly Gaussian
        and are biased at small d (see :func:`montecarlo.sample_weights`).
    kernel : {'gaussian', 'softmax'}, default 'gaussian'
    gamma : float > 0 or 'scale', default 0.5
        Bandwidth as in :class:`sklearn.kernel_approximation.RBFSampler`
        (module docstring); 0.5 is the paper's kernel.
    random_state : None, int >= 0, numpy.random.Generator or SeedSequence
        Seed of the projections (module docstring).

    Attributes
    ----------
    weights_ : ndarray of shape (n_components, n_features)
        The projections :math:`w_i` (rows), float64.
    gamma_ : float
        The bandwidth used (``gamma``, or its value for ``'scale'``).
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``fit`` saw a DataFrame with string column names.

    See Also
    --------
    montecarlo.prf_features : The plain function (any array backend, optional log-space offsets).
    RandomFourierFeatures : The RFF map with the same parameters.

    Notes
    -----
    The features of a row can all underflow to 0 when
    :math:`2\gamma\|x\|^2` is in the hundreds; :meth:`log_transform` returns
    their logarithms, which never underflow.

    References
    ----------
    Reid et al., "Simplex Random Features", ICML 2023, eq. ``def_prf`` and
    Sec. 3 (``simplex_block_eq``).

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

    @renamed_arguments(rng="random_state")
    def __init__(self, n_components=100, *, coupling="simplex", kernel="gaussian", gamma=0.5, random_state=None):
        self.n_components = n_components
        self.coupling = coupling
        self.kernel = kernel
        self.gamma = gamma
        self.random_state = random_state

    def _check_params(self):
        check_choice(self.kernel, "kernel", PRF_KERNELS)
        return super()._check_params()

    def _map(self, X, W):
        return prf_features(X, W, self.kernel)

    def log_transform(self, X):
        r"""Logarithms of the features, :math:`w_i^\top z - c\|z\|^2 - \frac12\log m` with :math:`z = \sqrt{2\gamma}x`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Data of the width seen by ``fit``.

        Returns
        -------
        ndarray of shape (n_samples, n_components)
            Finite even where :meth:`transform` underflows to 0.
        """
        X, W = self._scaled(X)
        return prf_log_features(X, W, self.kernel)


class RandomFourierFeatures(_RandomFeatures):
    r"""Random Fourier features (eq. ``rffdef2``) as a scikit-learn transformer.

    ``transform(X)`` returns :math:`\phi(\sqrt{2\gamma}\,x)` with
    :math:`\phi(z) = m^{-1/2}(\sin w_1^\top z, \cos w_1^\top z, \ldots,
    \sin w_m^\top z, \cos w_m^\top z)`, so that :math:`\phi(x)^\top\phi(y) =
    \frac1m\sum_i\cos\big(\sqrt{2\gamma}\,w_i^\top(x-y)\big)` estimates
    :math:`e^{-\gamma\|x-y\|^2}`, unbiasedly for the exact couplings.

    Parameters
    ----------
    n_components : int >= 1, default 100
        Number m of random projections; the output has **2m** columns.
    coupling : str, default 'simplex'
        Any coupling of :data:`montecarlo.COUPLINGS` (see
        :class:`PositiveRandomFeatures`).
    gamma : float > 0 or 'scale', default 0.5
        Bandwidth as in :class:`sklearn.kernel_approximation.RBFSampler`.
    random_state : None, int >= 0, numpy.random.Generator or SeedSequence
        Seed of the projections (module docstring).

    Attributes
    ----------
    weights_ : ndarray of shape (n_components, n_features)
    gamma_ : float
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``fit`` saw a DataFrame with string column names.

    See Also
    --------
    montecarlo.rff_features : The plain function (any array backend).
    PositiveRandomFeatures : The PRF map with the same parameters.

    References
    ----------
    Reid et al., "Simplex Random Features", ICML 2023, eq. ``rffdef2``;
    Rahimi and Recht, "Random Features for Large-Scale Kernel Machines", 2007.
    """

    _columns_per_projection = 2

    @renamed_arguments(rng="random_state")
    def __init__(self, n_components=100, *, coupling="simplex", gamma=0.5, random_state=None):
        self.n_components = n_components
        self.coupling = coupling
        self.gamma = gamma
        self.random_state = random_state

    def _map(self, X, W):
        return rff_features(X, W)
