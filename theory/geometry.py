r"""Exact simplex geometry (Sec. 3, eq. ``simplex_vectors``; App. B.1, Algorithm 1).

The rows of :math:`\mathbf S` are

.. math::
    s_i = \sqrt{\tfrac{d}{d-1}}\,e_i - \frac{\sqrt d+1}{(d-1)^{3/2}}(1,\ldots,1,0)^\top
    \ (1\le i<d),\qquad s_d = \frac{1}{\sqrt{d-1}}(1,\ldots,1,0)^\top,

unit vectors with pairwise cosines :math:`-1/(d-1)` summing to zero, so that
:math:`\mathbf S\mathbf S^\top = \frac{d}{d-1}\mathbf I - \frac{1}{d-1}\mathbf 1\mathbf 1^\top`.
"""

from __future__ import annotations

from ._context import mp

from ._checks import check_dimension, guarded, to_mpf


@guarded()
def simplex_vectors(d):
    """The d x d matrix S of eq. ``simplex_vectors`` (rows s_1, ..., s_d) as an mpmath matrix."""
    d = check_dimension(d, "simplex")
    a = mp.sqrt(mp.mpf(d) / (d - 1))
    b = (mp.sqrt(d) + 1) / mp.mpf(d - 1) ** (mp.mpf(3) / 2)
    s = mp.matrix(d, d)
    for i in range(d - 1):
        for j in range(d - 1):
            s[i, j] = -b
        s[i, i] += a
    for j in range(d - 1):
        s[d - 1, j] = 1 / mp.sqrt(d - 1)
    return s


@guarded()
def simplex_gram(d):
    r"""Closed form of :math:`\mathbf S\mathbf S^\top`: 1 on the diagonal, :math:`-1/(d-1)` off it."""
    d = check_dimension(d, "simplex")
    g = mp.matrix(d, d)
    for i in range(d):
        for j in range(d):
            g[i, j] = 1 if i == j else mp.mpf(-1) / (d - 1)
    return g


@guarded()
def simplex_apply(x):
    r"""Algorithm 1 (App. B.1): :math:`y = \mathbf S x` in O(d) operations.

    .. math::
        y_d = \frac{1}{\sqrt{d-1}}\sum_{i<d}x_i,\qquad
        y_i = \sqrt{\tfrac{d}{d-1}}\,x_i - \frac{\sqrt d+1}{d-1}\,y_d\ (i<d).

    Parameters
    ----------
    x : sequence of reals, length d >= 2

    Returns
    -------
    list of mpf
    """
    xs = [to_mpf(t, "x") for t in x]
    d = check_dimension(len(xs), "simplex", name="len(x)")
    yd = mp.fsum(xs[:-1]) / mp.sqrt(d - 1)
    a = mp.sqrt(mp.mpf(d) / (d - 1))
    b = (mp.sqrt(d) + 1) / (d - 1)
    return [a * xi - b * yd for xi in xs[:-1]] + [yd]
