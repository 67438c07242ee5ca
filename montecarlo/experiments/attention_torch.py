"""Deprecated alias of :mod:`montecarlo.nn` (PRFAttention moved there; this module is removed in 0.3).

``from montecarlo.nn import PRFAttention`` replaces
``from montecarlo.experiments.attention_torch import PRFAttention``.
"""

import warnings

from montecarlo.nn import (  # noqa: F401  (re-exported)
    DEFAULT_CHUNK,
    INPUT_DTYPES,
    STORAGE_DTYPES,
    PRFAttention,
    check_generator,
    draw_projections,
)

__all__ = ["INPUT_DTYPES", "STORAGE_DTYPES", "PRFAttention", "draw_projections"]

warnings.warn("montecarlo.experiments.attention_torch moved to montecarlo.nn; removed in 0.3",
              DeprecationWarning, stacklevel=2)
