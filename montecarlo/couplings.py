r"""Random projection matrices of the couplings (Secs. 1, 3, 4.3; App. B).

The samplers of ``"iid"``, ``"orthogonal"``, ``"simplex"``, ``"simplex_plus"``, ``"fast_orthogonal"`` and
``"fast_simplex"`` (a coupling defined elsewhere registers its sampler from its own module, e.g.
``"pnc_orthogonal"``, :mod:`montecarlo.pnc`), registered as the hook ``blocks`` of :mod:`theory.registry`.
The block convention, each coupling's construction, and why the QR sign correction matters:
:ref:`guide-montecarlo.couplings` (``docs/guide/sampling.rst``).
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ._backend import Random, backend_name, device_kind, namespace, resolve_device, resolve_dtype, to_numpy
from theory.errors import IterationError
from theory.validation import describe, show_int
from theory.registry import get as get_coupling, has_hook, hook, register as register_hook

from ._checks import (
    ArgumentTypeError,
    _check_finite,
    _kind_error,
    check_bool,
    check_budget,
    check_choice,
    check_coupling,
    check_data,
    check_dimension,
    check_int,
    check_positive_float,
    check_weights,
)

#: Default relative tolerance of the SimRFs+ update: stop when no vector moves
#: by more than ``SIMPLEX_PLUS_TOL * w_i`` during a full pass.
SIMPLEX_PLUS_TOL = 1e-10
#: Passes after which the SimRFs+ update stops (warning by default).
SIMPLEX_PLUS_MAX_PASSES = 1000
#: Smallest SimRFs+ tolerance, in machine epsilons of the norms' dtype.  Below
#: about 8 eps the rounding of the update keeps vectors moving at the fixed
#: point, so every block would run ``max_passes`` passes (measured for d = 2 to
#: 2048 in float32 and float64); 16 eps always converged.
SIMPLEX_PLUS_MIN_TOL_EPS = 16
#: Default tolerance in machine epsilons for a dtype too coarse for
#: :data:`SIMPLEX_PLUS_TOL` (float32: 64 eps = 7.6e-6).
SIMPLEX_PLUS_DEFAULT_TOL_EPS = 64

#: Routes for drawing Haar-random orthogonal matrices.
HAAR_ROUTES = ("qr", "cpu_qr", "householder")
#: Route used per (backend, device kind) when ``haar_route`` is None.  numpy:
#: LAPACK's batched QR.  torch on the CPU: numpy's QR then a copy ('cpu_qr'),
#: measured 30 to 50 times faster than torch.linalg.qr on batches of 64 x 64
#: blocks (0.15 s vs 4.3-7.5 s for 30 x 8 blocks, 2 cores).  CUDA (H200): batched
#: device QR, 58 us per 64 x 64 block in batches of 100 vs 166 us for 'cpu_qr'
#: (which wins only for a few matrices per call; see benchmarks/README.md).
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
    check_budget(d * d, f"the dense d x d simplex matrix (d = {show_int(d)})",
                 "use simplex_apply (Algorithm 1, O(d) per vector) instead of the dense matrix")
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
        Correct wherever it is representable: S is orthogonal, so every entry
        is at most :math:`\|x\|_2` in magnitude, but the sum :math:`\sum_{i<d}x_i`
        can overflow where the result does not (entries near the largest
        float); such x are transformed again scaled down by a power of two
        (exact), and scaled back.

    Raises
    ------
    ValueError
        ``x`` holds NaN or inf entries (one ``isfinite`` pass over x), or is too short along ``axis``,
        or the result itself overflows x's dtype (some :math:`|y_i|` beyond its largest float).
    """
    xp = _array_ns(x, "x")
    axis = check_int(axis, "axis")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis must be in [{-x.ndim}, {x.ndim}) for x of shape {tuple(x.shape)}, got {axis}")
    d = x.shape[axis]
    if d < 2:
        raise ValueError(f"x must have length >= 2 along axis {axis} (the simplex needs d >= 2), got {d}")
    _check_finite(x, xp, "x")
    return _unscaled_or_rescued(lambda t: _simplex_apply(t, axis, xp), x, xp, d.bit_length() + 1,
                                "the simplex rotation S x")


def _unscaled_or_rescued(transform, x, xp, shift, what):
    r"""``transform(x)`` for an orthogonal transform of finite x whose intermediate sums (up to
    :math:`2^{\mathrm{shift}}\max|x|`) may overflow where the result does not: on a non-finite result, the
    transform of :math:`2^{-\mathrm{shift}}x` scaled back by :math:`2^{\mathrm{shift}}` (exact scalings; entries
    below :math:`2^{\mathrm{shift}}` times the smallest normal lose bits, far below the normwise rounding), and
    a ValueError naming x where that overflows too (the result is not representable)."""
    with np.errstate(over="ignore", invalid="ignore"):  # (numpy's warnings: an overflow is handled here)
        y = transform(x)
        if bool(xp.all(xp.isfinite(y))):
            return y
        scale = 2.0 ** shift
        y = transform(x * (1.0 / scale)) * scale
    if not bool(xp.all(xp.isfinite(y))):
        raise ValueError(f"x is too large: {what} has entries beyond the largest {x.dtype} "
                         f"({float(xp.finfo(x.dtype).max):.4g}); scale x down")
    return y


def _simplex_apply(x, axis, xp):
    """Algorithm 1 without the argument checks (the samplers' inner calls)."""
    d = x.shape[axis]
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


def _array_ns(x, name):
    """The namespace of an array argument (numpy, torch, cupy); ArgumentTypeError naming ``name`` otherwise."""
    import array_api_compat

    if isinstance(x, np.ma.MaskedArray) or not array_api_compat.is_array_api_obj(x):
        raise ArgumentTypeError(f"{name} must be an array (numpy, torch or cupy), got {type(x).__name__}")
    xp = array_api_compat.array_namespace(x)
    try:
        real = xp.isdtype(x.dtype, ("real floating", "integral"))
    except (TypeError, ValueError):  # (numpy strings and objects: no array-API dtype)
        real = False
    if not real:
        raise _kind_error(name, x.dtype)
    return xp


# ---------------------------------------------------------------------------
# Haar rotations


def _haar_qr(random, n, d, cpu, cols=None):
    """QR of n Gaussian d x cols matrices (reduced): Q (n, d, cols) and diag(R) (n, cols)."""
    xp = random.xp
    g = random.normal((n, d, d if cols is None else cols))
    if cpu and random.backend != "numpy":
        q, r = np.linalg.qr(to_numpy(g))
        q = xp.asarray(q, device=random.device)
        diag = xp.asarray(np.diagonal(r, axis1=-2, axis2=-1).copy(), device=random.device)
    else:
        q, r = xp.linalg.qr(g)
        diag = xp.linalg.diagonal(r)
    return q, diag


def _haar_householder(random, n, d, cols=None):
    r"""Haar matrices (or their first ``cols`` columns) as products of random Householder reflections.

    :math:`Q = \mathbf H_1\cdots\mathbf H_{d-1}\,\mathrm{diag}(\epsilon)` where
    :math:`\mathbf H_k` reflects :math:`x^{(k)}\sim\mathcal N(0, I_{d-k+1})`
    (acting on coordinates k..d) onto :math:`-\mathrm{sign}(x^{(k)}_1)\|x^{(k)}\|e_k`
    and :math:`\epsilon_k = -\mathrm{sign}(x^{(k)}_1)`, :math:`\epsilon_d = \pm1`:
    exactly the Householder QR of a Gaussian matrix with the sign correction,
    without forming the Gaussian matrix (Stewart 1980).  Column j of Q only
    involves :math:`\mathbf H_1..\mathbf H_j`, so the first c < d columns
    need c reflections and O(d c) memory.  Returns (Q, eps), Q of shape (n, d, cols).
    """
    xp = random.xp
    dt = random.dtype
    c = d if cols is None else cols
    p = xp.zeros((n, d, c), dtype=dt, device=random.device)
    idx = xp.arange(c, device=random.device)
    p[:, idx, idx] = 1.0
    eps = xp.ones((n, c), dtype=dt, device=random.device)
    for k in range(min(c, d - 1) - 1, -1, -1):
        x = random.normal((n, d - k))
        x0 = x[:, 0]
        sgn = _sign(x0)
        nx = xp.linalg.vector_norm(x, axis=-1)
        u = xp.concat([(x0 + sgn * nx)[:, None], x[:, 1:]], axis=-1)
        u = u / xp.sqrt(2.0 * nx * (nx + xp.abs(x0)))[:, None]
        blk = p[:, k:, k:]
        p[:, k:, k:] = blk - 2.0 * u[:, :, None] * xp.matmul(u[:, None, :], blk)
        eps[:, k] = -sgn
    if c == d:
        eps[:, d - 1] = random.rademacher((n,))
    return p, eps


def _haar_columns(random, n, d, cols, route):
    r"""The first ``cols`` columns of n Haar matrices as (Q, signs), Q of shape (n, d, cols).

    The columns are ``Q * signs[:, None, :]``: uniform on the Stiefel manifold
    of orthonormal d x cols frames (the sign-corrected reduced QR of a d x cols
    Gaussian matrix, Mezzadri 2007), in O(d cols^2) time and O(d cols) memory.
    ``cols = d`` gives the full Haar matrix (the same stream as before).
    """
    if route == "householder":
        return _haar_householder(random, n, d, None if cols == d else cols)
    q, diag = _haar_qr(random, n, d, cpu=(route == "cpu_qr"), cols=None if cols == d else cols)
    return q, _sign(diag)


def haar_orthogonal(n, d, rng=None, xp=None, device=None, dtype=None, route=None, *, cols=None):
    r"""n independent Haar-random orthogonal d x d matrices, shape (n, d, d), or their first ``cols`` columns.

    Parameters
    ----------
    n, d : int >= 1
    rng : None, int or numpy.random.Generator
    xp, device, dtype : backend selection (see ``montecarlo._backend``)
    route : {'qr', 'cpu_qr', 'householder'}, optional
        ``'qr'``: batched QR of a Gaussian matrix on the device, columns
        multiplied by the signs of diag(R); ``'cpu_qr'``: the same QR done on
        the CPU and the result transferred to the device (an explicit
        transfer, opt-in); ``'householder'``: a product of d - 1 random
        Householder reflections built with batched matrix products (no
        LAPACK).  Default from :data:`DEFAULT_HAAR_ROUTE`.
    cols : int in [1, d], keyword-only, optional
        Return only the first ``cols`` columns, (n, d, cols): orthonormal frames
        uniform on the Stiefel manifold, in O(d cols^2) time and O(d cols) memory
        (transposed: ``cols`` orthonormal rows distributed as the first rows of
        a Haar matrix).

    Returns
    -------
    array (n, d, d), or (n, d, cols)

    Raises
    ------
    AllocationError
        When n * d * cols exceeds ``montecarlo._checks.MAX_ELEMENTS``.
    """
    n = check_int(n, "n", 1)
    d = check_int(d, "d", 1)
    c = d if cols is None else check_int(cols, "cols", 1, maximum=d)
    check_budget(n * d * c, f"the (n, d, cols) = ({show_int(n)}, {show_int(d)}, {show_int(c)}) Haar frames",
                 "reduce n, d or cols")
    xp = namespace(xp)
    dev = resolve_device(xp, device)
    random = Random(rng, xp, dev, resolve_dtype(xp, dtype))
    route = _check_route(route, xp, dev, "route")
    q, s = _haar_columns(random, n, d, c, route)
    return q * s[:, None, :]


def _check_route(route, xp, device, name="haar_route"):
    if route is None:
        return DEFAULT_HAAR_ROUTE.get((backend_name(xp), device_kind(xp, device)), "qr")
    return check_choice(route, name, HAAR_ROUTES)


# ---------------------------------------------------------------------------
# SimRFs+ (Sec. 3.2)


def simplex_plus_tolerance(dtype):
    """Default SimRFs+ tolerance for norms of ``dtype``: :data:`SIMPLEX_PLUS_TOL`, or
    :data:`SIMPLEX_PLUS_DEFAULT_TOL_EPS` machine epsilons when the dtype cannot resolve it (float32: 7.6e-6).

    Parameters
    ----------
    dtype : a real floating dtype (numpy or torch: float16, float32, float64, ...)

    Raises
    ------
    ArgumentTypeError
        (a TypeError and a ValueError) when ``dtype`` is not a real floating dtype
        (``int``, ``bool``, a complex dtype, ``None``, ...).
    """
    return max(SIMPLEX_PLUS_TOL, SIMPLEX_PLUS_DEFAULT_TOL_EPS * _eps(dtype))


def _eps(dtype, name="dtype"):
    """Machine epsilon of a real floating dtype (numpy or torch); ArgumentTypeError naming ``name`` otherwise."""
    refused = ArgumentTypeError(f"{name} must be a real floating dtype (float16, float32 or float64, numpy or "
                                f"torch), got {describe(dtype)}")
    try:
        import torch

        if isinstance(dtype, torch.dtype):
            if not dtype.is_floating_point:
                raise refused
            return float(torch.finfo(dtype).eps)
    except ImportError:  # pragma: no cover
        pass
    if dtype is None:  # np.dtype(None) would silently mean float64
        raise refused
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise refused from None
    if dt.kind != "f":
        raise refused
    return float(np.finfo(dt).eps)


def simplex_plus_vectors(norms, tol=None, max_passes=SIMPLEX_PLUS_MAX_PASSES, on_unconverged="warn"):
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
        Norms :math:`w_i` of n independent blocks (any backend, float32 or float64).
    tol : float > 0, optional
        Relative tolerance.  Default :func:`simplex_plus_tolerance` of the
        norms' dtype (:data:`SIMPLEX_PLUS_TOL` = 1e-10 in float64, 7.6e-6 in
        float32); at least :data:`SIMPLEX_PLUS_MIN_TOL_EPS` machine epsilons.
    max_passes : int in [1, 2**62]
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

    Raises
    ------
    ValueError
        Bad ``norms`` (not 2-D, d < 2, not finite or not > 0), ``tol`` below
        the dtype's resolution, bad ``max_passes`` or ``on_unconverged``.
    ConvergenceError
        With ``on_unconverged='raise'``, when a block is still moving after
        ``max_passes`` passes.

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
    xp = check_weights(norms, "norms", "(n, d)", projection=False, min_cols=2)
    max_passes = check_int(max_passes, "max_passes", 1, maximum=2**62)
    check_choice(on_unconverged, "on_unconverged", ("warn", "raise", "ignore"))
    n, d = norms.shape
    if not bool(xp.all(norms > 0)):
        raise ValueError("norms must be > 0")
    floor = SIMPLEX_PLUS_MIN_TOL_EPS * _eps(norms.dtype)
    if tol is None:
        tol = simplex_plus_tolerance(norms.dtype)
    tol = check_positive_float(tol, "tol")
    if tol < floor:
        raise ValueError(f"tol must be >= {floor:.3g} ({SIMPLEX_PLUS_MIN_TOL_EPS} machine epsilons) for {norms.dtype} "
                         f"norms: rounding keeps the vectors moving below that, got {tol!r}")
    check_budget(n * d * d, f"the SimRFs+ update of (n, d) = ({show_int(n)}, {show_int(d)}) norms (n d x d blocks)",
                 "reduce n or d")
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
        if p == max_passes and va is not vec:  # va is vec itself while no block has finished
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
           f"after {max_passes} passes (norms near the polygon inequality 2 max w_i = sum w_i, where the "
           "passes grow without bound); raise max_passes or tol")
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

    Returns
    -------
    array of the same shape
        Correct wherever it is representable: every entry is at most
        :math:`\|x\|_2` in magnitude, but the unnormalised sums of the
        radix-16 steps (up to :math:`p\max|x|`) can overflow where the result
        does not (entries near the largest float); such x are transformed again
        scaled down by :math:`2^{-\log_2 p}` (exact) and scaled back.

    Raises
    ------
    ValueError
        ``x`` holds NaN or inf entries (one ``isfinite`` pass over x), or its
        last axis is not a power of two, or the transform itself overflows x's
        dtype (some :math:`|(\mathbf H_px)_i|` beyond its largest float, e.g.
        ``np.full(8, 1e308)``, whose first entry is :math:`\sqrt8\cdot10^{308}`).
    """
    xp = _array_ns(x, "x")
    if x.ndim < 1:
        raise ValueError(f"x must have at least one axis, got shape {tuple(x.shape)}")
    p = x.shape[-1]
    if p < 1 or p & (p - 1):
        raise ValueError(f"x must have a power-of-two length along the last axis, got {p}")
    _check_finite(x, xp, "x")
    return _unscaled_or_rescued(lambda t: _fwht(t, xp), x, xp, p.bit_length() - 1,
                                "the Walsh-Hadamard transform H x")


def _fwht(x, xp):
    """:func:`fwht` without the argument checks (the HD-products' inner calls, on arrays they built)."""
    p = x.shape[-1]
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
    xp = _ns_of(x)
    y = _fwht(x * signs[..., 2, :], xp)
    y = _fwht(y * signs[..., 1, :], xp)
    return _fwht(y * signs[..., 0, :], xp)


def _hd_rows(signs, basis=None):
    r"""Rows of :math:`\widetilde{\mathbf R}` for a stack of sign triples (n, 3, p) -> (n, p, p).

    Row i is :math:`(\widetilde{\mathbf R}^\top e_i)^\top =
    (\mathbf D_3\mathbf H\mathbf D_2\mathbf H\mathbf D_1\mathbf H e_i)^\top`.
    With ``basis`` (k, p), row i is :math:`(\widetilde{\mathbf R}^\top b_i)^\top`
    for the rows :math:`b_i` of ``basis`` instead (shape (n, k, p)).
    """
    xp = _ns_of(signs)
    n, _, p = signs.shape
    m = xp.eye(p, dtype=signs.dtype, device=_dev(signs)) if basis is None else basis
    m = _fwht(m, xp)[None, :, :] * signs[:, None, 0, :]
    m = _fwht(m, xp) * signs[:, None, 1, :]
    return _fwht(m, xp) * signs[:, None, 2, :]


# ---------------------------------------------------------------------------
# Blocks and the public samplers


def _block_rows(coupling, d):
    """Rows per block: d, or the padded power of two of the HD-product couplings (registry record)."""
    return get_coupling(coupling).block_rows(d)


def _draw_blocks(coupling, d, n_blocks, random, route, info):
    """n_blocks independent blocks, shape (n_blocks, b, d), from the coupling's ``blocks`` hook."""
    return hook(coupling, "blocks")(d, n_blocks, random, route, info)


# Registry hooks: one block sampler per coupling (theory.registry).
#
# ``blocks(d, n_blocks, random, route, info)`` returns (n_blocks, b, d).  When
# only the first r < b rows of each block are needed (the truncated last block
# of footnote 1, and every block when m < d), the caller sets ``info["rows"] = r``;
# a hook may then return just those rows, (n_blocks, r, d), drawn in O(r d)
# memory instead of O(d^2) (the first r rows of a Haar matrix come from the QR
# of a d x r Gaussian, see :func:`_haar_columns`).  A hook that ignores the key
# returns full blocks and the caller keeps their first r rows: always correct.


def _rows(info, b):
    return int(info.get("rows", b))


@register_hook("iid", "blocks")
def _blocks_iid(d, n_blocks, random, route, info):
    return random.normal((n_blocks, _rows(info, d), d))


def chi_norms(d, n_blocks, random):
    """The paper's norm law: (n_blocks, d) i.i.d. chi_d norms."""
    return random.chi(d, (n_blocks, d))


def orthogonal_blocks(norms=chi_norms):
    """The ``blocks`` hook of an orthogonal block D R (R Haar) whose norms come from ``norms(d, n_blocks, random)``.

    A coupling that changes only the law of the norms (each still chi_d,
    independent of the directions) reuses the Haar directions through this.
    Honours ``info["rows"]`` (all d norms of a block are drawn, so coupled
    norm laws stay right, and the first r are kept).
    """

    def blocks(d, n_blocks, random, route, info):
        r = _rows(info, d)
        nrm = norms(d, n_blocks, random)
        if r != d:
            nrm = nrm[:, :r]
        q, s = _haar_columns(random, n_blocks, d, r, route)
        # Haar R = Q diag(s); its transpose (also Haar) has rows s_i * (column i of Q),
        # so the sign correction folds into the row scaling: one pass.
        return (nrm * s)[:, :, None] * random.xp.matrix_transpose(q)

    return blocks


register_hook("orthogonal", "blocks", orthogonal_blocks())


@register_hook("simplex", "blocks")
def _blocks_simplex(d, n_blocks, random, route, info):
    r"""Rows of D S R; the first r < d rows as :math:`\mathbf D_r\mathbf C\mathbf V`.

    :math:`\mathbf V` (r x d) has orthonormal rows uniform on the Stiefel
    manifold (distributed as the first r rows of a Haar matrix) and
    :math:`\mathbf C = \sqrt{d/(d-1)}\,(I - (1 - \sqrt{(d-r)/d})\,\mathbf 1\mathbf 1^\top/r)`
    is the symmetric square root of the Gram matrix
    :math:`\mathbf S_r\mathbf S_r^\top = \frac{d}{d-1}I - \frac{1}{d-1}\mathbf 1\mathbf 1^\top`
    of the first r simplex vectors.  Since :math:`\mathbf S_r = \mathbf C\mathbf B^\top` with
    :math:`\mathbf B^\top = \mathbf C^{-1}\mathbf S_r` orthonormal (C is invertible for r < d),
    :math:`\mathbf S_r\mathbf R = \mathbf C(\mathbf B^\top\mathbf R) \overset{d}{=} \mathbf C\mathbf V`.
    O(d r^2) per block instead of O(d^3).
    """
    r = _rows(info, d)
    norms = random.chi(d, (n_blocks, d))
    q, s = _haar_columns(random, n_blocks, d, r, route)
    if r == d:
        return _simplex_rows_signed(q, s, norms)
    return simplex_first_rows(random.xp.matrix_transpose(q * s[:, None, :]), norms[:, :r], d, random.xp)


def simplex_first_rows(v, norms, d, xp):
    r"""The first r < d rows of :math:`\mathbf D\mathbf S\mathbf R`, (n, r, d), from r orthonormal
    rows :math:`\mathbf V` (n, r, d) distributed as the first rows of a Haar matrix and the
    norms (n, r) of those rows: :math:`\mathbf D_r\mathbf C\mathbf V` (the simplex ``blocks``
    hook above has the proof).  ``xp``: the array namespace of ``v``."""
    r = v.shape[-2]
    shrink = 1.0 - math.sqrt((d - r) / d)
    out = v - shrink * xp.mean(v, axis=1, keepdims=True)
    out *= (math.sqrt(d / (d - 1)) * norms)[:, :, None]
    return out


@register_hook("simplex_plus", "blocks")
def _blocks_simplex_plus(d, n_blocks, random, route, info):
    r"""Rows of D S' R; the first r < d rows as :math:`\mathbf T^\top\mathbf V`.

    The update needs every vector of a block (O(d^2) memory per block: the
    budget is checked); the rotation of the first r vectors
    :math:`\mathbf S'_r = \mathbf T^\top\mathbf B^\top` (reduced QR of
    :math:`\mathbf S_r'^\top`) is :math:`\mathbf T^\top(\mathbf B^\top\mathbf R)`, and
    :math:`\mathbf B^\top\mathbf R` is uniform on the Stiefel manifold given the norms.
    """
    r = _rows(info, d)
    check_budget(n_blocks * d * d, f"{show_int(n_blocks)} SimRFs+ blocks of d x d = {show_int(d)} x {show_int(d)} "
                 "vectors", "reduce n_draws, m or d (the SimRFs+ update needs all d vectors of a block)")
    norms = random.chi(d, (n_blocks, d))
    q, s = _haar_columns(random, n_blocks, d, r, route)
    vec, passes, converged = simplex_plus_vectors(norms)
    info["passes"], info["converged"] = passes, converged
    xp = random.xp
    if r == d:
        return xp.matmul(vec, q * s[:, None, :])
    _, t = xp.linalg.qr(xp.matrix_transpose(vec[:, :r, :]))
    return xp.matmul(xp.matrix_transpose(t), xp.matrix_transpose(q * s[:, None, :]))


def _fast_draw(d, n_blocks, random):
    """Norms (n_blocks, p) and sign triples (n_blocks, 3, p) of an HD-product block."""
    p = next_power_of_two(d)
    signs = random.rademacher((n_blocks, 3, p))
    norms = random.chi(p, (n_blocks, p))
    return norms, signs


def _fast_rows(simplex, norms, signs, rows=None):
    """Dense rows (n_blocks, p, p) of D S R~ (``simplex``) or D R~; only the first ``rows`` rows if given.

    The first r rows need the HD-product of e_1..e_r (and, for the simplex,
    of (1, ..., 1, 0), which gives the sum over rows of Algorithm 1): O(r p)
    memory and O(r p log p) time per block.
    """
    p = signs.shape[-1]
    if rows is None or rows == p:
        full = _hd_rows(signs)
        if simplex:
            return _simplex_rows_scaled(full, norms)
        return norms[:, :, None] * full
    xp = _ns_of(signs)
    basis = xp.zeros((rows, p), dtype=signs.dtype, device=_dev(signs))
    idx = xp.arange(rows, device=_dev(signs))
    basis[idx, idx] = 1.0
    if simplex:
        tail = xp.ones((1, p), dtype=signs.dtype, device=_dev(signs))
        tail[0, p - 1] = 0.0
        basis = xp.concat([basis, tail], axis=0)
    x = _hd_rows(signs, basis)
    if not simplex:
        return norms[:, :rows, None] * x
    yd = x[:, rows:, :] * (1 / math.sqrt(p - 1))
    out = math.sqrt(p / (p - 1)) * x[:, :rows, :] - ((math.sqrt(p) + 1) / (p - 1)) * yd
    out *= norms[:, :rows, None]
    return out


def _fast_blocks(simplex):
    def blocks(d, n_blocks, random, route, info):
        norms, signs = _fast_draw(d, n_blocks, random)
        r = _rows(info, norms.shape[1])
        return _fast_rows(simplex, norms, signs, r)[:, :, :d]

    return blocks


def _fast_sq_norms(simplex, norms, signs, d):
    r"""Squared norms of the rows of :math:`\mathbf D\mathbf S\widetilde{\mathbf R}` (``simplex``) or
    :math:`\mathbf D\widetilde{\mathbf R}` restricted to their first ``d`` columns, shape (n_blocks, p).

    The projection pads its inputs with zeros from d to p, so a projection vector is the first d entries of a
    row: :math:`\|w_i\|^2 = D_i^2 \sum_{j<d} M_{ij}^2` for the orthonormal M.  Since M's rows are unit vectors,
    the sum is one minus the squares of the columns :math:`M e_j`, j >= d (p - d < d of them: p is the least
    power of two >= d), each an HD-product of a basis vector: O((p - d) p log p) per block, one block's worth
    of memory at a time.  ``norms`` (n_blocks, p) are the drawn :math:`\chi_p` norms D."""
    xp = _ns_of(signs)
    p = signs.shape[-1]
    sq = norms * norms
    if p == d:
        return sq
    tail = xp.zeros(sq.shape, dtype=sq.dtype, device=_dev(signs))
    for j in range(d, p):
        e = xp.zeros((p,), dtype=signs.dtype, device=_dev(signs))
        e[j] = 1.0
        col = _hd_apply(e[None, :], signs)  # (n_blocks, p): column j of each block's M
        if simplex:
            col = _simplex_apply(col, -1, xp)
        tail = tail + col * col
    return sq * xp.clip(1.0 - tail, 0.0, None)


def _fast_structured(coupling, simplex):
    def structured(d, m, random):
        # drawn as _weights_batch draws one draw (full blocks, then a truncated last block in a
        # second call), so that sample_projection(...).weights equals sample_weights(...) for a seed
        p = next_power_of_two(d)
        nb = -(-m // p)
        check_budget(4 * nb * p, f"the chi_p norms and 3 Rademacher diagonals of {show_int(nb)} blocks of "
                     f"p = {show_int(p)} (m = {show_int(m)}, d = {show_int(d)}) of a {coupling!r} projection",
                     "reduce m or d")
        if m % p and nb > 1:
            n1, s1 = _fast_draw(d, nb - 1, random)
            n2, s2 = _fast_draw(d, 1, random)
            norms, signs = random.xp.concat([n1, n2], axis=0), random.xp.concat([s1, s2], axis=0)
        else:
            norms, signs = _fast_draw(d, nb, random)
        return RandomProjection(coupling, d, m, random.xp, norms=norms, signs=signs, simplex=simplex)

    return structured


class FastCouplingBiasWarning(UserWarning):
    """A fast (HD-product) coupling chosen at a dimension where its kernel bias is measurable."""


#: Largest d at which a kernel bias of the fast couplings was resolved (``|z| > 4`` with 2e5 draws, m = d;
#: table in :func:`sample_weights`); choosing one at d <= this warns (:class:`FastCouplingBiasWarning`).
FAST_BIAS_RESOLVED_D = 16


def _warn_if_biased(coupling, d):
    """Warn when a fast coupling is used at d <= :data:`FAST_BIAS_RESOLVED_D` (its kernel bias is measurable)."""
    if get_coupling(coupling).block == "pow2" and d <= FAST_BIAS_RESOLVED_D:
        warnings.warn(f"coupling {coupling!r} at d = {d} <= {FAST_BIAS_RESOLVED_D}: its rows are not Gaussian and "
                      "its kernel estimates are measurably biased (up to 32% for PRFs at d = 2, 2-4% for RFFs at "
                      "d = 16; table in montecarlo.sample_weights' docstring); use 'orthogonal' or 'simplex' for "
                      "unbiased estimates", FastCouplingBiasWarning, stacklevel=_caller_level())


def _caller_level():
    """``stacklevel`` of the first frame outside the toolkit's packages and scikit-learn (so a warning points at
    user code, also through the scikit-learn transformers, their ``fit`` wrapper and pipelines)."""
    import sys

    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] in ("montecarlo", "theory",
                                                                                      "sklearn"):
        frame, level = frame.f_back, level + 1
    return level


def _setup(coupling, d, m, rng, xp, device, dtype, haar_route):
    coupling = check_coupling(coupling)
    d = check_dimension(d, coupling)
    m = check_int(m, "m", 1)
    xp = namespace(xp)
    dev = resolve_device(xp, device)
    dt = resolve_dtype(xp, dtype)
    route = _check_route(haar_route, xp, dev)
    random = Random(rng, xp, dev, dt)
    _warn_if_biased(coupling, d)
    return coupling, d, m, random, route


def _weights_batch(coupling, d, m, n, random, route, info):
    """(n, m, d): n independent draws of m rows, in O(n m max(d, b)) memory.

    Full blocks come from one ``blocks`` call; the truncated last block of
    each draw (r = m - (nb - 1) b rows) from a second call with
    ``info["rows"] = r``.  ``info`` receives the hooks' per-block outputs
    (SimRFs+ ``passes``, ``converged``) in draw-major block order.
    """
    xp = random.xp
    b = _block_rows(coupling, d)
    nb = -(-m // b)
    r = m - (nb - 1) * b
    check_budget(n * m * max(b, d), f"{show_int(n)} draws of the (m, d) = ({show_int(m)}, {show_int(d)}) weights of "
                 f"the {coupling!r} coupling" + (f" (blocks of {show_int(b)} rows)" if b != d else ""),
                 "reduce n_draws, m or d")
    if r == b:
        blocks = _draw_blocks(coupling, d, n * nb, random, route, info)
        return xp.reshape(blocks, (n, nb * b, d))
    parts, infos = [], []
    if nb > 1:
        full_info = {}
        full = _draw_blocks(coupling, d, n * (nb - 1), random, route, full_info)
        parts.append(xp.reshape(full, (n, (nb - 1) * b, d)))
        infos.append((full_info, nb - 1))
    last_info = {"rows": r}
    last = _draw_blocks(coupling, d, n, random, route, last_info)
    parts.append(last[:, :r, :] if last.shape[1] != r else last)
    infos.append((last_info, 1))
    for key in ("passes", "converged"):
        if all(key in i for i, _ in infos):
            info[key] = xp.reshape(xp.concat([xp.reshape(i[key], (n, k)) for i, k in infos], axis=1), (-1,))
    return xp.concat(parts, axis=1) if len(parts) > 1 else parts[0]


def sample_weights(coupling, d, m, rng=None, xp=None, device=None, *, n_draws=None, dtype=None,
                   haar_route=None, return_info=False):
    r"""Draw the (m, d) random projection matrix of a coupling.

    Parameters
    ----------
    coupling : str
        A coupling of the registry, ``theory.registry.names()`` (also
        :data:`montecarlo.COUPLINGS`): 'iid', 'orthogonal', 'simplex', ... (see
        :ref:`guide-montecarlo.couplings`: Sec. 3 ``simplex_block_eq``, Sec. 3.2, App. B.2).
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

    Raises
    ------
    ValueError
        (or :class:`~theory.validation.ArgumentTypeError`, also a TypeError)
        naming the bad argument; :class:`~montecarlo._checks.AllocationError`
        when n_draws * m * d (or a SimRFs+ update's n d^2) exceeds
        ``montecarlo._checks.MAX_ELEMENTS``.

    Warns
    -----
    FastCouplingBiasWarning
        For ``'fast_orthogonal'`` and ``'fast_simplex'`` at d <=
        :data:`FAST_BIAS_RESOLVED_D` (16), where their bias is measurable.

    Notes
    -----
    Memory and time: O(n_draws m max(d, b)) memory (b rows per block); with
    m < d only the first m rows of the block are drawn (the first m rows of a
    Haar matrix from the QR of a d x m Gaussian, O(d m^2) time), never a
    d x d block.  The SimRFs+ update alone needs all d vectors of a block.

    **The fast couplings are biased** (App. B.2): their rows are not exactly
    :math:`\mathcal N(0, I_d)`, so kernel estimates are biased by an amount
    that shrinks with d.  Measured with m = d (``python -m
    benchmarks.bench_montecarlo --only bias``: largest KS distance of row
    projections from N(0, 1) over 12 row/direction pairs with 1e5 blocks,
    and the worst relative kernel bias over x + y or x - y of norm 1 and 2
    along e_1 and the diagonal, 2e5 draws, with its z-score):

    ====  =======  ==============  ==============  =======  ==============  ==============
    d     KS (fo)  PRF bias (fo)   RFF bias (fo)   KS (fs)  PRF bias (fs)   RFF bias (fs)
    ====  =======  ==============  ==============  =======  ==============  ==============
    2     0.25     -32% (-115)     +166% (+325)    0.25     -32% (-125)     -156% (-213)
    4     0.14     +28% (+10)      -102% (-136)    0.060    +4.6% (+6.5)    -18% (-25)
    8     0.14     -3.5% (-7.2)    -23% (-38)      0.057    -0.12% (-1.9)   -11% (-22)
    16    0.075    -1.4% (-3.8)    -3.8% (-12)     0.024    -0.06% (-1.4)   -2.3% (-7.9)
    32    0.040    -0.6% (-2.3)    -0.5% (-2.7)    0.010    -0.05% (-2.1)   +0.01% (+1.1)
    64    0.022    -0.35% (-2.0)   -0.02% (-2.7)   0.0063   -0.35% (-2.1)   -0.02% (-2.5)
    ====  =======  ==============  ==============  =======  ==============  ==============

    (fo: ``'fast_orthogonal'``, fs: ``'fast_simplex'``; z-scores in brackets.)
    The exact orthogonal coupling under the same test: KS 0.003-0.005, all
    z-scores within +-2.6.  So the bias is resolved for d <= 16 (a
    :class:`FastCouplingBiasWarning` there) and not at d = 32 and 64 with
    2e5 draws (relative standard errors about 1e-3), although the rows stay
    measurably non-Gaussian in KS distance (fast_orthogonal 0.022 at d = 64).
    Use ``'orthogonal'`` or ``'simplex'`` (exact) when the bias matters.

    Examples
    --------
    >>> W = sample_weights("simplex", 8, 16, rng=0)
    >>> W.shape
    (16, 8)
    """
    coupling, d, m, random, route = _setup(coupling, d, m, rng, xp, device, dtype, haar_route)
    nn = 1 if n_draws is None else check_int(n_draws, "n_draws", 1)
    return_info = check_bool(return_info, "return_info")
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
            xp, p, d, m = self.xp, self.padded_d, self.d, self.m
            nb = self._norms.shape[0]
            r = m - (nb - 1) * p  # rows of the last (truncated) block
            check_budget(m * p, f"the dense (m, d) = ({m}, {d}) weights of a {self.coupling!r} projection",
                         "project with the RandomProjection itself (no dense matrix)")
            parts = []
            if nb > 1:
                full = _fast_rows(self._simplex, self._norms[: nb - 1], self._signs[: nb - 1])
                parts.append(xp.reshape(full[:, :, :d], (-1, d)))
            last = _fast_rows(self._simplex, self._norms[nb - 1:], self._signs[nb - 1:], r)
            parts.append(xp.reshape(last[:, :, :d], (-1, d)))
            self._weights = xp.concat(parts, axis=0) if len(parts) > 1 else parts[0]
        return self._weights

    def project(self, x):
        """:math:`X\\mathbf W^\\top` for already validated x of shape (..., d) -> (..., m)."""
        xp = self.xp
        if self._norms is None:
            return xp.matmul(x, xp.matrix_transpose(self._weights))
        p = self.padded_d
        lead = tuple(x.shape[:-1])
        check_budget(math.prod(lead) * self._norms.shape[0] * p,
                     f"the HD-products of {math.prod(lead)} vectors with {self._norms.shape[0]} blocks of p = {p}",
                     "project fewer vectors at a time")
        if p != self.d:
            pad = xp.zeros(lead + (p - self.d,), dtype=x.dtype, device=_dev(x))
            x = xp.concat([x, pad], axis=-1)
        x = x[..., None, :]  # (..., 1, p) broadcast over blocks
        y = _hd_apply(x, self._signs)  # (..., B, p)
        if self._simplex:
            y = _simplex_apply(y, -1, xp)
        y = y * self._norms
        y = xp.reshape(y, lead + (-1,))
        return y[..., : self.m]

    def row_sq_norms(self):
        """Squared norms of the m projection vectors (the rows of :attr:`weights`), shape (m,), without forming
        the dense matrix for the fast couplings (their rows restricted to the first d of p columns)."""
        xp = self.xp
        if self._weights is not None:
            return xp.sum(self._weights * self._weights, axis=1)
        sq = _fast_sq_norms(self._simplex, self._norms, self._signs, self.d)
        return xp.reshape(sq, (-1,))[: self.m]

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
