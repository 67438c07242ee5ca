r"""Monte Carlo estimators with standard errors (Thm 3.2, eq. ``def_rf_conformity``, Sec. 5).

Every estimator averages a per-draw statistic over ``n_draws`` independent
draws of the m random features and returns an :class:`Estimate` (mean,
standard error = sample standard deviation / sqrt(n), n).  Draws are
processed in chunks of a size fixed by the problem shape (bounded memory,
reproducible from ``rng`` whatever ``n_draws`` is), with the per-chunk
moments merged exactly (Chan et al.'s parallel update) on the array backend;
only the final numbers leave the device.

Pointwise statistics depend on the features only through the projections
:math:`w_i^\top v` of one vector v (:math:`v = x + y` for PRFs,
:math:`z = x - y` for RFFs), which :func:`pair_projections` draws in one
of two ways:

``path="full"``
    draw the (m, d) matrices (QR per block, O(d^3)) and multiply.
``path="fast"`` (default)
    by isotropy, for a block :math:`\mathbf D\mathbf S\mathbf R` with
    :math:`\mathbf R` Haar, :math:`\mathbf R v \overset{d}{=} \|v\|u` with
    :math:`u` uniform on the sphere, so :math:`\mathbf W v \overset{d}{=}
    \|v\|\mathbf D\mathbf S u`: d normals, d :math:`\chi_d` norms and
    Algorithm 1, O(d) per block (ORFs: :math:`\|v\|\mathbf D u`; IIDRFs:
    :math:`\|v\|` times m normals; SimRFs+: :math:`\|v\|\mathbf D\mathbf S'u`
    with the update of Sec. 3.2, O(d^2) per pass).  The fast couplings are
    not isotropic; for them the "fast" path applies the HD-product to v
    itself (O(p log p) per block), which is exact for that coupling.
"""

from __future__ import annotations

import math
import numbers
import sys
import time
import warnings
from dataclasses import dataclass

import array_api_compat
import numpy as np

from ._backend import Random, exp_inplace, namespace, resolve_device, resolve_dtype, to_numpy
from theory.registry import has_hook, hook, register as register_hook
from theory.validation import describe, renamed_arguments

from ._checks import (
    ArgumentTypeError,
    check_budget,
    check_choice,
    check_coupling,
    check_data,
    check_dimension,
    check_int,
    check_kernel,
    check_progress,
)
from .couplings import (
    _block_rows,
    _warn_if_biased,
    chi_norms,
    _check_route,
    _hd_apply,
    _weights_batch,
    next_power_of_two,
    simplex_apply,
    simplex_plus_vectors,
)

PATHS = ("auto", "fast", "full")
#: Target number of float entries of the largest per-chunk intermediate.
CHUNK_ELEMENTS = 1 << 21


@dataclass(frozen=True)
class Estimate:
    """A Monte Carlo mean with its standard error.

    Attributes
    ----------
    mean : float or array
    stderr : float or array
        Sample standard deviation / sqrt(n) (ddof = 1).
    n : int
        Number of independent draws.
    """

    mean: object
    stderr: object
    n: int

    def z(self, expected):
        """Standardised deviation ``(mean - expected) / stderr``."""
        return (self.mean - expected) / self.stderr

    def __repr__(self):
        if isinstance(self.mean, float):
            return f"Estimate(mean={self.mean:.6g}, stderr={self.stderr:.3g}, n={self.n})"
        return f"Estimate(mean=<array {tuple(self.mean.shape)}>, stderr=<array>, n={self.n})"


class _Moments:
    """Running count, mean and sum of squared deviations (Chan et al. 1979 merge)."""

    def __init__(self):
        self.n = 0
        self.mean = None
        self.m2 = None

    def add(self, xp, samples):
        """Merge a chunk of samples (axis 0 indexes draws)."""
        k = samples.shape[0]
        cm = xp.mean(samples, axis=0)
        cm2 = xp.sum((samples - cm) ** 2, axis=0)
        if self.n == 0:
            self.n, self.mean, self.m2 = k, cm, cm2
            return
        n = self.n + k
        delta = cm - self.mean
        self.mean = self.mean + delta * (k / n)
        self.m2 = self.m2 + cm2 + delta * delta * (self.n * k / n)
        self.n = n

    def result(self, xp, scalar):
        if self.n < 2:
            raise ValueError(f"n_draws must be an integer >= 2 (a standard error needs two draws), got {self.n}")
        var = self.m2 / (self.n - 1)
        se = xp.sqrt(var / self.n)
        if scalar:
            return Estimate(float(self.mean), float(se), self.n)
        return Estimate(self.mean, se, self.n)


class _Progress:
    """Minimal text progress bar on stderr (or a user callback ``f(done, total)``)."""

    def __init__(self, progress, total, label):
        progress = check_progress(progress)
        self.cb = progress if callable(progress) else None
        self.on = bool(progress)
        self.total, self.label = total, label
        self.t0 = time.perf_counter()
        self.last = 0.0

    def update(self, done):
        if not self.on:
            return
        if self.cb is not None:
            self.cb(done, self.total)
            return
        now = time.perf_counter()
        if done < self.total and now - self.last < 0.5:
            return
        self.last = now
        frac = done / self.total
        bar = "#" * int(30 * frac)
        el = now - self.t0
        eta = el / frac - el if frac > 0 else float("nan")
        sys.stderr.write(f"\r{self.label} [{bar:<30}] {done}/{self.total} {el:.0f}s eta {eta:.0f}s")
        if done >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _chunks(total, size):
    done = 0
    while done < total:
        k = min(size, total - done)
        yield k
        done += k


# ---------------------------------------------------------------------------
# Projections of one vector


def _setup(coupling, d, rng, xp, device, dtype, haar_route, path):
    coupling = check_coupling(coupling)
    d = check_dimension(d, coupling)
    path = check_choice(path, "path", PATHS)
    xp = namespace(xp)
    dev = resolve_device(xp, device)
    dt = resolve_dtype(xp, dtype)
    route = _check_route(haar_route, xp, dev)
    random = Random(rng, xp, dev, dt)
    _warn_if_biased(coupling, d)
    return coupling, d, random, route, ("fast" if path == "auto" else path)


def _is_norm(v):
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))


def _as_vector(v, d, random, name):
    """A length-d vector from a vector or a norm (a norm is placed along e_1)."""
    xp = random.xp
    if _is_norm(v):
        if not math.isfinite(float(v)) or v < 0:
            raise ValueError(f"{name} must be a finite norm >= 0 or a length-{d} vector, got {describe(v)}")
        out = xp.zeros((d,), dtype=random.dtype, device=random.device)
        out[0] = float(v)
        return out
    return check_data(v, xp, name, 1, d, device=random.device, dtype=random.dtype)


def _vector_dimension(v, name="v"):
    """d of a vector argument given without ``d`` (a norm needs ``d``)."""
    if _is_norm(v):
        raise ValueError(f"d is required when {name} is given as a norm ({describe(v)}): pass d=... or a "
                         f"length-d vector")
    shape = getattr(v, "shape", None)
    if shape is None:
        shape = check_data(v, namespace("numpy"), name, 1).shape
    if len(shape) != 1:
        raise ValueError(f"{name} must be a norm >= 0 or a 1-D vector of shape (d,), got shape {tuple(shape)}")
    return int(shape[0])


def _project_chunk(coupling, d, m, vec, k, random, route, path):
    """(k, m) projections w_i . vec for k independent draws.

    ``path="fast"`` uses the coupling's ``projections`` hook (registry); a
    coupling without one takes the full path (draw the blocks, multiply),
    which is correct for every coupling.
    """
    if path == "full" or not has_hook(coupling, "projections"):
        w = _weights_batch(coupling, d, m, k, random, route, {})
        return random.xp.matmul(w, vec)
    return hook(coupling, "projections")(vec, d, m, k, random)


def _blockwise(y, k, m):
    """(k * nb, b) block projections -> (k, m): consecutive blocks of a draw, the last truncated."""
    xp = array_api_compat.array_namespace(y)
    y = xp.reshape(y, (k, -1))
    return y[:, :m] if y.shape[1] != m else y


@register_hook("iid", "projections")
def _projections_iid(vec, d, m, k, random):
    return random.normal((k, m)) * random.xp.linalg.vector_norm(vec)


def _isotropic_directions(vec, d, n_blocks, random):
    """u uniform on the sphere, (n_blocks, d), and the factor |v| / |u| (isotropy: R v = |v| u)."""
    xp = random.xp
    y = random.normal((n_blocks, d))
    scale = xp.linalg.vector_norm(vec) / xp.linalg.vector_norm(y, axis=-1)
    return y, scale


def isotropic_projections(simplex, norms=None):
    """The ``projections`` hook ``W v = |v| D u`` (ORFs) or ``|v| D S u`` (SimRFs), u uniform on the sphere.

    ``norms(d, n_blocks, random)`` draws the (n_blocks, d) norms (default
    i.i.d. chi_d); computed in place (this is the hot loop).
    """
    draw_norms = chi_norms if norms is None else norms

    def projections(vec, d, m, k, random):
        nb = -(-m // d)
        y, scale = _isotropic_directions(vec, d, k * nb, random)
        norms = draw_norms(d, k * nb, random)
        if simplex:
            _simplex_apply_rows_(y)
        norms *= scale[:, None]
        y *= norms
        return _blockwise(y, k, m)

    return projections


register_hook("orthogonal", "projections", isotropic_projections(simplex=False))
register_hook("simplex", "projections", isotropic_projections(simplex=True))


@register_hook("simplex_plus", "projections")
def _projections_simplex_plus(vec, d, m, k, random):
    """W v = |v| D S' u: the SimRFs+ vectors for the drawn norms applied to u uniform on the sphere."""
    xp = random.xp
    nb = -(-m // d)
    y, scale = _isotropic_directions(vec, d, k * nb, random)
    norms = random.chi(d, (k * nb, d))
    vecs, _, _ = simplex_plus_vectors(norms)
    y = xp.matmul(vecs, y[:, :, None])[:, :, 0]
    y *= scale[:, None]
    return _blockwise(y, k, m)


def _fast_projections(simplex):
    """The HD-product applied to v itself (the fast couplings are not isotropic), O(p log p) per block."""

    def projections(vec, d, m, k, random):
        xp = random.xp
        p = next_power_of_two(d)
        nb = -(-m // p)
        signs = random.rademacher((k * nb, 3, p))
        norms = random.chi(p, (k * nb, p))
        vp = vec if p == d else xp.concat([vec, xp.zeros((p - d,), dtype=vec.dtype, device=random.device)])
        y = _hd_apply(vp[None, :], signs)
        if simplex:
            y = simplex_apply(y, axis=-1)
        return _blockwise(y * norms, k, m)

    return projections


register_hook("fast_orthogonal", "projections", _fast_projections(simplex=False))
register_hook("fast_simplex", "projections", _fast_projections(simplex=True))


def _simplex_apply_rows_(u):
    """Algorithm 1 along the last axis of a 2-D array, in place (u is overwritten by S u)."""
    d = u.shape[-1]
    xp = array_api_compat.array_namespace(u)
    yd = xp.sum(u[:, : d - 1], axis=-1)
    yd *= 1 / math.sqrt(d - 1)
    head = u[:, : d - 1]
    head *= math.sqrt(d / (d - 1))
    head -= ((math.sqrt(d) + 1) / (d - 1)) * yd[:, None]
    u[:, d - 1] = yd
    return u


def _default_chunk(coupling, d, m, path, per_draw_extra=0):
    """Draws per chunk: a function of the problem shape only, so that results depend on ``rng`` alone.

    A chunk's largest intermediates hold about :data:`CHUNK_ELEMENTS`
    entries; a single draw larger than that is one chunk, within the
    :func:`~montecarlo._checks.check_budget` limit.
    """
    b = _block_rows(coupling, d)
    nb = -(-m // b)
    if path == "full":
        per = m * max(d, b) * 2 + per_draw_extra
    else:
        per = nb * b * 8 + per_draw_extra
        if coupling == "simplex_plus":  # the update holds the d vectors of each block
            per += nb * d * d * 2
    check_budget(per, f"one draw of m = {m} features in d = {d} ({coupling!r}, path {path!r})",
                 "reduce m or d")
    return max(1, CHUNK_ELEMENTS // per)


def _chunk_size(chunk, coupling, d, m, path, per_draw_extra=0):
    """The chunk size; ``chunk`` (deprecated) is validated, then ignored with a DeprecationWarning."""
    if chunk is not None:
        check_int(chunk, "chunk", 1)
        warnings.warn("chunk= is deprecated and ignored: draws are processed in chunks whose size depends only on "
                      "the problem shape (memory bounded by montecarlo.estimators.CHUNK_ELEMENTS), so that a seed "
                      "gives the same result whatever the chunking", DeprecationWarning, stacklevel=4)
    return _default_chunk(coupling, d, m, path, per_draw_extra)


@renamed_arguments(n="n_draws")
def pair_projections(coupling, v, m, n_draws, rng=None, xp=None, device=None, *, d=None, dtype=None, path="auto",
                     haar_route=None):
    r"""Projections :math:`w_i^\top v` of n_draws independent draws of m features, shape (n_draws, m).

    Parameters
    ----------
    coupling : str
        Any coupling of :func:`~montecarlo.sample_weights`.
    v : array (d,) or real >= 0
        The vector (a norm is placed along :math:`e_1`; then ``d`` is required).
    m, n_draws : int >= 1
    rng, xp, device, dtype, haar_route : as in :func:`~montecarlo.sample_weights`
    d : int, optional
        Required when ``v`` is a norm.
    path : {'auto', 'fast', 'full'}
        See the module docstring; 'auto' is 'fast'.

    Returns
    -------
    array (n_draws, m)

    Notes
    -----
    Draws are made in chunks of a size fixed by (coupling, d, m, path), so
    memory is O(n_draws m) for the result plus one chunk.
    """
    if d is None:
        d = _vector_dimension(v)
    coupling, d, random, route, path = _setup(coupling, d, rng, xp, device, dtype, haar_route, path)
    m = check_int(m, "m", 1)
    n = check_int(n_draws, "n_draws", 1)
    vec = _as_vector(v, d, random, "v")
    check_budget(n * m, f"the (n_draws, m) = ({n}, {m}) projections", "reduce n_draws or m")
    size = _default_chunk(coupling, d, m, path)
    if n <= size:
        return _project_chunk(coupling, d, m, vec, n, random, route, path)
    xpn = random.xp
    parts = [_project_chunk(coupling, d, m, vec, k, random, route, path) for k in _chunks(n, size)]
    return xpn.concat(parts, axis=0)


# ---------------------------------------------------------------------------
# Pointwise estimators


def _kernel_value(kernel, x, y):
    """Exact kernel value (float64 numpy): Gaussian / softmax; RFFs estimate the Gaussian kernel."""
    if kernel == "softmax":
        return float(np.exp(np.dot(x, y)))
    return float(np.exp(-0.5 * np.sum((x - y) ** 2)))


def _pointwise(stat, coupling, x, y, m, n_draws, kernel, rng, xp, device, dtype, path, chunk, progress,
               haar_route, label):
    kernel = check_kernel(kernel)
    xn = to_numpy(check_data(x, namespace("numpy"), "x", 1))
    d = xn.shape[0]
    yn = to_numpy(check_data(y, namespace("numpy"), "y", 1, d))
    coupling, d, random, route, path = _setup(coupling, d, rng, xp, device, dtype, haar_route, path)
    m = check_int(m, "m", 1)
    n_draws = check_int(n_draws, "n_draws", 2)
    xpn = random.xp
    target = _kernel_value(kernel, xn, yn)
    if kernel == "rff":
        vvec = xn - yn
        log_pref = 0.0
    else:
        vvec = xn + yn
        c = 1.0 if kernel == "gaussian" else 0.5
        log_pref = -c * float(xn @ xn + yn @ yn) - math.log(m)
    vec = xpn.asarray(vvec, dtype=random.dtype, device=random.device)
    size = _chunk_size(chunk, coupling, d, m, path)
    on_host = random.backend == "numpy"
    acc = _Moments()
    bar = _Progress(progress, n_draws, label)
    done = 0
    for k in _chunks(n_draws, size):
        proj = _project_chunk(coupling, d, m, vec, k, random, route, path)
        if kernel == "rff":
            khat = xpn.mean(xpn.cos(proj), axis=1)
        elif on_host and float(xpn.max(proj)) < 700.0:  # exp cannot overflow: sum directly
            khat = xpn.sum(exp_inplace(proj, xpn), axis=1) * math.exp(log_pref)
        else:  # per-row log-sum-exp (no host synchronisation on a device backend)
            rtop = xpn.max(proj, axis=1)
            lse = rtop + xpn.log(xpn.sum(exp_inplace(proj - rtop[:, None], xpn), axis=1))
            khat = xpn.exp(lse + log_pref)
        acc.add(xpn, khat if stat == "kernel" else (khat - target) ** 2)
        done += k
        bar.update(done)
    return acc.result(xpn, scalar=True), target


_POINTWISE_DOC = """
    Parameters
    ----------
    coupling : str
        Any coupling of :func:`~montecarlo.sample_weights`.
    x, y : array (d,)
        The two points (finite).
    m : int >= 1
        Number of random features per draw.
    n_draws : int >= 2
        Number of independent draws.
    kernel : {'gaussian', 'softmax', 'rff'}
        PRF for the Gaussian kernel (eq. ``def_prf``), PRF for the softmax
        kernel, or RFF (eq. ``rffdef2``, estimating the Gaussian kernel).
    rng, xp, device, dtype, haar_route : as in :func:`~montecarlo.sample_weights`
    path : {'auto', 'fast', 'full'}
        How the projections are drawn (module docstring).
    chunk : int, optional
        Deprecated and ignored (a DeprecationWarning): draws are processed in
        chunks whose size depends only on the problem shape (about
        :data:`CHUNK_ELEMENTS` entries, 16 MB, per chunk), so that a seed
        reproduces the result whatever the chunking.
    progress : bool or callable
        Progress bar on stderr, or ``f(done, total)``.
"""


def kernel_estimate(coupling, x, y, m, n_draws, kernel="gaussian", rng=None, xp=None, device=None, *,
                    dtype=None, path="auto", chunk=None, progress=False, haar_route=None):
    r"""Mean of the kernel estimator :math:`\hat K = \phi(x)^\top\phi(y)` over n_draws draws.
    """
    est, _ = _pointwise("kernel", coupling, x, y, m, n_draws, kernel, rng, xp, device, dtype, path, chunk,
                        progress, haar_route, "kernel")
    return est


def empirical_mse(coupling, x, y, m, n_draws, kernel="gaussian", rng=None, xp=None, device=None, *,
                  dtype=None, path="auto", chunk=None, progress=False, haar_route=None):
    r"""Empirical MSE :math:`\mathbb E[(\hat K - K)^2]` against the exact kernel value.

    Compare with :func:`theory.prf_mse` (Thm 3.2) and :func:`theory.rff_mse`.
    """
    est, _ = _pointwise("mse", coupling, x, y, m, n_draws, kernel, rng, xp, device, dtype, path, chunk,
                        progress, haar_route, "mse")
    return est


kernel_estimate.__doc__ += _POINTWISE_DOC + """
    Returns
    -------
    Estimate
        ``mean`` estimates :math:`\\mathbb E\\hat K`, which equals the kernel for
        the exact couplings (unbiasedness).
"""
empirical_mse.__doc__ += _POINTWISE_DOC + """
    Returns
    -------
    Estimate
"""


def _pair_stat(coupling, d, v, m, n_draws, kind, rng, xp, device, dtype, path, chunk, progress, haar_route,
               matrix):
    check_choice(kind, "kind", ("prf", "rff"))
    coupling, d, random, route, path = _setup(coupling, d, rng, xp, device, dtype, haar_route, path)
    m = check_int(d if m is None else m, "m", 2, "(the conformity averages over pairs of features; default: m = d)")
    n_draws = check_int(n_draws, "n_draws", 2)
    xpn = random.xp
    vec = _as_vector(v, d, random, "v")
    extra = m * m * 3 if matrix else 0
    if matrix:
        check_budget(m * m, f"the (m, m) = ({m}, {m}) pair moments", "reduce m")
    size = _chunk_size(chunk, coupling, d, m, path, extra)
    acc = _Moments()
    bar = _Progress(progress, n_draws, "conformity")
    done = 0
    for k in _chunks(n_draws, size):
        proj = _project_chunk(coupling, d, m, vec, k, random, route, path)
        b = xpn.exp(proj) if kind == "prf" else xpn.cos(proj)
        if matrix:
            acc.add(xpn, b[:, :, None] * b[:, None, :])
        else:
            s = xpn.sum(b, axis=1)
            acc.add(xpn, (s * s - xpn.sum(b * b, axis=1)) / (m * (m - 1)))
        done += k
        bar.update(done)
    return acc.result(xpn, scalar=not matrix)


def empirical_conformity(coupling, d, v, m=None, n_draws=10_000, kind="prf", rng=None, xp=None, device=None, *,
                         dtype=None, path="auto", chunk=None, progress=False, haar_route=None):
    r"""Empirical RF-conformity :math:`\frac{1}{m(m-1)}\sum_{i\ne j}b_ib_j` (eq. ``def_rf_conformity``).

    With :math:`b_i = e^{w_i^\top v}` (``kind='prf'``; compare with
    :func:`theory.conformity` for one block, :func:`theory.ensemble_conformity`
    for m > d) or :math:`b_i = \cos(w_i^\top z)` (``kind='rff'``; compare with
    :func:`theory.rff_conformity`).

    Parameters
    ----------
    coupling : str
    d : int
    v : real >= 0 or array (d,)
        :math:`v = x + y` (PRF) or :math:`z = x - y` (RFF); a norm is placed
        along :math:`e_1` (the direction is irrelevant for the isotropic couplings).
    m : int >= 2, optional
        Number of features (default d: one block).
    n_draws : int >= 2
    kind : {'prf', 'rff'}
    rng, xp, device, dtype, path, chunk, progress, haar_route
        As in :func:`kernel_estimate`.

    Returns
    -------
    Estimate
    """
    return _pair_stat(coupling, d, v, m, n_draws, kind, rng, xp, device, dtype, path, chunk, progress, haar_route,
                      matrix=False)


def empirical_pair_moments(coupling, d, v, m=None, n_draws=10_000, kind="prf", rng=None, xp=None, device=None, *,
                           dtype=None, path="auto", chunk=None, progress=False, haar_route=None):
    r"""Empirical :math:`\mathbb E[b_ib_j]` for every pair, an (m, m) Estimate.

    Off-diagonal entries within a block estimate the pair conformity
    :math:`\rho_c` (:func:`theory.conformity`), entries across blocks
    :math:`e^{v^2}`, and the diagonal :math:`\mathbb E[b_i^2] = e^{2v^2}`
    (PRF).  Arguments as in :func:`empirical_conformity`.
    """
    return _pair_stat(coupling, d, v, m, n_draws, kind, rng, xp, device, dtype, path, chunk, progress, haar_route,
                      matrix=True)


# ---------------------------------------------------------------------------
# Gram matrices


def _features_batch(X, w, kernel, xpn):
    """Per-draw features for a stack of weights w (k, m, d): (k, N, m) or (k, N, 2m)."""
    m = w.shape[1]
    z = xpn.matmul(X[None, :, :], xpn.matrix_transpose(w))
    if kernel == "rff":
        out = xpn.stack([xpn.sin(z), xpn.cos(z)], axis=-1)
        return xpn.reshape(out, (w.shape[0], X.shape[0], 2 * m)) * (1.0 / math.sqrt(m))
    c = 1.0 if kernel == "gaussian" else 0.5
    return xpn.exp(z + (-c * xpn.sum(X * X, axis=1) - 0.5 * math.log(m))[None, :, None])


def gram_estimate(coupling, X, m, n_draws, Y=None, kernel="gaussian", rng=None, xp=None, device=None, *,
                  dtype=None, chunk=None, progress=False, haar_route=None):
    r"""Gram-matrix estimate :math:`\hat K_{ab} = \phi(x_a)^\top\phi(y_b)` averaged over n_draws (Sec. 5.2).

    Parameters
    ----------
    coupling : str
    X : array (N, d)
    m : int >= 1
    n_draws : int >= 2
    Y : array (N', d), optional
        Defaults to X.
    kernel : {'gaussian', 'softmax', 'rff'}
    rng, xp, device, dtype, haar_route, progress
        As in :func:`kernel_estimate` (the weights are drawn on the full path).
    chunk : int, optional
        Deprecated and ignored (see :func:`kernel_estimate`).

    Returns
    -------
    estimate : Estimate
        Elementwise mean and standard error, arrays (N, N') of the backend.
    frobenius : Estimate
        Relative Frobenius error :math:`\|\hat K - K\|_F/\|K\|_F` of a single
        draw (mean and standard error over draws).  Sec. 5.2 (Fig. 7) plots the
        unnormalised squared error :math:`\sum_{ab}(K_{ab}-\hat K_{ab})^2` instead:
        see :func:`montecarlo.experiments.gram_errors`.
    """
    kernel = check_kernel(kernel)
    coupling = check_coupling(coupling)
    xpn = namespace(xp)
    dev = resolve_device(xpn, device)
    dt = resolve_dtype(xpn, dtype)
    X = check_data(X, xpn, "X", 2, device=dev, dtype=dt)
    d = X.shape[1]
    Y = X if Y is None else check_data(Y, xpn, "Y", 2, d, device=dev, dtype=dt)
    check_budget(X.shape[0] * Y.shape[0], f"the (N, N') = ({X.shape[0]}, {Y.shape[0]}) Gram matrix",
                 "pass fewer points")
    coupling, d, random, route, _ = _setup(coupling, d, rng, xpn, dev, dt, haar_route, "full")
    m = check_int(m, "m", 1)
    n_draws = check_int(n_draws, "n_draws", 2)
    if kernel == "softmax":
        exact = xpn.exp(xpn.matmul(X, xpn.matrix_transpose(Y)))
    else:
        sq = xpn.sum(X * X, axis=1)[:, None] + xpn.sum(Y * Y, axis=1)[None, :] - 2 * xpn.matmul(
            X, xpn.matrix_transpose(Y))
        exact = xpn.exp(-0.5 * sq)
    exact_norm = xpn.linalg.vector_norm(xpn.reshape(exact, (-1,)))
    per = X.shape[0] * Y.shape[0] * 2 + (X.shape[0] + Y.shape[0]) * m * 3 + m * d * 3
    check_budget(per, f"one draw of the Gram estimate (N = {X.shape[0]}, N' = {Y.shape[0]}, m = {m}, d = {d})",
                 "pass fewer points or features")
    if chunk is not None:
        _chunk_size(chunk, coupling, d, m, "full")  # validates and warns (deprecated)
    size = max(1, CHUNK_ELEMENTS // per)
    acc, frob = _Moments(), _Moments()
    bar = _Progress(progress, n_draws, "gram")
    done = 0
    for k in _chunks(n_draws, size):
        w = _weights_batch(coupling, d, m, k, random, route, {})
        fx = _features_batch(X, w, kernel, xpn)
        fy = fx if Y is X else _features_batch(Y, w, kernel, xpn)
        g = xpn.matmul(fx, xpn.matrix_transpose(fy))
        acc.add(xpn, g)
        err = xpn.linalg.vector_norm(xpn.reshape(g - exact[None], (k, -1)), axis=1) / exact_norm
        frob.add(xpn, err)
        done += k
        bar.update(done)
    return acc.result(xpn, scalar=False), frob.result(xpn, scalar=True)


def exact_kernel(x, y, kernel="gaussian"):
    """Exact kernel value for two points: Gaussian (also the RFF target) or softmax."""
    kernel = check_kernel(kernel)
    xn = to_numpy(check_data(x, namespace("numpy"), "x", 1))
    yn = to_numpy(check_data(y, namespace("numpy"), "y", 1, xn.shape[0]))
    return _kernel_value(kernel, xn, yn)
