r"""Random projection matrices of every coupling (Secs. 1, 3, 4.3; App. B).

A coupling produces blocks of rows :math:`w_i \in \mathbb R^d`; ``m`` features
use ``ceil(m / b)`` independent blocks of ``b`` rows, the last one truncated to
its first ``m mod b`` rows (footnote 1 of the paper; the same convention as
:func:`theory.block_sizes`).  ``b = d`` for the exact couplings and ``b = p``
(see below) for the fast ones.

``"iid"``
    rows i.i.d. :math:`\mathcal N(0, I_d)` (IIDRFs).
``"orthogonal"``
    :math:`\mathbf W_{\mathrm{ort}} = \mathbf D\mathbf R` (ORFs): :math:`\mathbf R`
    Haar on O(d), :math:`\mathbf D = \mathrm{diag}(w_i)`, :math:`w_i \sim \chi_d`
    i.i.d.
``"simplex"``
    :math:`\mathbf W_{\mathrm{simp}} = \mathbf D\mathbf S\mathbf R` (eq.
    ``simplex_block_eq``) with the rows of :math:`\mathbf S` the simplex vectors
    of eq. ``simplex_vectors``; :math:`\mathbf S` is applied with Algorithm 1
    (App. B.1) in O(d) per vector, never as a dense matrix.
``"simplex_plus"``
    SimRFs+ (Sec. 3.2): fresh :math:`\chi_d` norms per block, directions from
    the update of eq. ``simpler_updates_main`` started at the simplex geometry
    and run until no vector moves by more than ``SIMPLEX_PLUS_TOL`` times its
    norm during a full pass, then rotated by a Haar :math:`\mathbf R`.  Each
    block stops at its own convergence (blocks are exactly independent).
``"fast_orthogonal"``, ``"fast_simplex"``
    :math:`\mathbf R` replaced by the HD-product
    :math:`\widetilde{\mathbf R} = \mathbf H\mathbf D_1\mathbf H\mathbf D_2\mathbf H\mathbf D_3`
    (k = 3 blocks, App. B.2; :math:`\mathbf H` the normalised Hadamard
    matrix, :math:`\mathbf D_i` i.i.d. Rademacher diagonals) applied with a
    fast Walsh-Hadamard transform in O(p log p).  Inputs are **zero-padded**
    from d to :math:`p = 2^{\lceil\log_2 d\rceil}` coordinates; a block then
    has p rows in :math:`\mathbb R^p` and the dense (m, d) weights are the
    first d columns of those rows (what a zero-padded input sees).  These rows
    are only approximately :math:`\mathcal N(0, I_d)` (the directions take
    finitely many values); see :mod:`montecarlo.diagnostics`.

Why the sign correction matters: LAPACK's Householder QR (used by numpy,
scipy and torch) returns :math:`Q` with :math:`Q_{11} < 0` always, so the
first row of an uncorrected :math:`Q` has a negative first coordinate.  Such a
:math:`Q` is not Haar; PRF estimates (which are odd-sensitive,
:math:`e^{w^\top v}`) are then biased, while RFFs (:math:`\cos`, even) hide
it.  Here :math:`\mathbf R = Q\,\mathrm{diag}(\mathrm{sign}\,\mathrm{diag}\,R_{QR})`,
the unique QR factor with positive diagonal, which is Haar (Mezzadri 2007).
The orthogonal coupling uses its transpose (also Haar), whose rows
:math:`s_i q^{(i)}` let the sign correction fold into the row scaling by
:math:`\mathbf D`; the simplex couplings use :math:`\mathbf R` itself, whose
columns carry the signs, so that Algorithm 1 runs as a reduction plus
broadcasts (see ``benchmarks/README.md`` for the cost).  Either choice draws
exactly the same distribution.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ._backend import Random, backend_name, device_kind, namespace, resolve_device, resolve_dtype, to_numpy
from theory.errors import IterationError
from theory.validation import renamed_arguments
from theory.registry import get as get_coupling, has_hook, hook, register as register_hook

from ._checks import (
    check_coupling,
    check_data,
    check_dimension,
    check_int,
    check_positive_float,
)

#: Default relative tolerance of the SimRFs+ update: stop when no vector moves
#: by more than ``SIMPLEX_PLUS_TOL * w_i`` during a full pass.
SIMPLEX_PLUS_TOL = 1e-10
#: Passes after which the SimRFs+ update stops (warning by default).
SIMPLEX_PLUS_MAX_PASSES = 1000

#: Routes for drawing Haar-random orthogonal matrices.
HAAR_ROUTES = ("qr", "cpu_qr", "householder")
#: Route used per (backend, device kind) when ``haar_route`` is None.  numpy:
#: LAPACK's batched QR.  torch on the CPU: numpy's QR then a copy ('cpu_qr'),
#: measured 30 to 50 times faster than torch.linalg.qr on batches of 64 x 64
#: blocks (0.15 s vs 4.3-7.5 s for 30 x 8 blocks, 2 cores).  CUDA: not
#: measured here (no GPU); batched QR is kept until the benchmark runs on one.
DEFAULT_HAAR_ROUTE = {("numpy", "cpu"): "qr", ("torch", "cpu"): "cpu_qr", ("torch", "cuda"): "qr",
                      ("cupy", "cuda"): "qr"}


#: The SimRFs+ update did not reach its tolerance (the project's failure family, :mod:`theory.errors`).
ConvergenceError = IterationError


# ---------------------------------------------------------------------------
# Simplex geometry (eq. simplex_vectors, Algorithm 1)


def simplex_matrix(d, xp=None, device=None, dtype=None):
    r"""The dense d x d matrix :math:`\mathbf S` of eq. ``simplex_vectors``.

    For reference and tests only: the samplers apply :math:`\mathbf S` with
    :func:`simplex_apply` (Algorithm 1).

    .. math::
        s_i = \sqrt{\tfrac{d}{d-1}}\,e_i - \frac{\sqrt d + 1}{(d-1)^{3/2}}(1,\ldots,1,0)^\top\ (i < d),
        \qquad s_d = \frac{1}{\sqrt{d-1}}(1,\ldots,1,0)^\top.
    """
    d = check_dimension(d, "simplex")
    xp = namespace(xp)
    dev = resolve_device(xp, device)
    dt = resolve_dtype(xp, dtype)
    a = math.sqrt(d / (d - 1))
    b = (math.sqrt(d) + 1) / (d - 1) ** 1.5
    s = xp.zeros((d, d), dtype=dt, device=dev)
    s[: d - 1, : d - 1] = -b
    s[: d - 1, : d - 1] += a * xp.eye(d - 1, dtype=dt, device=dev)
    s[d - 1, : d - 1] = 1 / math.sqrt(d - 1)
    return s


def simplex_apply(x, axis=-1):
    r"""Algorithm 1 (App. B.1): :math:`y = \mathbf S x` along ``axis`` in O(d) per vector.

    .. math::
        y_d = \frac{1}{\sqrt{d-1}}\sum_{i<d}x_i,\qquad
        y_i = \sqrt{\tfrac{d}{d-1}}\,x_i - \frac{\sqrt d+1}{d-1}\,y_d\quad (i < d).

    Parameters
    ----------
    x : array, any backend, with ``x.shape[axis] = d >= 2``
    axis : int
        The axis holding the vector components (``-2`` applies
        :math:`\mathbf S` to every column of a stack of matrices, i.e. forms
        :math:`\mathbf S\mathbf M` for matrices :math:`\mathbf M`).

    Returns
    -------
    array of the same shape
    """
    import array_api_compat

    xp = array_api_compat.array_namespace(x)
    d = x.shape[axis]
    if d < 2:
        raise ValueError(f"x must have length >= 2 along axis {axis} (the simplex needs d >= 2), got {d}")
    moved = axis not in (-1, x.ndim - 1)
    if moved:
        x = xp.moveaxis(x, axis, -1)
    a = math.sqrt(d / (d - 1))
    b = (math.sqrt(d) + 1) / (d - 1)
    yd = xp.sum(x[..., : d - 1], axis=-1, keepdims=True) * (1 / math.sqrt(d - 1))
    y = xp.concat([a * x[..., : d - 1] - b * yd, yd], axis=-1)
    return xp.moveaxis(y, -1, axis) if moved else y


def _simplex_rows_scaled(x, norms):
    r"""Rows :math:`\mathbf D\mathbf S\mathbf X` for a stack X of shape (n, d, c), norms (n, d).

    Algorithm 1 along axis -2 fused with the diagonal :math:`\mathbf D`:
    row i < d is :math:`w_i(a x_i - b y_d)`, row d is :math:`w_d y_d`.
    """
    xp = _ns_of(x)
    d = x.shape[-2]
    a = math.sqrt(d / (d - 1))
    b = (math.sqrt(d) + 1) / (d - 1)
    yd = xp.sum(x[:, : d - 1, :], axis=1, keepdims=True) * (1 / math.sqrt(d - 1))  # (n, 1, c)
    out = (a * norms)[:, :, None] * x
    out[:, : d - 1, :] -= (b * norms[:, : d - 1])[:, :, None] * yd
    out[:, d - 1 :, :] = norms[:, d - 1 :, None] * yd
    return out


def _sign(x):
    """+1 where x >= 0, -1 where x < 0, in x's dtype and device."""
    xp = _ns_of(x)
    one = xp.ones_like(x)
    return xp.where(x < 0, -one, one)


def _simplex_rows_signed(q, s, norms):
    r"""Rows of :math:`\mathbf D\mathbf S\mathbf R` with the Haar matrix :math:`\mathbf R = Q\,\mathrm{diag}(s)`.

    Algorithm 1 applied to the columns of :math:`Q` (one reduction over the
    rows, :math:`y_d = (d-1)^{-1/2}\sum_{i<d}q_i`), then the column signs and
    :math:`\mathbf D`, all as cheap broadcasts or in-place passes: row i < d
    is :math:`a w_i(q_i - \frac ba y_d)\odot s`, row d is :math:`w_d\,y_d\odot s`.
    """
    xp = _ns_of(q)
    n, d = q.shape[0], q.shape[-1]
    a = math.sqrt(d / (d - 1))
    b = (math.sqrt(d) + 1) / (d - 1)
    on_cpu = backend_name(xp) == "numpy" or str(getattr(q, "device", "")) == "cpu"
    if on_cpu and n * d * d > _CACHE_ELEMENTS:
        # cache blocking on the CPU: each group of blocks is read from memory once and
        # the remaining passes hit the cache (a loop over chunks, not over blocks)
        out = xp.empty_like(q)
        step = max(1, _CACHE_ELEMENTS // (d * d))
        for lo in range(0, n, step):
            sl = slice(lo, min(n, lo + step))
            _simplex_signed_into(out[sl], q[sl], s[sl], norms[sl], a, b, xp)
        return out
    out = xp.empty_like(q)
    _simplex_signed_into(out, q, s, norms, a, b, xp)
    return out


#: Float entries per cache block in the CPU post-processing (512 KiB of float64).
_CACHE_ELEMENTS = 1 << 16


def _simplex_signed_into(out, q, s, norms, a, b, xp):
    d = q.shape[-1]
    yd = xp.sum(q[:, : d - 1, :], axis=1, keepdims=True) * (1 / math.sqrt(d - 1))  # (n, 1, d)
    out[...] = q - (b / a) * yd
    out[:, d - 1 :, :] = yd * (1 / a)
    out *= s[:, None, :]
    out *= (a * norms)[:, :, None]


def _ns_of(x):
    import array_api_compat

    return array_api_compat.array_namespace(x)


# ---------------------------------------------------------------------------
# Haar rotations


def _haar_qr(random, n, d, cpu):
    xp = random.xp
    g = random.normal((n, d, d))
    if cpu and random.backend != "numpy":
        import numpy as np

        q, r = np.linalg.qr(to_numpy(g))
        q = xp.asarray(q, device=random.device)
        diag = xp.asarray(np.diagonal(r, axis1=-2, axis2=-1).copy(), device=random.device)
    else:
        q, r = xp.linalg.qr(g)
        diag = xp.linalg.diagonal(r)
    return q, diag


def _haar_householder(random, n, d):
    r"""Haar matrices as products of d - 1 random Householder reflections.

    :math:`Q = \mathbf H_1\cdots\mathbf H_{d-1}\,\mathrm{diag}(\epsilon)` where
    :math:`\mathbf H_k` reflects :math:`x^{(k)}\sim\mathcal N(0, I_{d-k+1})`
    (acting on coordinates k..d) onto :math:`-\mathrm{sign}(x^{(k)}_1)\|x^{(k)}\|e_k`
    and :math:`\epsilon_k = -\mathrm{sign}(x^{(k)}_1)`, :math:`\epsilon_d = \pm1`:
    exactly the Householder QR of a Gaussian matrix with the sign correction,
    without forming the Gaussian matrix (Stewart 1980).  Returns (Q, eps).
    """
    xp = random.xp
    dt = random.dtype
    p = xp.zeros((n, d, d), dtype=dt, device=random.device)
    idx = xp.arange(d, device=random.device)
    p[:, idx, idx] = 1.0
    eps = xp.ones((n, d), dtype=dt, device=random.device)
    for k in range(d - 2, -1, -1):
        x = random.normal((n, d - k))
        x0 = x[:, 0]
        sgn = _sign(x0)
        nx = xp.linalg.vector_norm(x, axis=-1)
        u = xp.concat([(x0 + sgn * nx)[:, None], x[:, 1:]], axis=-1)
        u = u / xp.sqrt(2.0 * nx * (nx + xp.abs(x0)))[:, None]
        blk = p[:, k:, k:]
        p[:, k:, k:] = blk - 2.0 * u[:, :, None] * xp.matmul(u[:, None, :], blk)
        eps[:, k] = -sgn
    eps[:, d - 1] = random.rademacher((n,))
    return p, eps


def _haar_rows(random, n, d, route):
    """Haar matrices as (Q, column_signs): the Haar matrix is Q * signs[:, None, :]."""
    if route == "householder":
        return _haar_householder(random, n, d)
    q, diag = _haar_qr(random, n, d, cpu=(route == "cpu_qr"))
    return q, _sign(diag)


def haar_orthogonal(n, d, rng=None, xp=None, device=None, dtype=None, route=None):
    r"""n independent Haar-random orthogonal d x d matrices, shape (n, d, d).

    Parameters
    ----------
    n, d : int >= 1
    rng : None, int or numpy.random.Generator
    xp, device, dtype : backend selection (see :mod:`montecarlo._backend`)
    route : {'qr', 'cpu_qr', 'householder'}, optional
        ``'qr'``: batched QR of a Gaussian matrix on the device, columns
        multiplied by the signs of diag(R); ``'cpu_qr'``: the same QR done on
        the CPU and the result transferred to the device (an explicit
        transfer, opt-in); ``'householder'``: a product of d - 1 random
        Householder reflections built with batched matrix products (no
        LAPACK).  Default from :data:`DEFAULT_HAAR_ROUTE`.

    Returns
    -------
    array (n, d, d)
    """
    n = check_int(n, "n", 1)
    d = check_int(d, "d", 1)
    xp = namespace(xp)
    dev = resolve_device(xp, device)
    random = Random(rng, xp, dev, resolve_dtype(xp, dtype))
    route = _check_route(route, xp, dev)
    q, s = _haar_rows(random, n, d, route)
    return q * s[:, None, :]


def _check_route(route, xp, device):
    if route is None:
        return DEFAULT_HAAR_ROUTE.get((backend_name(xp), device_kind(xp, device)), "qr")
    if route not in HAAR_ROUTES:
        raise ValueError(f"haar_route must be one of 'qr', 'cpu_qr', 'householder', got {route!r}")
    return route


# ---------------------------------------------------------------------------
# SimRFs+ (Sec. 3.2)


def simplex_plus_vectors(norms, tol=SIMPLEX_PLUS_TOL, max_passes=SIMPLEX_PLUS_MAX_PASSES, on_unconverged="warn"):
    r"""Run the SimRFs+ update (eq. ``simpler_updates_main``) from the simplex geometry.

    For each block (vectorised over blocks; sequential over the d vectors of
    a block, as printed):
    :math:`w_i \leftarrow -w_i\,r_i/\|r_i\|`, :math:`r_i = \sum_{j\ne i}w_j`,
    starting from :math:`w_i = w_i s_i` (eq. ``simplex_vectors``), in passes
    over i = 1..d, until no vector moves by more than ``tol * w_i`` during a
    pass.  A vector whose resultant vanishes is left unchanged.  Each block
    stops at its own convergence, so blocks stay independent.

    Parameters
    ----------
    norms : array (n, d), d >= 2, entries > 0
        Norms :math:`w_i` of n independent blocks (any backend).
    tol : float > 0
        Relative tolerance (default :data:`SIMPLEX_PLUS_TOL`).
    max_passes : int >= 1
        Default :data:`SIMPLEX_PLUS_MAX_PASSES`.
    on_unconverged : {'warn', 'raise', 'ignore'}
        What to do with blocks still moving after ``max_passes`` passes:
        keep their last iterate and emit a ``RuntimeWarning`` (default),
        raise :class:`ConvergenceError`, or keep them silently.

    Returns
    -------
    vectors : array (n, d, d)
        Row i of block k is :math:`w_i` (unrotated: multiply by a Haar
        :math:`\mathbf R` on the right for the SimRFs+ block
        :math:`\mathbf D\mathbf S'\mathbf R`).
    passes : array (n,) of int
        Full passes performed by each block (the last one moved no vector
        by more than the tolerance; ``max_passes`` for unconverged blocks).
    converged : array (n,) of bool

    Notes
    -----
    Convergence is linear and fast for well-spread norms (2 passes at
    d = 64, about 5 at d = 6 for ``tol = 1e-10``) but slows down without
    bound when the norms nearly violate the polygon inequality
    :math:`2\max_i w_i \le \sum_i w_i` (the minimum of eq.
    ``truncated_obj`` switches from a closed polygon to collinear vectors
    there): passes grow like :math:`1/|2\max_i w_i - \sum_i w_i|`.  With
    :math:`\chi_3` norms 25% of blocks violate the inequality and about 1
    block in 200 needs more than 1000 passes.  An unconverged block is still
    an exact sample of *a* weight-dependent geometry: its rows are rotated
    by an independent Haar matrix, so each row stays exactly
    :math:`\mathcal N(0, I_d)`.
    """
    tol = check_positive_float(tol, "tol")
    max_passes = check_int(max_passes, "max_passes", 1)
    if on_unconverged not in ("warn", "raise", "ignore"):
        raise ValueError(f"on_unconverged must be 'warn', 'raise' or 'ignore', got {on_unconverged!r}")
    xp = _ns_of(norms)
    if norms.ndim != 2 or norms.shape[1] < 2:
        raise ValueError(f"norms must have shape (n, d) with d >= 2, got {tuple(norms.shape)}")
    n, d = norms.shape
    if not bool(xp.all(norms > 0)):
        raise ValueError("norms must be > 0")
    eye = xp.eye(d, dtype=norms.dtype, device=_dev(norms))
    vec = _simplex_rows_scaled(xp.broadcast_to(eye, (n, d, d)) * 1.0, norms)  # rows w_i s_i
    passes = xp.full((n,), max_passes, dtype=xp.int64, device=_dev(norms))
    converged = xp.zeros((n,), dtype=xp.bool, device=_dev(norms))
    active = xp.arange(n, device=_dev(norms))
    va, wa = vec, norms
    for p in range(1, max_passes + 1):
        total = xp.sum(va, axis=1)
        moved = xp.zeros((va.shape[0],), dtype=va.dtype, device=_dev(norms))
        for i in range(d):
            old = va[:, i, :]
            r = total - old
            rn = xp.linalg.vector_norm(r, axis=-1)
            safe = xp.where(rn > 0, rn, xp.ones_like(rn))
            new = xp.where((rn > 0)[:, None], -(wa[:, i] / safe)[:, None] * r, old)
            moved = xp.maximum(moved, xp.linalg.vector_norm(new - old, axis=-1) / wa[:, i])
            va[:, i, :] = new
            total = r + new
        done = moved <= tol
        if p == max_passes:
            vec[active] = va
        if bool(xp.any(done)):
            idx = active[done]
            if p < max_passes:
                vec[idx] = va[done]
            passes[idx] = p
            converged[idx] = True
            keep = ~done
            active, va, wa = active[keep], va[keep], wa[keep]
        if active.shape[0] == 0:
            return vec, passes, converged
    msg = (f"SimRFs+ update: {int(active.shape[0])} of {n} blocks not converged to relative tol = {tol:g} "
           f"after {max_passes} passes (norms near the polygon inequality); raise max_passes or tol")
    if on_unconverged == "raise":
        raise ConvergenceError(msg)
    if on_unconverged == "warn":
        warnings.warn(msg, RuntimeWarning, stacklevel=2)
    return vec, passes, converged


def _dev(a):
    return getattr(a, "device", None)


# ---------------------------------------------------------------------------
# Fast Walsh-Hadamard transform and HD-products (App. B.2)


def next_power_of_two(d):
    """Smallest power of two >= d (the zero-padded width of the fast couplings)."""
    d = check_int(d, "d", 1)
    return 1 << (d - 1).bit_length()


def fwht(x):
    r"""Orthonormal fast Walsh-Hadamard transform along the last axis, O(p log p).

    Computes :math:`\mathbf H_p x` with :math:`\mathbf H_1 = (1)`,
    :math:`\mathbf H_{2k} = \frac{1}{\sqrt2}\begin{pmatrix}\mathbf H_k&\mathbf H_k\\
    \mathbf H_k&-\mathbf H_k\end{pmatrix}` (App. B.2, natural Sylvester order).

    Notes
    -----
    Radix-16 form of the transform: :math:`\mathbf H_p = \mathbf H_{r_1}\otimes
    \cdots\otimes\mathbf H_{r_t}` with :math:`r_i \le 16`, so the vector is
    viewed as a :math:`r_1\times\cdots\times r_t` tensor and a dense
    :math:`\pm1` matrix of size :math:`r_i` is applied along each axis (a small
    matrix product).  That is :math:`p\sum_i r_i \le 16\,p\log_{16}p` operations,
    O(p log p), in ``ceil(log2(p) / 4)`` vectorised steps instead of
    ``log2(p)`` butterfly stages with short strided inner loops.

    Parameters
    ----------
    x : array (..., p), p a power of two, any backend
    """
    xp = _ns_of(x)
    p = x.shape[-1]
    if p < 1 or p & (p - 1):
        raise ValueError(f"x must have a power-of-two length along the last axis, got {p}")
    if p == 1:
        return x
    k = p.bit_length() - 1
    factors = ([1 << (k % 4)] if k % 4 else []) + [16] * (k // 4)
    lead = tuple(x.shape[:-1])
    nl = len(lead)
    y = xp.reshape(x, lead + tuple(factors))
    for i, r in enumerate(factors):
        h = _hadamard_pm1(r, xp, x.dtype, _dev(x))
        ax = nl + i
        if i == len(factors) - 1:
            y = xp.matmul(y, h)
        else:
            y = xp.moveaxis(xp.matmul(xp.moveaxis(y, ax, -1), h), -1, ax)
    return xp.reshape(y, lead + (p,)) * (1.0 / math.sqrt(p))


def _hadamard_pm1(r, xp, dtype, device):
    """Unnormalised Sylvester Hadamard matrix of size r (a power of two), built on the device:
    entry (i, j) is (-1)^popcount(i AND j)."""
    i = xp.arange(r, device=device)
    both = i[:, None] & i[None, :]
    parity = xp.zeros((r, r), dtype=both.dtype, device=device)
    for bit in range(max(1, r.bit_length() - 1)):
        parity = parity ^ ((both >> bit) & 1)
    return xp.astype(1 - 2 * parity, dtype)


def _hd_apply(x, signs):
    r""":math:`\widetilde{\mathbf R}x = \mathbf H\mathbf D_1\mathbf H\mathbf D_2\mathbf H\mathbf D_3 x`
    along the last axis; ``signs[..., k, :]`` holds :math:`\mathbf D_{k+1}`."""
    y = fwht(x * signs[..., 2, :])
    y = fwht(y * signs[..., 1, :])
    return fwht(y * signs[..., 0, :])


def _hd_rows(signs):
    r"""Rows of :math:`\widetilde{\mathbf R}` for a stack of sign triples (n, 3, p) -> (n, p, p).

    Row i is :math:`(\widetilde{\mathbf R}^\top e_i)^\top =
    (\mathbf D_3\mathbf H\mathbf D_2\mathbf H\mathbf D_1\mathbf H e_i)^\top`.
    """
    xp = _ns_of(signs)
    n, _, p = signs.shape
    m = xp.eye(p, dtype=signs.dtype, device=_dev(signs))
    m = fwht(m)[None, :, :] * signs[:, None, 0, :]
    m = fwht(m) * signs[:, None, 1, :]
    return fwht(m) * signs[:, None, 2, :]


# ---------------------------------------------------------------------------
# Blocks and the public samplers


def _block_rows(coupling, d):
    """Rows per block: d, or the padded power of two of the HD-product couplings (registry record)."""
    return get_coupling(coupling).block_rows(d)


def _draw_blocks(coupling, d, n_blocks, random, route, info):
    """n_blocks independent blocks, shape (n_blocks, b, d), from the coupling's ``blocks`` hook."""
    return hook(coupling, "blocks")(d, n_blocks, random, route, info)


# Registry hooks: one block sampler per coupling (theory.registry)


@register_hook("iid", "blocks")
def _blocks_iid(d, n_blocks, random, route, info):
    return random.normal((n_blocks, d, d))


def chi_norms(d, n_blocks, random):
    """The paper's norm law: (n_blocks, d) i.i.d. chi_d norms."""
    return random.chi(d, (n_blocks, d))


def orthogonal_blocks(norms=chi_norms):
    """The ``blocks`` hook of an orthogonal block D R (R Haar) whose norms come from ``norms(d, n_blocks, random)``.

    A coupling that changes only the law of the norms (each still chi_d,
    independent of the directions) reuses the Haar directions through this.
    """

    def blocks(d, n_blocks, random, route, info):
        nrm = norms(d, n_blocks, random)
        q, s = _haar_rows(random, n_blocks, d, route)
        # Haar R = Q diag(s); its transpose (also Haar) has rows s_i * (column i of Q),
        # so the sign correction folds into the row scaling: one pass.
        return (nrm * s)[:, :, None] * random.xp.matrix_transpose(q)

    return blocks


register_hook("orthogonal", "blocks", orthogonal_blocks())


@register_hook("simplex", "blocks")
def _blocks_simplex(d, n_blocks, random, route, info):
    norms = random.chi(d, (n_blocks, d))
    q, s = _haar_rows(random, n_blocks, d, route)
    return _simplex_rows_signed(q, s, norms)


@register_hook("simplex_plus", "blocks")
def _blocks_simplex_plus(d, n_blocks, random, route, info):
    norms = random.chi(d, (n_blocks, d))
    q, s = _haar_rows(random, n_blocks, d, route)
    vec, passes, converged = simplex_plus_vectors(norms)
    info["passes"], info["converged"] = passes, converged
    return random.xp.matmul(vec, q * s[:, None, :])


def _fast_draw(d, n_blocks, random):
    """Norms (n_blocks, p) and sign triples (n_blocks, 3, p) of an HD-product block."""
    p = next_power_of_two(d)
    signs = random.rademacher((n_blocks, 3, p))
    norms = random.chi(p, (n_blocks, p))
    return norms, signs


def _fast_rows(simplex, norms, signs):
    """Dense rows (n_blocks, p, p) of D S R~ (``simplex``) or D R~."""
    rows = _hd_rows(signs)
    if simplex:
        return _simplex_rows_scaled(rows, norms)
    return norms[:, :, None] * rows


def _fast_blocks(simplex):
    def blocks(d, n_blocks, random, route, info):
        norms, signs = _fast_draw(d, n_blocks, random)
        return _fast_rows(simplex, norms, signs)[:, :, :d]

    return blocks


def _fast_structured(coupling, simplex):
    def structured(d, m, random):
        nb = -(-m // next_power_of_two(d))
        norms, signs = _fast_draw(d, nb, random)
        return RandomProjection(coupling, d, m, random.xp, norms=norms, signs=signs, simplex=simplex)

    return structured


def _setup(coupling, d, m, rng, xp, device, dtype, haar_route):
    coupling = check_coupling(coupling)
    d = check_dimension(d, coupling)
    m = check_int(m, "m", 1)
    xp = namespace(xp)
    dev = resolve_device(xp, device)
    dt = resolve_dtype(xp, dtype)
    route = _check_route(haar_route, xp, dev)
    random = Random(rng, xp, dev, dt)
    return coupling, d, m, random, route


def _weights_batch(coupling, d, m, n, random, route, info):
    """(n, m, d): n independent draws of m rows."""
    xp = random.xp
    b = _block_rows(coupling, d)
    nb = -(-m // b)
    blocks = _draw_blocks(coupling, d, n * nb, random, route, info)
    w = xp.reshape(blocks, (n, nb * b, d))
    return w[:, :m, :] if nb * b != m else w


@renamed_arguments(n="n_draws")
def sample_weights(coupling, d, m, rng=None, xp=None, device=None, *, n_draws=None, dtype=None,
                   haar_route=None, return_info=False):
    r"""Draw the (m, d) random projection matrix of a coupling.

    Parameters
    ----------
    coupling : {'iid', 'orthogonal', 'simplex', 'simplex_plus', 'fast_orthogonal', 'fast_simplex'}
        See the module docstring (Sec. 3 ``simplex_block_eq``, Sec. 3.2, App. B.2).
    d : int
        Data dimensionality (>= 2 for the simplex couplings).
    m : int >= 1
        Number of random features: independent blocks of d rows (p rows for
        the fast couplings), the last one truncated.
    rng : None, int or numpy.random.Generator
        Seed or generator (torch/cupy generators are seeded from it).
    xp : None, 'numpy', 'torch', 'cupy' or module
        Array backend (numpy by default).
    device : optional
        Backend device ('cpu', 'cuda', ...); arrays are drawn there.
    n_draws : int, optional
        Number of independent draws; the result then has shape (n_draws, m, d).
    dtype : optional
        float64 (default) or float32.
    haar_route : {'qr', 'cpu_qr', 'householder'}, optional
        How Haar rotations are drawn (see :func:`haar_orthogonal`).
    return_info : bool
        Also return a dict with ``block_rows``, ``padded_d``, ``haar_route``
        and, for simplex_plus, ``passes`` and ``converged`` (per block).

    Returns
    -------
    W : array (m, d) or (n_draws, m, d)
        Rows :math:`w_i`; for every coupling but the fast ones each row is
        exactly :math:`\mathcal N(0, I_d)`.

    Examples
    --------
    >>> W = sample_weights("simplex", 8, 16, rng=0)
    >>> W.shape
    (16, 8)
    """
    coupling, d, m, random, route = _setup(coupling, d, m, rng, xp, device, dtype, haar_route)
    nn = 1 if n_draws is None else check_int(n_draws, "n_draws", 1)
    info = {"block_rows": _block_rows(coupling, d), "padded_d": _block_rows(coupling, d), "haar_route": route}
    w = _weights_batch(coupling, d, m, nn, random, route, info)
    if n_draws is None:
        w = w[0]
    return (w, info) if return_info else w


class RandomProjection:
    r"""One draw of m random projections :math:`x \mapsto \mathbf W x` of a coupling.

    The exact couplings store the dense (m, d) matrix; the fast couplings
    store only the :math:`\chi_p` norms and the Rademacher diagonals and apply
    :math:`\mathbf D\mathbf S\widetilde{\mathbf R}` to zero-padded inputs with
    the fast Walsh-Hadamard transform in O(p log p) per block and vector.

    Use :func:`sample_projection` to construct one.

    Attributes
    ----------
    coupling, d, m : as drawn
    padded_d : int
        p for the fast couplings, d otherwise.
    """

    def __init__(self, coupling, d, m, xp, weights=None, norms=None, signs=None, info=None, simplex=False):
        self.coupling, self.d, self.m, self.xp = coupling, d, m, xp
        self._simplex = simplex
        self.padded_d = _block_rows(coupling, d)
        self._weights, self._norms, self._signs = weights, norms, signs
        self.info = info or {}

    @property
    def weights(self):
        """Dense (m, d) matrix (materialised on first use for the fast couplings)."""
        if self._weights is None:
            rows = _fast_rows(self._simplex, self._norms, self._signs)
            xp = self.xp
            self._weights = xp.reshape(rows[:, :, : self.d], (-1, self.d))[: self.m]
        return self._weights

    def project(self, x):
        """:math:`X\\mathbf W^\\top` for already validated x of shape (..., d) -> (..., m)."""
        xp = self.xp
        if self._norms is None:
            return xp.matmul(x, xp.matrix_transpose(self._weights))
        p = self.padded_d
        lead = tuple(x.shape[:-1])
        if p != self.d:
            pad = xp.zeros(lead + (p - self.d,), dtype=x.dtype, device=_dev(x))
            x = xp.concat([x, pad], axis=-1)
        x = x[..., None, :]  # (..., 1, p) broadcast over blocks
        y = _hd_apply(x, self._signs)  # (..., B, p)
        if self._simplex:
            y = simplex_apply(y, axis=-1)
        y = y * self._norms
        y = xp.reshape(y, lead + (-1,))
        return y[..., : self.m]

    def __call__(self, X):
        """Validated projection of a batch X (N, d) -> (N, m)."""
        X = check_data(X, self.xp, "X", 2, self.d)
        return self.project(X)

    def __repr__(self):
        return f"RandomProjection(coupling={self.coupling!r}, d={self.d}, m={self.m}, padded_d={self.padded_d})"


def sample_projection(coupling, d, m, rng=None, xp=None, device=None, *, dtype=None, haar_route=None):
    """Draw one :class:`RandomProjection` (same arguments as :func:`sample_weights`).

    For the fast couplings nothing dense is formed: projecting N vectors costs
    O(N m log p) (App. B.2).  For the others this wraps :func:`sample_weights`.
    """
    coupling, d, m, random, route = _setup(coupling, d, m, rng, xp, device, dtype, haar_route)
    if has_hook(coupling, "structured_projection"):
        return hook(coupling, "structured_projection")(d, m, random)
    info = {}
    w = _weights_batch(coupling, d, m, 1, random, route, info)[0]
    return RandomProjection(coupling, d, m, random.xp, weights=w, info=info)


for _name, _simplex in (("fast_orthogonal", False), ("fast_simplex", True)):
    register_hook(_name, "blocks", _fast_blocks(_simplex))
    register_hook(_name, "structured_projection", _fast_structured(_name, _simplex))
