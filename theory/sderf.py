r"""Symmetric dense-exponential random features (SDERFs, FAVOR#) in closed form (beyond the paper).

The features, the derivation of their moments, the optimum for a data set (with its proof), precision and
cost: :ref:`guide-theory.sderf` (``docs/guide/derivations.rst``).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from mpmath import libmp as mpmath_libmp
from mpmath.matrices.matrices import _matrix

from ._checks import guarded, square, to_mpf
from ._context import check_time, mp
from .errors import ConvergenceError
from . import feature_kinds as kinds
from .oprf import _optimal_a
from .validation import ArgumentTypeError, check_int, describe

__all__ = [
    "SDERFParameters",
    "sderf_log_objective",
    "sderf_moment_matrix",
    "sderf_mse",
    "sderf_optimal_parameters",
    "sderf_relative_mse",
    "sderf_second_moment",
    "sderf_second_moment_dense",
    "sderf_variance",
]

#: Largest deviation max|Q^T Q - I| accepted for an orthogonal Q (float64 eigenvectors are ~1e-15 off).
ORTHOGONALITY_TOL = 1e-6

SDERFParameters = namedtuple("SDERFParameters", ["a", "Q", "eigenvalues"])
SDERFParameters.__doc__ = """The FAVOR# (SDERF) parameters of a data set: ``a`` (list of d mpf, :math:`a_k^*`),
``Q`` (d x d mpmath matrix, the eigenvectors of M as columns), ``eigenvalues`` (list of d mpf, :math:`\\lambda_k`,
ascending)."""


# ---------------------------------------------------------------------------
# argument conversion (inside the private context)


def _sequence(values, name):
    """A 1-D sequence (list, tuple, numpy array, mpmath column/row matrix) as a list of items."""
    if isinstance(values, _matrix):
        if min(values.rows, values.cols) != 1:
            raise ValueError(f"{name} must be a vector (a 1-D sequence or an mpmath column matrix), got an mpmath "
                             f"matrix of shape ({values.rows}, {values.cols})")
        return [values[i] for i in range(max(values.rows, values.cols))]
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise ValueError(f"{name} must be a 1-D array, got shape {values.shape}")
        return list(values)
    if isinstance(values, (list, tuple)):
        return list(values)
    raise ArgumentTypeError(f"{name} must be a sequence of real numbers (list, tuple, 1-D numpy array or mpmath "
                            f"column matrix), got {describe(values)}")


def _vector(values, name, d=None):
    items = _sequence(values, name)
    if not items:
        raise ValueError(f"{name} must hold at least one entry, got an empty sequence")
    if d is not None and len(items) != d:
        raise ValueError(f"{name} must have length d = {d}, got length {len(items)}")
    return [to_mpf(x, f"{name}[{i}]") for i, x in enumerate(items)]


def _check_a(a, d):
    """a as d mpf, each < 1/8 (I - 8A positive definite)."""
    if not isinstance(a, (list, tuple, np.ndarray, _matrix)):
        raise ArgumentTypeError(f"a must be a sequence of d = {d} reals < 1/8 (the eigenvalues of A; [A] * {d} for "
                                f"the isotropic OPRF), got {describe(a)}")
    out = _vector(a, "a", d)
    for k, ak in enumerate(out):
        if not ak < mp.mpf(1) / 8:
            raise ValueError(f"a[{k}] must be < 1/8 (I - 8A must be positive definite for a finite variance), "
                             f"got {mp.nstr(ak, 10)}")
    return out


def _float_matrix(Q, name, d):
    """Q as a float64 numpy (d, d) array (for the cheap checks) and its exact entries."""
    if isinstance(Q, _matrix):
        if (Q.rows, Q.cols) != (d, d):
            raise ValueError(f"{name} must be a (d, d) = ({d}, {d}) matrix, got shape ({Q.rows}, {Q.cols})")
        entries = [[Q[i, j] for j in range(d)] for i in range(d)]
    else:
        if isinstance(Q, (str, bytes)) or not isinstance(Q, (list, tuple, np.ndarray)):
            raise ArgumentTypeError(f"{name} must be a (d, d) orthogonal matrix (numpy array, nested list or mpmath "
                                    f"matrix) or None (the identity), got {describe(Q)}")
        arr = np.asarray(Q, dtype=object)
        if arr.shape != (d, d):
            raise ValueError(f"{name} must be a (d, d) = ({d}, {d}) matrix, got shape {arr.shape}")
        entries = arr.tolist()
    exact = mp.matrix(d, d)
    for i in range(d):
        for j in range(d):
            exact[i, j] = to_mpf(entries[i][j], f"{name}[{i}, {j}]")
    approx = np.array([[float(exact[i, j]) for j in range(d)] for i in range(d)])
    return approx, exact


def _orthonormal(Q, d, name="Q"):
    """None (the identity) or Q orthonormalised at the working precision (:ref:`guide-theory.sderf`)."""
    if Q is None:
        return None
    approx, exact = _float_matrix(Q, name, d)
    dev = float(np.max(np.abs(approx.T @ approx - np.eye(d))))
    if not dev <= ORTHOGONALITY_TOL:
        raise ValueError(f"{name} must be an orthogonal matrix (max |Q^T Q - I| <= {ORTHOGONALITY_TOL:g}), got "
                         f"max |Q^T Q - I| = {dev:.3g}")
    check_time("sderf: orthonormalising Q (O(d^3))", units=1 + d ** 3)  # mp.qr runs uninterrupted
    q, r = mp.qr(exact)
    for j in range(d):
        if r[j, j] < 0:  # keep every column's orientation: Gram-Schmidt, R with a positive diagonal
            for i in range(d):
                q[i, j] = -q[i, j]
    return q


def _rotate(v, Q):
    r""":math:`\tilde v = Q^\top v` (v itself for Q = None)."""
    if Q is None:
        return list(v)
    d = len(v)
    return [mp.fdot([Q[i, k] for i in range(d)], v) for k in range(d)]


def _excess(vt, a):
    r""":math:`S = \log(\mathbb E[b^2]/(\mathbb Eb)^2)
    = \sum_k \frac12\mathrm{log1p}(16a_k^2/(1-8a_k)) + \tilde v_k^2/(1-8a_k)`."""
    terms = []
    for vk, ak in zip(vt, a):
        one_8a = 1 - 8 * ak
        terms.append(mp.log1p(16 * square(ak) / one_8a) / 2 + square(vk) / one_8a)
    return mp.fsum(terms)


def _v_sq(vt):
    return mp.fsum(square(x) for x in vt)


# ---------------------------------------------------------------------------
# single pairs


@guarded()
def sderf_second_moment(v_vec, a, Q=None):
    r"""Second moment :math:`\mathbb E[b^2]` of one SDERF direction (:ref:`guide-theory.sderf`).

    .. math::
        \mathbb E[b^2] = \prod_k\frac{1-4a_k}{\sqrt{1-8a_k}}\exp\Big(\frac{2(1-4a_k)\tilde v_k^2}{1-8a_k}\Big),
        \qquad \tilde v = \mathbf Q^\top v,

    evaluated as :math:`e^{\|v\|^2 + S}` with the non-negative excess S.

    Parameters
    ----------
    v_vec : sequence of d reals
        :math:`v = x + y` (list, tuple, 1-D numpy array or mpmath column).
    a : sequence of d reals < 1/8
        The eigenvalues :math:`a_k` of :math:`\mathbf A`.
    Q : (d, d) orthogonal matrix or None
        Eigenvectors of :math:`\mathbf A` as columns (numpy array, nested list or mpmath
        matrix); None is the identity.  Orthonormalised at the working precision.

    Returns
    -------
    mpf
    """
    v = _vector(v_vec, "v_vec")
    d = len(v)
    a = _check_a(a, d)
    vt = _rotate(v, _orthonormal(Q, d))
    return mp.exp(_v_sq(vt) + _excess(vt, a))


@guarded()
def sderf_variance(v_vec, a, Q=None):
    r""":math:`\mathrm{Var}\,b = \mathbb E[b^2] - e^{\|v\|^2} = e^{\|v\|^2}\,\mathrm{expm1}(S)`, relative accuracy
    for every v and a (arguments as in :func:`sderf_second_moment`).  PRFs (a = 0):
    :math:`e^{v^2}(e^{v^2}-1)`."""
    v = _vector(v_vec, "v_vec")
    d = len(v)
    a = _check_a(a, d)
    vt = _rotate(v, _orthonormal(Q, d))
    return mp.exp(_v_sq(vt)) * mp.expm1(_excess(vt, a))


def _pair(x, y):
    xv = _vector(x, "x")
    yv = _vector(y, "y", len(xv))
    return xv, yv, [p + q for p, q in zip(xv, yv)]


@guarded()
def sderf_mse(x, y, a, Q=None, *, m, kernel="gaussian"):
    r"""MSE of the SDERF kernel estimator with m i.i.d. directions.

    .. math::
        \mathrm{MSE} = \frac{e^{-2c(\|x\|^2+\|y\|^2)}}{m}\,e^{\|x+y\|^2}\,\mathrm{expm1}(S)

    (c = 1 Gaussian, 1/2 softmax).  Couplings of the directions (orthogonal, simplex) add
    pair terms with no closed form here: estimate them with
    :func:`montecarlo.sderf.sderf_empirical_mse`.

    Parameters
    ----------
    x, y : sequences of d reals
    a : sequence of d reals < 1/8
    Q : (d, d) orthogonal matrix or None
    m : int >= 1, keyword-only
    kernel : {'gaussian', 'softmax'}, keyword-only

    Returns
    -------
    mpf
    """
    c = mp.mpf(kinds.kernel_c("prf", kernel))  # the positive kinds' c: 1 (Gaussian) or 1/2 (softmax)
    m = check_int(m, "m", 1)
    xv, yv, v = _pair(x, y)
    d = len(v)
    a = _check_a(a, d)
    vt = _rotate(v, _orthonormal(Q, d))
    log_pref = -2 * c * (_v_sq(xv) + _v_sq(yv)) + _v_sq(vt)
    return mp.exp(log_pref) * mp.expm1(_excess(vt, a)) / m


@guarded()
def sderf_relative_mse(x, y, a, Q=None, *, m):
    r"""MSE / K^2 with m i.i.d. directions: :math:`\mathrm{expm1}(S)/m`, the same for both target
    kernels (PRFs: :math:`(e^{\|x+y\|^2}-1)/m`).  Arguments as in :func:`sderf_mse`."""
    m = check_int(m, "m", 1)
    _, _, v = _pair(x, y)
    d = len(v)
    a = _check_a(a, d)
    return mp.expm1(_excess(_rotate(v, _orthonormal(Q, d)), a)) / m


@guarded()
def sderf_second_moment_dense(v_vec, A):
    r"""Second route for :math:`\mathbb E[b^2]`, from a dense symmetric :math:`\mathbf A` (no eigen-decomposition).

    .. math::
        \mathbb E[b^2] = \det(I-4\mathbf A)\det(I-8\mathbf A)^{-1/2}
        \exp\big(2v^\top\mathbf B(I-8\mathbf A)^{-1}\mathbf Bv\big),\qquad \mathbf B = (I-4\mathbf A)^{1/2}

    with the matrix square root by ``mpmath.sqrtm`` and the solve by LU, straight from the
    moment generating function of a Gaussian quadratic form (:ref:`guide-theory.sderf`).

    Parameters
    ----------
    v_vec : sequence of d reals
    A : (d, d) symmetric matrix
        With :math:`I - 8\mathbf A` positive definite (checked by Cholesky); symmetric to
        :math:`10^{-6}` relative (its symmetric part :math:`(\mathbf A + \mathbf A^\top)/2` is used, so that a
        product :math:`\mathbf Q\,\mathrm{diag}(a)\mathbf Q^\top` rounded at the working precision is accepted).

    Returns
    -------
    mpf
    """
    v = _vector(v_vec, "v_vec")
    d = len(v)
    approx, Am = _float_matrix(A, "A", d)
    asym = float(np.max(np.abs(approx - approx.T)))
    if not asym <= ORTHOGONALITY_TOL * max(1.0, float(np.max(np.abs(approx)))):
        raise ValueError(f"A must be symmetric (max |A - A^T| <= {ORTHOGONALITY_TOL:g} max(1, max |A|)), got "
                         f"max |A - A^T| = {asym:.3g}")
    Am = (Am + Am.T) / 2
    eye = mp.eye(d)
    one_8 = eye - 8 * Am
    try:
        mp.cholesky(one_8)
    except ValueError:
        raise ValueError("A must satisfy I - 8A positive definite (a finite variance), got an A with an "
                         "eigenvalue >= 1/8") from None
    one_4 = eye - 4 * Am
    B = mp.sqrtm(one_4)
    Bv = B * mp.matrix(v)
    quad = (Bv.T * mp.lu_solve(one_8, Bv))[0, 0]
    return mp.det(one_4) / mp.sqrt(mp.det(one_8)) * mp.exp(2 * quad)


# ---------------------------------------------------------------------------
# data sets


def _data(X, name, d=None):
    """A real finite 2-D float64 numpy array (rows: points)."""
    if isinstance(X, (str, bytes)) or isinstance(X, np.ma.MaskedArray):
        raise ArgumentTypeError(f"{name} must be a real (N, d) array, got {describe(X)}")
    try:
        arr = np.asarray(X)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a real (N, d) array, got {describe(X)}") from exc
    if arr.dtype.kind not in "fiu":
        raise ArgumentTypeError(f"{name} must hold real numbers (a float or integer array), got dtype {arr.dtype}")
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"{name} must be a 2-D array of shape (N, d) with N, d >= 1, got shape {arr.shape}")
    if d is not None and arr.shape[1] != d:
        raise ValueError(f"{name} must have d = {d} columns (as X), got shape {arr.shape}")
    if arr.dtype.kind in "iu" and arr.size and int(np.max(np.abs(arr.astype(object)))) > 2**53:
        raise ValueError(f"{name} holds integers beyond 2**53, which float64 would round (the inputs are taken "
                         "exactly): pass them as floats if rounding is meant")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite: found {int(np.sum(~np.isfinite(arr)))} NaN or inf entries")
    return arr


def sderf_moment_matrix(X, Y=None):
    r"""The pair statistic :math:`\mathbf M = \frac1{LL'}\sum_{i,j}(x_i+y_j)(x_i+y_j)^\top` in float64.

    :math:`\mathbf M = \overline{xx^\top} + \overline{yy^\top} + \bar x\bar y^\top + \bar y\bar x^\top`,
    O((L + L') d^2) (never the L L' pairs).  A float64 approximation (the float64 twin used by
    :mod:`montecarlo.sderf`): the sum cancels where queries and keys nearly cancel (x = 1e8 + 1, y = -1e8
    gives 0 for M = 1) and overflows / underflows beyond about 1e154 / 1e-154.
    :func:`sderf_optimal_parameters` and :func:`sderf_log_objective` do not use it: they form M exactly
    from the data (``_exact_moment``).

    Parameters
    ----------
    X : array (L, d)
        Queries (finite reals).
    Y : array (L', d), optional
        Keys; default X (a kernel on one set).

    Returns
    -------
    ndarray (d, d), float64, symmetric positive semidefinite up to rounding
    """
    X = _data(X, "X")
    Y = X if Y is None else _data(Y, "Y", X.shape[1])
    xm, ym = X.mean(axis=0), Y.mean(axis=0)
    M = X.T @ X / X.shape[0] + Y.T @ Y / Y.shape[0] + np.outer(xm, ym) + np.outer(ym, xm)
    return (M + M.T) / 2


#: Rows of the data per exact block product (the work budget is checked between blocks).
_EXACT_BLOCK = 256


def _dyadic_ints(arrays):
    """Float64 arrays as object arrays of Python ints and one common exponent e: ``arr == ints * 2**e``
    exactly (every float64 is an integer times a power of two)."""
    odds, exps = [], []
    for arr in arrays:
        frac, ex = np.frexp(arr)
        man = (frac * 2.0 ** 53).astype(np.int64)  # exact: |frac| < 1 has 53 significant bits
        low = np.where(man != 0, man & -man, 1)  # the lowest set bit (two's complement also for man < 0)
        tz = np.log2(low.astype(np.float64)).astype(np.int64)  # exact: low is a power of two <= 2^53
        odds.append(man >> tz)  # exact: those bits are zero
        exps.append(np.where(man != 0, ex.astype(np.int64) - 53 + tz, np.iinfo(np.int64).max))
    e = min(int(x.min()) for x in exps)
    if e == np.iinfo(np.int64).max:  # all zero
        e = 0
    out = []
    for odd, ex in zip(odds, exps):
        shift = np.where(odd != 0, ex - e, 0)
        out.append(odd.astype(object) << shift.astype(object))
    return out, e


def _gram(A, what):
    """A^T A of an object array of ints, exactly, in row blocks (the work budget checked between them)."""
    d = A.shape[1]
    total = np.zeros((d, d), dtype=object)
    for start in range(0, A.shape[0], _EXACT_BLOCK):
        check_time(what, units=1 + _EXACT_BLOCK * d * d // 4)  # a block's d^2 products of Python ints
        block = A[start:start + _EXACT_BLOCK]
        total = total + block.T @ block
    return total


def _exact_moment(X, Y=None):
    r"""The pair statistic M of :func:`sderf_moment_matrix` exactly, as ``(N, e, n)`` with
    :math:`\mathbf M = N\,2^{e}/n` (N a (d, d) object array of Python ints, n = L L').

    From the float64 data written as integers times one power of two (:func:`_dyadic_ints`):
    :math:`LL'\mathbf M = L'\sum_ix_ix_i^\top + L\sum_jy_jy_j^\top + S_xS_y^\top + S_yS_x^\top`
    (S the column sums) in integer arithmetic, O((L + L') d^2) operations on Python ints (about 1.2 s per
    2000 points at d = 64; Y = None: X once); no cancellation, overflow or underflow at any magnitude of the data."""
    X = _data(X, "X")
    if Y is None:  # one set: L^2 M = 2 L sum x x^T + 2 S S^T
        (Xi,), e = _dyadic_ints((X,))
        L = X.shape[0]
        sx = Xi.sum(axis=0)
        gram = _gram(Xi, f"sderf: the exact pair statistic M of {L} points at d = {X.shape[1]} (O(L d^2))")
        return 2 * L * gram + 2 * np.outer(sx, sx), 2 * e, L * L
    Y = _data(Y, "Y", X.shape[1])
    (Xi, Yi), e = _dyadic_ints((X, Y))
    L, Lp = X.shape[0], Y.shape[0]
    what = f"sderf: the exact pair statistic M of {L} + {Lp} points at d = {X.shape[1]} (O((L + L') d^2))"
    sx, sy = Xi.sum(axis=0), Yi.sum(axis=0)
    N = Lp * _gram(Xi, what) + L * _gram(Yi, what) + np.outer(sx, sy) + np.outer(sy, sx)
    return N, 2 * e, L * Lp


def _rounded(n_int, e, den):
    r""":math:`n\,2^e/\mathrm{den}` as one mpf (a single rounding at the working precision)."""
    return mp.make_mpf(mpmath_libmp.mpf_div(mpmath_libmp.from_man_exp(int(n_int), e),
                                            mpmath_libmp.from_int(den), mp.prec, mpmath_libmp.round_nearest))


def _exact_quadratic(q, N):
    r""":math:`q^\top Nq` exactly, as ``(integer, exponent)``, for a vector q of mpf (exact dyadics) and an
    object array N of Python ints."""
    parts = [x._mpf_ for x in q]
    exps = [p[2] for p in parts if p[1]]
    if not exps:
        return 0, 0
    e = min(exps)
    qi = np.empty(len(parts), dtype=object)
    qi[:] = [(-1) ** sign * (man << (ex - e)) if man else 0 for sign, man, ex, _ in parts]
    return int(qi @ (N @ qi)), 2 * e


def _eigen(N, e, n, d):
    """Eigenvalues (ascending, those below 0 by rounding set to 0) and eigenvectors of M = N 2^e / n, each
    entry rounded once to the working precision, by ``mpmath.eigsy`` (M scaled by a power of two to unit
    size first, so that no tolerance of eigsy meets an extreme exponent)."""
    top = max((abs(int(x)).bit_length() for x in N.ravel()), default=0)
    if top == 0:
        return [mp.mpf(0)] * d, mp.eye(d)
    shift = top + e - n.bit_length()  # M / 2^shift has entries of order 1
    Mm = mp.matrix(d, d)
    for i in range(d):
        for j in range(d):
            Mm[i, j] = _rounded(N[i, j], e - shift, n)
    # mp.eigsy runs uninterrupted: charged first, about 12 d^3 units (6 s at d = 32, 44 s at d = 64, 80 bits)
    check_time(f"sderf_optimal_parameters: eigen-decomposition at d = {d} (O(d^3))", units=12 * d ** 3)
    E, Q = mp.eigsy(Mm)
    # M is positive semidefinite exactly; rounding M and eigsy leave eigenvalues of order d eps tr M below 0
    tol = mp.mpf(64 * d) * mp.eps * mp.fsum(abs(Mm[i, i]) for i in range(d))
    lam = []
    for k in range(d):
        if E[k] < -tol:
            raise ConvergenceError(f"sderf_optimal_parameters: mpmath.eigsy returned the eigenvalue "
                                   f"{mp.nstr(mp.ldexp(E[k], shift), 5)} < 0 beyond rounding for the positive "
                                   f"semidefinite pair statistic M at d = {d}; raise the working precision")
        lam.append(mp.ldexp(E[k], shift) if E[k] > 0 else mp.mpf(0))
    return lam, Q


@guarded()
def sderf_optimal_parameters(X, Y=None):
    r"""FAVOR#'s SDERF parameters for queries X and keys Y: the global minimiser of the average log
    second moment (:ref:`guide-theory.sderf`, Theorem).

    Parameters
    ----------
    X : array (L, d)
        Queries (finite reals; numpy arrays or nested lists).
    Y : array (L', d), optional
        Keys; default X.

    Returns
    -------
    SDERFParameters
        ``(a, Q, eigenvalues)``: :math:`a_k^* = a^*(\lambda_k)` (list of mpf, <= 0), the eigenvectors
        of :math:`\mathbf M` as the columns of an mpmath matrix, and the eigenvalues :math:`\lambda_k`
        (ascending), at the working precision (``mpmath.eigsy``, O(d^3): about 13 s at d = 64, 30 digits).

    Notes
    -----
    Domain: any finite data (no limit on magnitude: M = 4e400 for X = [[1e200]] gives a = -1e400).  M is
    formed exactly from the data (``_exact_moment``), each entry rounded once to the working precision,
    and eigen-decomposed there: the parameters are the exact optimum of a matrix within a relative
    :math:`2^{-p}` per entry of M (p the working precision), decomposed by eigsy to within about
    :math:`d\,2^{-p}\lVert\mathbf M\rVert`.  So an eigenvalue (and its :math:`a_k`) has relative accuracy
    when it is not far below :math:`\lVert\mathbf M\rVert`; eigenvalues below about
    :math:`d\,2^{-p}\lVert\mathbf M\rVert` are known to that absolute level only (those below 0 by rounding
    are returned as 0).  The objective (:func:`sderf_log_objective`) at the returned parameters is its
    minimum to the working precision: it is stationary there, so an O(ε) perturbation of the parameters
    moves it by O(ε^2).
    """
    N, e, n = _exact_moment(X, Y)
    lam, Q = _eigen(N, e, n, N.shape[0])
    return SDERFParameters([_optimal_a(x) for x in lam], Q, lam)


@guarded()
def sderf_log_objective(X, Y, a, Q=None):
    r"""The pair-averaged log second moment :math:`\frac1{LL'}\sum_{i,j}\log\mathbb E[b^2(x_i+y_j)]`.

    .. math::
        \sum_k\Big(\log(1-4a_k) - \tfrac12\log(1-8a_k) + \frac{2(1-4a_k)}{1-8a_k}q_k^\top\mathbf Mq_k\Big)

    with :math:`\mathbf M` the pair statistic of :func:`sderf_moment_matrix`.  FAVOR#'s shifted
    log-variance is this plus :math:`\overline{\log P^2}`, which does not depend on the parameters.

    Evaluated to the working precision (relative accuracy, also for tiny values) for any finite data: each
    :math:`q_k^\top\mathbf Mq_k` exactly in integer arithmetic from the exact data (``_exact_moment``) and
    the columns of Q (orthonormalised at the working precision, exact dyadics), rounded once; the first part
    as :math:`\frac12\mathrm{log1p}(16a_k^2/(1-8a_k))`; every term is >= 0, so the sum does not cancel.
    Cost: O((L + L') d^2 + d^3) operations on Python ints.

    Parameters
    ----------
    X : array (L, d)
    Y : array (L', d) or None
        None: Y = X.
    a : sequence of d reals < 1/8
    Q : (d, d) orthogonal matrix or None

    Returns
    -------
    mpf
    """
    d = _data(X, "X").shape[1]
    a = _check_a(a, d)
    Qo = _orthonormal(Q, d)
    N, e, n = _exact_moment(X, Y)
    terms = []
    for k, ak in enumerate(a):
        check_time(f"sderf_log_objective: the quadratic forms q^T M q at d = {d} (O(d^3))", units=1 + d * d)
        if Qo is None:
            quad = _rounded(N[k, k], e, n)
        else:
            q_n, q_e = _exact_quadratic([Qo[i, k] for i in range(d)], N)
            quad = _rounded(q_n, q_e + e, n)
        one_8a = 1 - 8 * ak
        terms.append(mp.log1p(16 * square(ak) / one_8a) / 2 + 2 * (1 - 4 * ak) / one_8a * quad)
    return mp.fsum(terms)
