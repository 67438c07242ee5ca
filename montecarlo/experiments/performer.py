"""Deprecated alias of :mod:`montecarlo.performer` (the performer-pytorch adapter moved there; this module is
removed in 0.3).

``from montecarlo.performer import use_coupling`` replaces
``from montecarlo.experiments.performer import use_coupling``.
"""

import warnings

from montecarlo.performer import (  # noqa: F401  (re-exported)
    FastAttentionErrors,
    PerformerProjection,
    fast_attention_errors,
    performer_projection_matrix,
    use_coupling,
)

__all__ = ["FastAttentionErrors", "PerformerProjection", "fast_attention_errors", "performer_projection_matrix",
           "use_coupling"]

warnings.warn("montecarlo.experiments.performer moved to montecarlo.performer; removed in 0.3",
              DeprecationWarning, stacklevel=2)
