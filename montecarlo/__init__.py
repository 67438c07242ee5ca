"""Sampling half of the toolkit: couplings, feature maps and Monte Carlo estimators."""

from ._checks import COUPLINGS, EXACT_COUPLINGS, FAST_COUPLINGS
from .couplings import (
    DEFAULT_HAAR_ROUTE,
    HAAR_ROUTES,
    SIMPLEX_PLUS_MAX_PASSES,
    SIMPLEX_PLUS_TOL,
    ConvergenceError,
    RandomProjection,
    fwht,
    haar_orthogonal,
    next_power_of_two,
    sample_projection,
    sample_weights,
    simplex_apply,
    simplex_matrix,
    simplex_plus_vectors,
)
from .features import (
    PositiveRandomFeatures,
    RandomFourierFeatures,
    prf_features,
    prf_log_features,
    rff_features,
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


from . import diagnostics
__all__ = [name for name in dir() if not name.startswith("_")]
