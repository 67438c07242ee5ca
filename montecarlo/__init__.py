r"""The sampling half of the toolkit: couplings, feature maps and Monte Carlo estimators.

Draw the random projection matrices of every coupling of the paper
(:func:`sample_weights`, :func:`sample_projection`), build the feature maps
of every feature kind (:func:`random_features` with ``kind=``; the named
forms :func:`prf_features`, :func:`rff_features`), and estimate kernels, Gram
matrices, MSEs, pair terms and pair moments with standard errors
(:func:`kernel_estimate`, :func:`gram_estimate`, :func:`empirical_mse`,
:func:`empirical_conformity`, :func:`empirical_pair_moments`, all with ``kind=``).

Where users import from:

* :mod:`montecarlo.kernel_approximation`: the scikit-learn transformers
  :class:`~montecarlo.kernel_approximation.RandomFeatures` (any kind, ``kind=``) and its named forms
  :class:`~montecarlo.kernel_approximation.PositiveRandomFeatures` and
  :class:`~montecarlo.kernel_approximation.RandomFourierFeatures` (also served
  here on first access; only they need scikit-learn);
* :mod:`montecarlo.nn`: ``PRFAttention``, the torch module (needs torch);
* :mod:`montecarlo.performer`: projection matrices of any coupling for
  performer-pytorch (``use_coupling``);
* :mod:`montecarlo.experiments`: the runs of Sec. 5.

>>> import montecarlo as mc
>>> W = mc.sample_weights("simplex", 64, 128, rng=0)
>>> W.shape
(128, 64)

Couplings and kinds, arrays and backends, checks, and what montecarlo imports from theory:
:ref:`guide-montecarlo` (``docs/guide/sampling.rst``).
"""

import importlib as _importlib

from theory import registry as _registry

_registry.set_layer_loader("montecarlo", _importlib.import_module)  # records name montecarlo's hook modules

from ._checks import (  # noqa: E402
    COUPLINGS,
    EXACT_COUPLINGS,
    FAST_COUPLINGS,
    MAX_WORK,
    AllocationError,
    BudgetExceededError,
    WorkLimitError,
    budget,
)
from theory.feature_kinds import names as _kind_names  # noqa: E402

#: The feature kinds, one spelling each (registry order of :mod:`theory.feature_kinds`).
KINDS = _kind_names()
from .couplings import (  # noqa: E402
    DEFAULT_HAAR_ROUTE,
    FAST_BIAS_RESOLVED_D,
    HAAR_ROUTES,
    SIMPLEX_PLUS_MAX_PASSES,
    SIMPLEX_PLUS_TOL,
    ConvergenceError,
    FastCouplingBiasWarning,
    RandomProjection,
    fwht,
    haar_orthogonal,
    next_power_of_two,
    sample_projection,
    sample_weights,
    simplex_apply,
    simplex_matrix,
    simplex_plus_tolerance,
    simplex_plus_vectors,
)
from .estimators import (  # noqa: E402
    Estimate,
    empirical_conformity,
    empirical_mse,
    empirical_pair_moments,
    exact_kernel,
    gram_estimate,
    kernel_estimate,
    pair_projections,
)
from .features import (  # noqa: E402
    FeatureMap,
    check_kind_params,
    log_features,
    prf_features,
    prf_log_features,
    random_features,
    rff_features,
)

__all__ = [
    "COUPLINGS",
    "DEFAULT_HAAR_ROUTE",
    "EXACT_COUPLINGS",
    "FAST_BIAS_RESOLVED_D",
    "FAST_COUPLINGS",
    "HAAR_ROUTES",
    "KINDS",
    "MAX_WORK",
    "SIMPLEX_PLUS_MAX_PASSES",
    "SIMPLEX_PLUS_TOL",
    "AllocationError",
    "BudgetExceededError",
    "ConvergenceError",
    "Estimate",
    "FastCouplingBiasWarning",
    "FeatureMap",
    "PositiveRandomFeatures",
    "RandomFeatures",
    "RandomFourierFeatures",
    "RandomProjection",
    "budget",
    "check_kind_params",
    "diagnostics",
    "empirical_conformity",
    "empirical_mse",
    "empirical_pair_moments",
    "exact_kernel",
    "fwht",
    "gram_estimate",
    "haar_orthogonal",
    "kernel_estimate",
    "log_features",
    "next_power_of_two",
    "pair_projections",
    "prf_features",
    "prf_log_features",
    "random_features",
    "rff_features",
    "sample_projection",
    "sample_weights",
    "simplex_apply",
    "simplex_matrix",
    "simplex_plus_tolerance",
    "simplex_plus_vectors",
    "WorkLimitError",
]

#: Names served by :mod:`montecarlo.kernel_approximation` on first access (they need scikit-learn).
_SKLEARN_ESTIMATORS = ("PositiveRandomFeatures", "RandomFeatures", "RandomFourierFeatures")


def __getattr__(name):
    if name == "diagnostics":  # scipy.stats: loaded on first use
        return _importlib.import_module(f"{__name__}.diagnostics")
    if name in _SKLEARN_ESTIMATORS:
        from . import kernel_approximation

        return getattr(kernel_approximation, name)
    if not name.startswith("_"):
        import importlib.util

        if importlib.util.find_spec(f"{__name__}.{name}") is not None:  # a submodule: montecarlo.oprf, .nn, ...
            return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _sklearn_installed():
    import importlib.util

    try:
        return importlib.util.find_spec("sklearn") is not None
    except (ImportError, ValueError, AttributeError):  # e.g. sys.modules["sklearn"] = None
        return False


if not _sklearn_installed():  # ``from montecarlo import *`` must not need scikit-learn
    __all__ = [n for n in __all__ if n not in _SKLEARN_ESTIMATORS]
