r"""Fixed-norm orthogonal rows (``"fixed_orthogonal"``): every row of an orthogonal block has norm sqrt(d), as
performer-pytorch's ``scaling=1``.  Biased (the rows are not Gaussian); closed-form bias and MSE in
:mod:`theory.fixed_norm`.  Registered so that the audit, the estimators and the figures can compare it."""

from __future__ import annotations

import math

from theory.registry import register

from .couplings import orthogonal_blocks
from .estimators import isotropic_projections

__all__ = ["fixed_norms"]


def fixed_norms(d, n_blocks, random):
    """(n_blocks, d) norms all equal to sqrt(d)."""
    return random.xp.full((n_blocks, d), math.sqrt(d), dtype=random.dtype, device=random.device)


register("fixed_orthogonal", "blocks", orthogonal_blocks(norms=fixed_norms))
register("fixed_orthogonal", "projections", isotropic_projections(simplex=False, norms=fixed_norms))
