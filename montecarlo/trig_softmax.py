r"""Trigonometric softmax features (Performer): the sampling side (hooks of the ``"trig_softmax"`` feature kind).

:math:`\phi(x) = e^{\|x\|^2/2}m^{-1/2}[\sin w_i^\top x, \cos w_i^\top x]` (interleaved, as RFFs; width 2m),
unbiased for the softmax kernel :math:`e^{x^\top y}` (closed forms and references: :mod:`theory.trig_softmax`).
The features can be negative, so they are not computed in log space: :class:`montecarlo.nn.PRFAttention` runs them
bidirectionally only.  The prefactor :math:`e^{\|x\|^2/2}` overflows float64 for :math:`\|x\|^2 > 1419`.
"""

from __future__ import annotations

from theory.feature_kinds import hook, register

from .features import _rff_map

__all__ = []


@register("trig_softmax", "features")
def _features(proj, sq, m, c, xp, w_sq=None, d=None):
    r""":math:`e^{-c\|x\|^2}m^{-1/2}(\sin w_1^\top x, \cos w_1^\top x, \ldots)` with c = -1/2 (softmax kernel)."""
    return _rff_map(proj, sq, m, c, xp) * xp.exp(-c * sq)


register("trig_softmax", "statistic", hook("rff", "statistic"))  # b_i = cos(w_i . z), as RFFs
