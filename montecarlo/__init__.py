r"""The sampling half of the toolkit: couplings, feature maps and Monte Carlo estimators.

Draw the random projection matrices of every coupling of the paper
(:func:`sample_weights`, :func:`sample_projection`), build PRF and RFF
feature maps (:func:`prf_features`, :func:`rff_features`, and the
scikit-learn estimators :class:`PositiveRandomFeatures`,
:class:`RandomFourierFeatures` of :mod:`montecarlo.kernel_approximation`,
imported on first use: only they need scikit-learn), and estimate kernels, Gram matrices, MSEs,
RF-conformities and pair moments with standard errors
(:func:`kernel_estimate`, :func:`gram_estimate`, :func:`empirical_mse`,
:func:`empirical_conformity`, :func:`empirical_pair_moments`).

Couplings (one spelling each, one record each in :mod:`theory.registry`,
listed in :data:`COUPLINGS`): ``"iid"``, ``"orthogonal"``, ``"simplex"``,
``"simplex_plus"``, ``"fast_orthogonal"``, ``"fast_simplex"``.  Each
registers its block sampler (and, where cheaper, a projection sampler) with
the registry; see :mod:`montecarlo.couplings` for the constructions (Sec. 3
``simplex_block_eq``, ``simplex_vectors``, Sec. 3.2 ``simpler_updates_main``,
App. B Algorithm 1 and HD-products) and :mod:`montecarlo.diagnostics` for
how far the fast couplings are from Gaussian rows.

Arrays: numpy by default; ``xp="torch"`` / ``xp="cupy"`` (with ``device=``)
run the same code through ``array_api_compat`` on that backend, with random
numbers drawn on the device (see :mod:`montecarlo._backend` for seeding).
Bad arguments raise :class:`ValueError` or :class:`TypeError` naming the
argument and the allowed values (:mod:`montecarlo._checks`); an array whose
size an argument sets is refused above ``montecarlo._checks.MAX_ELEMENTS``
entries (2 GiB of float64) with an :class:`AllocationError` (a ValueError and a
MemoryError) before anything is allocated, and m < d rows cost O(m d) memory,
never a d x d block.  Results depend on ``rng`` only (not on chunking).  The
fast couplings emit a :class:`FastCouplingBiasWarning` at d <=
:data:`FAST_BIAS_RESOLVED_D`, where their bias is measurable (table in
:func:`sample_weights`).

``montecarlo`` imports from :mod:`theory` only the shared layer (the coupling
registry, argument validation and the failure family, :mod:`theory.errors`);
two tools use closed forms at run time (:mod:`montecarlo.audit` and
:mod:`montecarlo.norm_coupling`, for reference values).  The samplers and
estimators never use a closed form: the tests compare the two packages.

>>> import montecarlo as mc
>>> W = mc.sample_weights("simplex", 64, 128, rng=0)
>>> W.shape
(128, 64)
"""

from . import diagnostics
from ._checks import COUPLINGS, EXACT_COUPLINGS, FAST_COUPLINGS
from ._checks import AllocationError
from .couplings import (
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
from .estimators import (
    Estimate,
    empirical_conformity,
    empirical_mse,
    empirical_pair_moments,
    exact_kernel,
    gram_estimate,
    kernel_estimate,
    pair_projections,
)
from .features import (
    prf_features,
    prf_log_features,
    rff_features,
)

__all__ = [
    "COUPLINGS",
    "DEFAULT_HAAR_ROUTE",
    "EXACT_COUPLINGS",
    "FAST_BIAS_RESOLVED_D",
    "FAST_COUPLINGS",
    "HAAR_ROUTES",
    "SIMPLEX_PLUS_MAX_PASSES",
    "SIMPLEX_PLUS_TOL",
    "AllocationError",
    "ConvergenceError",
    "Estimate",
    "FastCouplingBiasWarning",
    "PositiveRandomFeatures",
    "RandomFourierFeatures",
    "RandomProjection",
    "diagnostics",
    "empirical_conformity",
    "empirical_mse",
    "empirical_pair_moments",
    "exact_kernel",
    "fwht",
    "gram_estimate",
    "haar_orthogonal",
    "kernel_estimate",
    "next_power_of_two",
    "pair_projections",
    "prf_features",
    "prf_log_features",
    "rff_features",
    "sample_projection",
    "sample_weights",
    "simplex_apply",
    "simplex_matrix",
    "simplex_plus_tolerance",
    "simplex_plus_vectors",
]

#: Names served by :mod:`montecarlo.kernel_approximation` on first access (they need scikit-learn).
_SKLEARN_ESTIMATORS = ("PositiveRandomFeatures", "RandomFourierFeatures")


def __getattr__(name):
    if name in _SKLEARN_ESTIMATORS:
        from . import features

        return getattr(features, name)  # the lazy aliases of montecarlo.features
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _sklearn_installed():
    import importlib.util

    try:
        return importlib.util.find_spec("sklearn") is not None
    except (ImportError, ValueError, AttributeError):  # e.g. sys.modules["sklearn"] = None
        return False


if not _sklearn_installed():  # ``from montecarlo import *`` must not need scikit-learn
    __all__ = [n for n in __all__ if n not in _SKLEARN_ESTIMATORS]
