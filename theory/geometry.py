r"""Exact simplex geometry (Sec. 3, eq. ``simplex_vectors``; App. B.1, Algorithm 1).

The rows of :math:`\mathbf S` are

.. math::
    s_i = \sqrt{\tfrac{d}{d-1}}\,e_i - \frac{\sqrt d+1}{(d-1)^{3/2}}(1,\ldots,1,0)^\top
    \ (1\le i<d),\qquad s_d = \frac{1}{\sqrt{d-1}}(1,\ldots,1,0)^\top,

unit vectors with pairwise cosines :math:`-1/(d-1)` summing to zero, so that
:math:`\mathbf S\mathbf S^\top = \frac{d}{d-1}\mathbf I - \frac{1}{d-1}\mathbf 1\mathbf 1^\top`.
"""

from __future__ import annotations

import collections.abc

from ._context import check_time, mp

from ._checks import check_dimension, guarded, to_mpf
from .validation import ArgumentTypeError, describe, show_int

#: Largest d of the dense d x d matrices (about d^2 mpf objects); Algorithm 1
#: (:func:`simplex_apply`) applies S to a vector in O(d) for any d.
DENSE_MAX_D = 1024


def _dense_d(d):
    d = check_dimension(d, "simplex")
    if d > DENSE_MAX_D:
        raise ValueError(f"d must be <= {DENSE_MAX_D} for a dense d x d matrix of mpf (d^2 = {show_int(d * d)} "
                         f"numbers), got {show_int(d)}; use simplex_apply (Algorithm 1, O(d)) for larger d")
    return d


@guarded()
def simplex_vectors(d):
    """The d x d matrix S of eq. ``simplex_vectors`` (rows s_1, ..., s_d) as an mpmath matrix
    (2 <= d <= :data:`DENSE_MAX_D`)."""
    d = _dense_d(d)
    a = mp.sqrt(mp.mpf(d) / (d - 1))
    b = (mp.sqrt(d) + 1) / mp.mpf(d - 1) ** (mp.mpf(3) / 2)
    s = mp.matrix(d, d)
    for i in range(d - 1):
        check_time(f"simplex_vectors at d = {d} (a dense d x d matrix)", units=d)
        for j in range(d - 1):
            s[i, j] = -b
        s[i, i] += a
    for j in range(d - 1):
        s[d - 1, j] = 1 / mp.sqrt(d - 1)
    return s


@guarded()
def simplex_gram(d):
    r"""Closed form of :math:`\mathbf S\mathbf S^\top`: 1 on the diagonal, :math:`-1/(d-1)` off it
    (2 <= d <= :data:`DENSE_MAX_D`)."""
    d = _dense_d(d)
    g = mp.matrix(d, d)
    for i in range(d):
        check_time(f"simplex_gram at d = {d} (a dense d x d matrix)", units=d)
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
    x : sequence or 1-D array of reals, length d >= 2
        (a string is not a vector, nor is a mapping or a set, whose iteration
        gives keys in no order of coordinates: they are refused).

    Returns
    -------
    list of mpf
    """
    if (isinstance(x, (str, bytes, collections.abc.Mapping, collections.abc.Set)) or not hasattr(x, "__len__")
            or getattr(x, "ndim", 1) != 1):
        raise ArgumentTypeError(f"x must be a sequence or 1-D array of real numbers, got {describe(x)}")
    what = f"simplex_apply at len(x) = {len(x)} (O(d) mpf operations)"
    xs = []
    for t in x:
        if len(xs) % 1024 == 0:
            check_time(what, units=1024)
        xs.append(to_mpf(t, "x"))
    d = check_dimension(len(xs), "simplex", name="len(x)")
    yd = mp.fsum(xs[:-1]) / mp.sqrt(d - 1)
    a = mp.sqrt(mp.mpf(d) / (d - 1))
    b = (mp.sqrt(d) + 1) / (d - 1)
    return [a * xi - b * yd for xi in xs[:-1]] + [yd]
