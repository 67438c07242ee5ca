r"""Trigonometric softmax features (Performer): the closed forms (hooks of the ``"trig_softmax"`` feature kind).

:math:`\phi(x) = e^{\|x\|^2/2}m^{-1/2}[\sin w_i^\top x, \cos w_i^\top x]_{i=1}^m` (Choromanski et al., Rethinking
Attention with Performers, ICLR 2021, Sec. 2.3), so that

.. math::
    \phi(x)^\top\phi(y) = e^{(\|x\|^2+\|y\|^2)/2}\,\frac1m\sum_i\cos w_i^\top(x - y),
    \qquad \mathbb E = e^{(\|x\|^2+\|y\|^2)/2 - \|x-y\|^2/2} = e^{x^\top y}

for Gaussian directions: the softmax kernel, with the per-direction statistic of RFFs,
:math:`b_i = \cos w_i^\top z`, :math:`z = x - y`, and the prefactor :math:`P = e^{(\|x\|^2+\|y\|^2)/2}`
(the record's ``prefactor_exponent('softmax') = 1/2``).  So for every coupling

.. math::
    \mathrm{MSE} = e^{\|x\|^2+\|y\|^2}\,\mathrm{MSE}_{\mathrm{RFF}}(z),

and every closed form of RFFs is one here: the hooks below are those of ``"rff"`` (its variance
:math:`(1-e^{-z^2})^2/2`, pair terms and small-z coefficients), and :func:`theory.kernel_mse` multiplies by
:math:`P^2`.
"""

from __future__ import annotations

from . import feature_kinds as _kinds

__all__ = []

for _name in ("variance", "mean_square", "pair_excess", "pair_couplings", "small_v"):
    _kinds.register("trig_softmax", _name, _kinds.hook("rff", _name))  # the statistic is RFFs' cos(w . z)
del _name
