r"""Sampler of pairwise norm-coupled orthogonal random features (PNC-ORFs), beyond the paper.

An ORF block :math:`\mathbf D\mathbf R` whose :math:`\chi_d` norms are coupled in
pairs of rows (1, 2), (3, 4), ... negatively monotonically,
:math:`F(w_{2k}) = 1 - F(w_{2k-1})` (Reid, Markou, Choromanski, Turner, Weller,
ICLR 2025); an odd last row keeps an independent norm.  Closed forms and the
derivation: :mod:`theory.pnc`.

The first norm of each pair is drawn by the backend's chi sampler (on the
device); its partner :math:`w' = F^{-1}(1 - F(w))` is computed in float64 on
the host with scipy's chi distribution, through the survival function in the
upper half so that neither tail loses accuracy, and moved back to the
device.  The directions are the Haar rows of the orthogonal coupling
(:func:`montecarlo.couplings.orthogonal_blocks`), and the cheap projection
path is the isotropic one (:func:`montecarlo.estimators.isotropic_projections`).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from theory.registry import register

from ._backend import to_numpy
from .couplings import chi_norms, orthogonal_blocks
from .estimators import isotropic_projections

__all__ = ["antithetic_partner", "pnc_norms"]


def antithetic_partner(w, d):
    r""":math:`F^{-1}(1 - F(w))` for :math:`\chi_d` norms w (float64 numpy array), accurate in both tails."""
    w = np.asarray(w, dtype=np.float64)
    lower = stats.chi.cdf(w, d)
    out = np.empty_like(w)
    low = lower <= 0.5
    out[low] = stats.chi.isf(lower[low], d)  # F(w') = 1 - F(w)  <=>  S(w') = F(w)
    out[~low] = stats.chi.ppf(stats.chi.sf(w[~low], d), d)  # F(w') = S(w)
    return out


def pnc_norms(d, n_blocks, random):
    """(n_blocks, d) chi_d norms with rows (0, 1), (2, 3), ... antithetic; an odd last row independent."""
    xp = random.xp
    norms = chi_norms(d, n_blocks, random)
    half = d // 2
    if half == 0:
        return norms
    first = to_numpy(norms[:, 0:2 * half:2])
    partner = xp.asarray(antithetic_partner(first, d), dtype=random.dtype, device=random.device)
    norms[:, 1:2 * half:2] = partner
    return norms


register("pnc_orthogonal", "blocks", orthogonal_blocks(norms=pnc_norms))
register("pnc_orthogonal", "projections", isotropic_projections(simplex=False, norms=pnc_norms))
