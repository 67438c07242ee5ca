r"""SimRFs+ (Sec. 3.2; App. A.3): objectives and the deterministic update.

For vectors :math:`w_1,\ldots,w_m\in\mathbb R^d` with :math:`w_{ij} = \|w_i+w_j\|`:

* exact objective (eq. ``simp+_obj``):
  :math:`\rho = \frac{\Gamma(d/2)}{m(m-1)}\sum_{i\ne j}\sum_k
  \frac{v^{2k}w_{ij}^{2k}}{2^{2k}k!\Gamma(k+d/2)} = \frac{1}{m(m-1)}\sum_{i\ne j}
  {}_0F_1(;\frac d2;\frac{v^2w_{ij}^2}{4})`;
* truncated objective (eq. ``truncated_obj``):
  :math:`\tilde\rho = \frac{\Gamma(d/2)v^2}{4m(m-1)\Gamma(1+d/2)}\sum_{i\ne j}w_{ij}^2`;
* its minimum in closed form: :math:`\sum_{i\ne j}w_{ij}^2 = 2(m-2)\sum_iw_i^2 +
  2\|\sum_iw_i\|^2`, and :math:`\min\|\sum_i w_i\| = \max(0, 2\max_iw_i - \sum_iw_i)`
  over directions (a closed polygon exists iff no norm exceeds the sum of the others);
* the update (eq. ``simpler_updates_main``):
  :math:`w_i \leftarrow -w_i\,r_i/\|r_i\|`, :math:`r_i = \sum_{j\ne i}w_j`, applied in
  passes over i = 1..m (each update uses the latest vectors).  Each update
  cannot increase :math:`\|\sum_i w_i\|`: after it the sum is
  :math:`\hat r_i(\|r_i\| - w_i)`, of norm :math:`|\|r_i\|-w_i| \le \|r_i + w_i\|`.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

from mpmath.matrices.matrices import _matrix

from ._context import check_time, mp

from .errors import ConvergenceError
from ._checks import check_int, check_nonnegative, guarded, refuse_masked, to_mpf
from ._series import sum_ratio_series
from .geometry import simplex_vectors
from .validation import ArgumentTypeError, check_bool, describe


def _refuse_text(value, name):
    """ArgumentTypeError for a string (its characters would be read as numbers), a mapping or set
    (its keys, in no meaningful order) or a masked array (its masked entries)."""
    refuse_masked(value, name)
    if isinstance(value, (str, bytes, Mapping, Set)):
        raise ArgumentTypeError(f"{name} must be an array-like of real numbers (a list, tuple or numpy array), "
                                f"got {describe(value)}")


def _as_vectors(vectors, name="vectors"):
    """``vectors`` as m >= 2 rows of d >= 1 mpfs; the error names the bad entry (``vectors[i][j]``)."""
    _refuse_text(vectors, name)
    try:
        raw = _rows(vectors, name)
    except ArgumentTypeError:
        raise
    except TypeError as exc:
        raise ArgumentTypeError(f"{name} must be a 2-D array-like of reals (m rows of length d), "
                                f"got {describe(vectors)}") from exc
    rows = []
    for i, row in enumerate(raw):
        check_time(f"reading {name} (row {i})", units=len(row) if hasattr(row, "__len__") else 1)
        rows.append([to_mpf(t, f"{name}[{i}][{j}]") for j, t in enumerate(row)])
    if len(rows) < 2:
        raise ValueError(f"{name} must hold at least 2 vectors, got {len(rows)}")
    d = len(rows[0])
    if d < 1 or any(len(r) != d for r in rows):
        raise ValueError(f"{name} must be rectangular (m rows of equal length d >= 1)")
    return rows


def _rows(vectors, name="vectors"):
    if isinstance(vectors, _matrix):
        return [[vectors[i, j] for j in range(vectors.cols)] for i in range(vectors.rows)]
    rows = []
    for i, r in enumerate(vectors):
        if isinstance(r, (str, bytes)) or not hasattr(r, "__iter__"):
            raise ArgumentTypeError(f"{name} must be a 2-D array-like of reals (m rows of length d); "
                                    f"row {i} is {describe(r)}")
        rows.append(list(r))
    return rows


def _as_norms(norms, name="norms"):
    """``norms`` as a list of mpfs >= 0: a sequence or 1-D array of reals (a string or masked array refused)."""
    _refuse_text(norms, name)
    if not hasattr(norms, "__iter__") or getattr(norms, "ndim", 1) != 1:
        raise ArgumentTypeError(f"{name} must be a sequence or 1-D array of real numbers, got {describe(norms)}")
    return [check_nonnegative(t, f"{name}[{i}]") for i, t in enumerate(norms)]


def _norm2(u):
    return mp.fsum(t * t for t in u)


def _pair_sq_sums(rows):
    m = len(rows)
    out = []
    for i in range(m):
        check_time(f"the m (m - 1) pair norms w_ij at m = {m}, d = {len(rows[0])}", units=m * len(rows[0]))
        for j in range(m):
            if i != j:
                out.append(_norm2([a + b for a, b in zip(rows[i], rows[j])]))
    return out


def pair_kernel(d, v, w_ij):
    r""":math:`f(w) = \Gamma(\frac d2)\sum_k\frac{v^{2k}w^{2k}}{2^{2k}k!\Gamma(k+\frac d2)}
    = {}_0F_1(;\frac d2;\frac{v^2w^2}{4})` at the current precision (series as printed)."""
    h = mp.mpf(d) / 2
    return sum_ratio_series(lambda k: 1 / ((k + 1) * (k + h)), (v * w_ij) ** 2 / 4,
                            what="eq. simp+_obj inner series")


@guarded()
def exact_objective(vectors, v):
    r"""Eq. ``simp+_obj``: the conformity of a fixed set of vectors (no expectation).

    Parameters
    ----------
    vectors : array-like, shape (m, d), m >= 2
        Rows of reals (int, float, decimal str, mpf); a string, a masked array
        or a non-real entry (e.g. a bool) is refused, naming ``vectors[i][j]``.
    v : real >= 0

    Returns
    -------
    mpf
        :math:`\frac{1}{m(m-1)}\sum_{i\ne j}{}_0F_1(;\frac d2;\frac{v^2 w_{ij}^2}{4})`.
    """
    rows = _as_vectors(vectors)
    vv = check_nonnegative(v, "v")
    m, d = len(rows), len(rows[0])
    return mp.fsum(pair_kernel(d, vv, mp.sqrt(s)) for s in _pair_sq_sums(rows)) / (m * (m - 1))


@guarded()
def truncated_objective(vectors, v):
    r"""Eq. ``truncated_obj``:
    :math:`\frac{\Gamma(d/2)v^2}{4m(m-1)\Gamma(1+d/2)}\sum_{i\ne j}w_{ij}^2`."""
    rows = _as_vectors(vectors)
    vv = check_nonnegative(v, "v")
    m, d = len(rows), len(rows[0])
    h = mp.mpf(d) / 2
    return mp.gammaprod([h], [h + 1]) * vv * vv / (4 * m * (m - 1)) * mp.fsum(_pair_sq_sums(rows))


@guarded()
def truncated_objective_minimum(norms, v, d=None):
    r"""Closed-form minimum of eq. ``truncated_obj`` over directions for given norms.

    :math:`\frac{\Gamma(d/2)v^2}{4m(m-1)\Gamma(1+d/2)}\big(2(m-2)\sum_iw_i^2 +
    2\max(0, 2\max_iw_i-\sum_iw_i)^2\big)`; d defaults to m (a square block).

    ``norms`` is a sequence or 1-D array of at least 2 reals >= 0 (a string or
    a masked array is refused, not iterated), ``v`` a real >= 0, ``d`` an int >= 2.
    """
    ws = _as_norms(norms)
    m = len(ws)
    if m < 2:
        raise ValueError(f"norms must hold at least 2 values, got {m}")
    d = m if d is None else check_int(d, "d", 2)
    vv = check_nonnegative(v, "v")
    h = mp.mpf(d) / 2
    gap = max(mp.mpf(0), 2 * max(ws) - mp.fsum(ws))
    inner = 2 * (m - 2) * mp.fsum(w * w for w in ws) + 2 * gap * gap
    return mp.gammaprod([h], [h + 1]) * vv * vv / (4 * m * (m - 1)) * inner


@guarded(0)
def simplex_plus_update(norms, directions=None, tol=None, max_passes=10_000, history=False):
    r"""Run the SimRFs+ update (eq. ``simpler_updates_main``) to a fixed point.

    Parameters
    ----------
    norms : sequence or 1-D array of m >= 2 reals > 0
        The norms :math:`w_i` (kept fixed).  A string or a numpy masked array
        is refused (TypeError naming ``norms``), not iterated.
    directions : array-like (m, d), optional
        Starting directions (normalised internally); defaults to the simplex
        vectors of eq. ``simplex_vectors`` with d = m.
    tol : real, optional
        Stop when no vector moves by more than ``tol`` (Euclidean) during a
        full pass; defaults to :math:`2^{-p/2}` at working precision p (the
        fixed-point iteration converges linearly).
    max_passes : int
        Raise ``mpmath.NoConvergence`` if not converged after this many passes.
    history : bool, default False
        Also return :math:`\|\sum_i w_i\|` before the first pass and after
        each pass.  True or False (numpy's too); any other object is refused.

    Returns
    -------
    vectors : list of lists of mpf, shape (m, d)
    passes : int
        Number of full passes performed.
    resultants : list of mpf
        Only with ``history=True``.

    Notes
    -----
    A vector whose resultant :math:`r_i` vanishes is left unchanged (the
    objective does not depend on its direction).
    """
    max_passes = check_int(max_passes, "max_passes", 1)
    history = check_bool(history, "history")
    ws = _as_norms(norms)
    if len(ws) < 2 or any(w <= 0 for w in ws):
        raise ValueError(f"norms must hold at least 2 positive values, got {describe(norms)}")
    m = len(ws)
    with mp.workprec(mp.prec + 16):
        if directions is None:
            dirs = _rows(simplex_vectors(m))
        else:
            dirs = _as_vectors(directions, "directions")
            if len(dirs) != m:
                raise ValueError(f"directions must have {m} rows (one per norm), got {len(dirs)}")
        vecs = []
        for w, u in zip(ws, dirs):
            n = mp.sqrt(_norm2(u))
            if n == 0:
                raise ValueError("directions must be non-zero vectors")
            vecs.append([w * t / n for t in u])
        tol_ = mp.mpf(2) ** (-(mp.prec - 16) // 2) if tol is None else check_nonnegative(tol, "tol")
        d = len(vecs[0])
        total = [mp.fsum(vecs[i][k] for i in range(m)) for k in range(d)]
        resultants = [mp.sqrt(_norm2(total))]
        what = f"simplex_plus_update at m = {m}, d = {d} (pass {{}} of max_passes = {max_passes})"
        for passes in range(1, max_passes + 1):
            moved = mp.mpf(0)
            for i in range(m):
                if i % 16 == 0:
                    check_time(what.format(passes), units=16 * m * d)  # 16 rows, each against m rows of d
                r = [total[k] - vecs[i][k] for k in range(d)]
                rn = mp.sqrt(_norm2(r))
                if rn == 0:
                    continue
                new = [-ws[i] * t / rn for t in r]
                moved = max(moved, mp.sqrt(_norm2([a - b for a, b in zip(new, vecs[i])])))
                vecs[i] = new
                total = [r[k] + new[k] for k in range(d)]
            resultants.append(mp.sqrt(_norm2(total)))
            if moved <= tol_:
                break
        else:
            raise ConvergenceError(
                f"simplex_plus_update: not converged to tol = {mp.nstr(tol_, 3)} after "
                f"{max_passes} passes; raise max_passes or tol"
            )
    out = [[+t for t in row] for row in vecs]
    if history:
        return out, passes, [+t for t in resultants]
    return out, passes
