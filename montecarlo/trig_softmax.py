r"""Trigonometric softmax features (Performer): the sampling side (hooks of the ``"trig_softmax"`` feature kind).

:math:`\phi(x) = e^{\|x\|^2/2}m^{-1/2}[\sin w_i^\top x, \cos w_i^\top x]` (interleaved, as RFFs; width 2m),
unbiased for the softmax kernel :math:`e^{x^\top y}` (closed forms and references: :mod:`theory.trig_softmax`).
The features can be negative, so they are not computed in log space: :class:`montecarlo.nn.PRFAttention` runs them
bidirectionally only.  The prefactor :math:`e^{\|x\|^2/2}` overflows float64 for :math:`\|x\|^2 > 1419` (float32:
177): such rows are refused with a ValueError (they gave inf features and NaN kernel estimates before), except while
torch.compile traces and on an accelerator (see ``_refuse_overflow``); :class:`montecarlo.nn.PRFAttention` never
forms the overflowing prefactor.
"""

from __future__ import annotations

import math

import numpy as np

from theory.feature_kinds import hook, register

from .features import _rff_map

__all__ = []


@register("trig_softmax", "features")
def _features(proj, sq, m, c, xp, w_sq=None, d=None):
    r""":math:`e^{-c\|x\|^2}m^{-1/2}(\sin w_1^\top x, \cos w_1^\top x, \ldots)` with c = -1/2 (softmax kernel)."""
    with np.errstate(over="ignore"):  # refused just below
        prefactor = xp.exp(-c * sq)
    _refuse_overflow(prefactor, sq, c, xp)
    return _rff_map(proj, sq, m, c, xp) * prefactor


def _refuse_overflow(prefactor, sq, c, xp):
    """ValueError when a row's prefactor e^{-c |x|^2} overflows its dtype (inf features, NaN kernel estimates).

    Not checked while torch.compile traces, nor for tensors on an accelerator (the check would wait for the
    device at every call; PRFAttention, the accelerator's user of these features, divides the prefactor by its
    largest value first, so that it is at most 1)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and isinstance(prefactor, torch.Tensor):
        if prefactor.device.type != "cpu" or torch.compiler.is_compiling():
            return
    if not bool(xp.all(xp.isfinite(prefactor))):
        bad = xp.max(xp.where(xp.isfinite(prefactor), xp.zeros_like(sq), sq))
        limit = math.log(float(xp.finfo(prefactor.dtype).max)) / -c  # the squared norm where e^{-c |x|^2} overflows
        raise ValueError(f"kind='trig_softmax' has no finite features for rows with squared norm above {limit:.0f} in "
                         f"{prefactor.dtype} (the prefactor e^(|x|^2/2) overflows; a row here has |x|^2 = "
                         f"{float(bad):.4g}); scale the rows down or use a positive kind, computed in log space "
                         "('prf', 'hyperbolic', 'oprf')")


register("trig_softmax", "statistic", hook("rff", "statistic"))  # b_i = cos(w_i . z), as RFFs
