r"""Hyperbolic positive random features: the sampling side (hooks of the ``"hyperbolic"`` feature kind).

:math:`\phi(x) = e^{-c\|x\|^2}(2m)^{-1/2}[e^{w_i^\top x}, e^{-w_i^\top x}]` (FAVOR+,
Choromanski et al. 2021): width 2m, the m positive halves first.  Per direction
the estimator averages :math:`b_i = \cosh(w_i^\top v)`, v = x + y.  Closed forms:
:mod:`theory.hyperbolic`.
"""

from __future__ import annotations

import math

from theory.feature_kinds import register

__all__ = []


@register("hyperbolic", "log_features")
def _log_features(proj, sq, m, c, xp, w_sq=None, d=None):
    r""":math:`[w_i^\top x, -w_i^\top x] - c\|x\|^2 - \tfrac12\log(2m)`."""
    out = xp.concat([proj, -proj], axis=-1)
    out += -(c * sq + 0.5 * math.log(2 * m))  # (as the prf map: no full-size negation in a backward)
    return out


@register("hyperbolic", "linear_log_features")
def _linear_form(w, m, xp, w_sq=None, d=None):
    r"""Rows :math:`[w; -w]` (2m), constant :math:`-\tfrac12\log(2m)`."""
    return xp.concat([w, -w], axis=0), -0.5 * math.log(2 * m)


@register("hyperbolic", "statistic")
def _log_cosh(proj, xp, w_sq=None, d=None):
    r""":math:`\log\cosh p = |p| + \log(1 + e^{-2|p|}) - \log 2` (no overflow for any finite p)."""
    a = xp.abs(proj)
    return a + xp.log1p(xp.exp(-2 * a)) - math.log(2)
