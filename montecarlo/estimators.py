r"""Monte Carlo estimators with standard errors (Thm 3.2, eq. ``def_rf_conformity``, Sec. 5).

How the statistics are computed and the ``path`` choices: :ref:`guide-montecarlo.estimators`
(``docs/guide/sampling.rst``).
"""

from __future__ import annotations

import math
import numbers
import sys
import time
from dataclasses import dataclass

import array_api_compat
import numpy as np

from theory import feature_kinds as kinds
from theory.feature_kinds import kernel_c
from theory.registry import has_hook, hook, register as register_hook
from theory.validation import describe, show_int

from ._backend import Random, exp_inplace, namespace, resolve_device, resolve_dtype, to_numpy

from ._checks import (
    check_budget,
    check_deadline,
    check_work,
    check_choice,
    check_coupling,
    check_data,
    check_dimension,
    check_int,
    check_kernel,
    check_kind,
    check_progress,
)
from .features import _LOG_LARGEST, FeatureMap, check_kind_params, log_kernel_matrix, pair_vector
from .couplings import (
    _block_rows,
    _warn_if_biased,
    chi_norms,
    _check_route,
    _fast_sq_norms,
    _hd_apply,
    _weights_batch,
    next_power_of_two,
    _simplex_apply,
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


def _project_chunk(coupling, d, m, vec, k, random, route, path, with_sq=False):
    """(k, m) projections w_i . vec for k independent draws; with ``with_sq`` also the (k, m) squared
    norms |w_i|^2 of the same draws (for feature kinds that need them).

    ``path="fast"`` uses the coupling's ``projections`` hook (registry); a
    coupling without one takes the full path (draw the blocks, multiply),
    which is correct for every coupling.
    """
    if path == "full" or not has_hook(coupling, "projections"):
        w = _weights_batch(coupling, d, m, k, random, route, {})
        proj = random.xp.matmul(w, vec)
        return (proj, random.xp.sum(w * w, axis=-1)) if with_sq else proj
    return hook(coupling, "projections")(vec, d, m, k, random, with_sq=with_sq)


def _chunk_statistic(fmap, coupling, d, m, vec, k, random, route, path):
    """The statistic of feature map ``fmap`` (:meth:`FeatureMap.statistic`) of k draws' projections on vec,
    with the directions' terms where the kind needs them (squared norms from the same draws, or the terms of
    its ``prepare`` hook from whole weight matrices)."""
    if fmap.needs_weights():
        w = _weights_batch(coupling, d, m, k, random, route, {})
        return fmap.statistic(random.xp.matmul(w, vec), random.xp, d=d, **fmap.direction_terms(w))
    if fmap.needs_w_sq():
        proj, w_sq = _project_chunk(coupling, d, m, vec, k, random, route, path, with_sq=True)
    else:
        proj, w_sq = _project_chunk(coupling, d, m, vec, k, random, route, path), None
    return fmap.statistic(proj, random.xp, d=d, w_sq=w_sq)


def _blockwise(y, k, m):
    """(k * nb, b) block projections -> (k, m): consecutive blocks of a draw, the last truncated."""
    xp = array_api_compat.array_namespace(y)
    y = xp.reshape(y, (k, -1))
    return y[:, :m] if y.shape[1] != m else y


@register_hook("iid", "projections")
def _projections_iid(vec, d, m, k, random, with_sq=False):
    """|v| g, g ~ N(0, 1); |w|^2 = g^2 + chi^2_{d-1} (the component along v and the rest)."""
    g = random.normal((k, m))
    proj = g * random.xp.linalg.vector_norm(vec)
    if not with_sq:
        return proj
    rest = random.chi(d - 1, (k, m)) if d > 1 else random.xp.zeros_like(g)
    return proj, g * g + rest * rest


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

    def projections(vec, d, m, k, random, with_sq=False):
        nb = -(-m // d)
        y, scale = _isotropic_directions(vec, d, k * nb, random)
        norms = draw_norms(d, k * nb, random)
        sq = _blockwise(norms * norms, k, m) if with_sq else None
        if simplex:
            _simplex_apply_rows_(y)
        norms *= scale[:, None]
        y *= norms
        return (_blockwise(y, k, m), sq) if with_sq else _blockwise(y, k, m)

    return projections


register_hook("orthogonal", "projections", isotropic_projections(simplex=False))
register_hook("simplex", "projections", isotropic_projections(simplex=True))


@register_hook("simplex_plus", "projections")
def _projections_simplex_plus(vec, d, m, k, random, with_sq=False):
    """W v = |v| D S' u: the SimRFs+ vectors for the drawn norms applied to u uniform on the sphere
    (the update keeps every row's norm, so |w_i|^2 is the drawn norm squared)."""
    xp = random.xp
    nb = -(-m // d)
    y, scale = _isotropic_directions(vec, d, k * nb, random)
    norms = random.chi(d, (k * nb, d))
    sq = _blockwise(norms * norms, k, m) if with_sq else None
    vecs, _, _ = simplex_plus_vectors(norms)
    y = xp.matmul(vecs, y[:, :, None])[:, :, 0]
    y *= scale[:, None]
    return (_blockwise(y, k, m), sq) if with_sq else _blockwise(y, k, m)


def _fast_projections(simplex):
    """The HD-product applied to v itself (the fast couplings are not isotropic), O(p log p) per block."""

    def projections(vec, d, m, k, random, with_sq=False):
        xp = random.xp
        p = next_power_of_two(d)
        nb = -(-m // p)
        signs = random.rademacher((k * nb, 3, p))
        norms = random.chi(p, (k * nb, p))
        vp = vec if p == d else xp.concat([vec, xp.zeros((p - d,), dtype=vec.dtype, device=random.device)])
        y = _hd_apply(vp[None, :], signs)
        if simplex:
            y = _simplex_apply(y, -1, xp)  # y is ours and finite: the unchecked core
        proj = _blockwise(y * norms, k, m)
        if not with_sq:
            return proj
        return proj, _blockwise(_fast_sq_norms(simplex, norms, signs, d), k, m)  # rows cut to d of p columns

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
    size, _ = _chunk_and_cost(coupling, d, m, path, per_draw_extra)
    return size


def _chunk_and_cost(coupling, d, m, path, per_draw_extra=0):
    """(draws per chunk, entries of intermediates per draw): the memory and the work of one draw."""
    b = _block_rows(coupling, d)
    nb = -(-m // b)
    if path == "full":
        per = m * max(d, b) * 2 + per_draw_extra
    else:
        per = nb * b * 8 + per_draw_extra
        if coupling == "simplex_plus":  # the update holds the d vectors of each block
            per += nb * d * d * 2
    check_budget(per, f"one draw of m = {show_int(m)} features in d = {show_int(d)} ({coupling!r}, path {path!r})",
                 "reduce m or d")
    return max(1, CHUNK_ELEMENTS // per), per


def _work(n_draws, per_draw, label):
    """Refuse a call whose work (draws x entries per draw) exceeds the limit; else return n_draws."""
    check_work(n_draws * per_draw, f"{label} with n_draws = {show_int(n_draws)} ({show_int(per_draw)} entries "
               "per draw)",
               "reduce n_draws")
    return n_draws


def _draw_chunks(n_draws, size, label):
    """The chunk sizes of n_draws draws, checking the time budget (:func:`montecarlo.budget`) before each."""
    for k in _chunks(n_draws, size):
        check_deadline(label)
        yield k


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
        See :ref:`guide-montecarlo.estimators`; 'auto' is 'fast'.

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
    check_budget(n * m, f"the (n_draws, m) = ({show_int(n)}, {show_int(m)}) projections", "reduce n_draws or m")
    size, per = _chunk_and_cost(coupling, d, m, path)
    _work(n, per, "pair_projections")
    parts = [_project_chunk(coupling, d, m, vec, k, random, route, path)
             for k in _draw_chunks(n, size, "pair_projections")]
    return parts[0] if len(parts) == 1 else random.xp.concat(parts, axis=0)


# ---------------------------------------------------------------------------
# Pointwise estimators


def _log_kernel_value(kernel, x, y):
    """log of the exact kernel value (float64 numpy vectors)."""
    return float(log_kernel_matrix(x[None, :], y[None, :], kernel)[0, 0])


def _finite(est, what, hint):
    """``est`` if its mean and standard error are finite; else a ValueError naming the cause."""
    mean, se = (np.asarray(to_numpy(a)) for a in (est.mean, est.stderr))
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(se))):
        raise ValueError(f"{what} is not finite in floating point ({hint})")
    return est


def _float_params(rec, d, v_norm, given, where):
    """The kind's parameters for one Monte Carlo call (:func:`~montecarlo.features.check_kind_params`; those
    left out chosen at the pair by the hook ``float_parameters`` where the kind has it)."""
    given = check_kind_params(rec.name, given, where, chosen="pair")
    if not rec.has("float_parameters"):
        return given
    return kinds.hook(rec.name, "float_parameters")(d, v_norm, **given)


def _kind_path(fmap, asked, path):
    """The projections' path for a feature map (``asked``: the caller's, checked; ``path``: 'auto' resolved):
    'full' for a kind whose statistic needs whole directions."""
    if fmap.needs_weights():
        if asked == "fast":
            raise ValueError(f"path must be 'auto' or 'full' for kind={fmap.kind!r} (its statistic needs the "
                             "directions themselves, not only their projections), got 'fast'")
        return "full"
    return path


def _pointwise(stat, coupling, x, y, m, n_draws, kernel, kind, rng, xp, device, dtype, path, progress,
               haar_route, label, params):
    rec = kinds.get(check_kind(kind))
    kernel_c(kind, kernel)  # (a kernel the kind does not estimate: refused first)
    xn = to_numpy(check_data(x, namespace("numpy"), "x", 1))
    d = xn.shape[0]
    yn = to_numpy(check_data(y, namespace("numpy"), "y", 1, d))
    pair_norm = float(np.linalg.norm(pair_vector(kind, xn, yn)))
    fmap = FeatureMap(kind, kernel=kernel, where=label, **_float_params(rec, d, pair_norm, params, label))
    asked = path
    coupling, d, random, route, path = _setup(coupling, d, rng, xp, device, dtype, haar_route, path)
    path = _kind_path(fmap, asked, path)
    m = check_int(m, "m", 1)
    n_draws = check_int(n_draws, "n_draws", 2)
    xpn = random.xp
    log_target = _log_kernel_value(kernel, xn, yn)
    target = math.exp(log_target) if log_target < 709.0 else math.inf
    vvec, log_pref = fmap.pair(xn, yn)
    vec = xpn.asarray(vvec, dtype=random.dtype, device=random.device)
    size, per = _chunk_and_cost(coupling, d, m, path, m * d if fmap.needs_weights() else 0)
    _work(n_draws, per, label)
    on_host = random.backend == "numpy"
    acc = _Moments()
    bar = _Progress(progress, n_draws, label)
    done = 0
    for k in _draw_chunks(n_draws, size, label):
        b = _chunk_statistic(fmap, coupling, d, m, vec, k, random, route, path)
        khat = fmap.kernel_estimates(b, log_pref, on_host)
        acc.add(xpn, khat if stat == "kernel" else (khat - target) ** 2)
        done += k
        bar.update(done)
    est = acc.result(xpn, scalar=True)
    return _finite(est, f"the {label} estimate for |x| = {np.linalg.norm(xn):.4g}, |y| = {np.linalg.norm(yn):.4g}",
                   "x and y are too large for the kernel or its estimator to be represented: scale the data "
                   "down, or use theory.kernel_mse for exact values"), target


_POINTWISE_DOC = """
    Parameters
    ----------
    coupling : str
        Any coupling of :func:`~montecarlo.sample_weights`.
    x, y : array (d,)
        The two points (finite).
    m : int >= 1
        Number of random directions per draw (the feature width is ``width * m``).
    n_draws : int >= 2
        Number of independent draws (refused above the work limit,
        ``montecarlo._checks.check_work``; a :func:`montecarlo.budget` bounds the time).
    kernel : {'gaussian', 'softmax'}
        The target kernel (RFFs: 'gaussian').
    rng, xp, device, dtype, haar_route : as in :func:`~montecarlo.sample_weights`
    kind : str, keyword-only
        The feature kind (:mod:`theory.feature_kinds`): 'prf' (eq. ``def_prf``),
        'rff' (eq. ``rffdef2``), 'hyperbolic', ...
    path : {'auto', 'fast', 'full'}
        How the projections are drawn (:ref:`guide-montecarlo.estimators`); kinds that need
        :math:`\\|w_i\\|^2` get it from the same draws on both paths.
    progress : bool or callable
        Progress bar on stderr, or ``f(done, total)``.
    **params
        The kind's parameters: ``A`` for 'oprf' (default None: the optimum
        :math:`A^*(\\|x + y\\|^2/d)` of :func:`montecarlo.oprf.optimal_a` for this pair).
"""


def kernel_estimate(coupling, x, y, m, n_draws, kernel="gaussian", rng=None, xp=None, device=None, *,
                    kind="prf", dtype=None, path="auto", progress=False, haar_route=None, **params):
    r"""Mean of the kernel estimator :math:`\hat K = \phi(x)^\top\phi(y)` over n_draws draws.
    """
    est, _ = _pointwise("kernel", coupling, x, y, m, n_draws, kernel, kind, rng, xp, device, dtype, path,
                        progress, haar_route, "kernel", params)
    return est


def empirical_mse(coupling, x, y, m, n_draws, kernel="gaussian", rng=None, xp=None, device=None, *,
                  kind="prf", dtype=None, path="auto", progress=False, haar_route=None, **params):
    r"""Empirical MSE :math:`\mathbb E[(\hat K - K)^2]` against the exact kernel value.

    Compare with :func:`theory.kernel_mse` (``kind=`` the same feature kind).
    """
    est, _ = _pointwise("mse", coupling, x, y, m, n_draws, kernel, kind, rng, xp, device, dtype, path,
                        progress, haar_route, "mse", params)
    return est


kernel_estimate.__doc__ += _POINTWISE_DOC + """
    Returns
    -------
    Estimate
        ``mean`` estimates :math:`\\mathbb E\\hat K`, which equals the kernel for
        the exact couplings (unbiasedness).

    Raises
    ------
    ValueError
        Bad arguments, or an estimate that is not finite in floating point
        (points too large for the kernel).
"""
empirical_mse.__doc__ += _POINTWISE_DOC + """
    Returns
    -------
    Estimate
"""


def _pair_stat(coupling, d, v, m, n_draws, kind, rng, xp, device, dtype, path, progress, haar_route, matrix,
               params):
    rec = kinds.get(check_kind(kind))
    asked = path
    coupling, d, random, route, path = _setup(coupling, d, rng, xp, device, dtype, haar_route, path)
    m = check_int(d if m is None else m, "m", 2, "(the conformity averages over pairs of features; default: m = d)")
    n_draws = check_int(n_draws, "n_draws", 2)
    xpn = random.xp
    vec = _as_vector(v, d, random, "v")
    params = _float_params(rec, d, float(xpn.linalg.vector_norm(vec)), params, "conformity")
    fmap = FeatureMap(kind, kernel=rec.kernels[0], where="conformity", **params)  # (the statistic: any kernel)
    path = _kind_path(fmap, asked, path)
    if fmap.needs_weights():
        vec = xpn.asarray(fmap.transform_vector(np.asarray(to_numpy(vec), dtype=np.float64)), dtype=random.dtype,
                          device=random.device)
    extra = m * m * 3 if matrix else 0
    if matrix:
        check_budget(m * m, f"the (m, m) = ({show_int(m)}, {show_int(m)}) pair moments", "reduce m")
    size, per = _chunk_and_cost(coupling, d, m, path, extra + (m * d if fmap.needs_weights() else 0))
    label = "pair moments" if matrix else "conformity"
    _work(n_draws, per, label)
    acc = _Moments()
    bar = _Progress(progress, n_draws, label)
    done = 0
    for k in _draw_chunks(n_draws, size, label):
        b = fmap.pair_values(_chunk_statistic(fmap, coupling, d, m, vec, k, random, route, path))
        if matrix:
            acc.add(xpn, b[:, :, None] * b[:, None, :])
        else:
            s = xpn.sum(b, axis=1)
            acc.add(xpn, (s * s - xpn.sum(b * b, axis=1)) / (m * (m - 1)))
        done += k
        bar.update(done)
    vnorm = float(xpn.linalg.vector_norm(vec))
    return _finite(acc.result(xpn, scalar=not matrix), f"the {label} estimate at |v| = {vnorm:.4g}",
                   f"v is too large: e^(w.v) overflows float64 for |w.v| > 709, and the pair term grows like "
                   f"e^(|v|^2) = e^{vnorm * vnorm:.4g}; use theory.mean_conformity for exact values")


def empirical_conformity(coupling, d, v, m=None, n_draws=10_000, kind="prf", rng=None, xp=None, device=None, *,
                         dtype=None, path="auto", progress=False, haar_route=None, **params):
    r"""Empirical pair term :math:`\frac{1}{m(m-1)}\sum_{i\ne j}b_ib_j` (eq. ``def_rf_conformity``).

    With the per-direction statistic of the feature kind: :math:`b_i = e^{w_i^\top v}`
    (``kind='prf'``, the RF-conformity; compare with :func:`theory.conformity`
    for one block, :func:`theory.mean_conformity` in general),
    :math:`\cos(w_i^\top z)` (``kind='rff'``), :math:`\cosh(w_i^\top v)`
    (``kind='hyperbolic'``), ...

    Parameters
    ----------
    coupling : str
    d : int
    v : real >= 0 or array (d,)
        :math:`v = x + y` (positive kinds) or :math:`z = x - y` (RFF); a norm is
        placed along :math:`e_1` (the direction is irrelevant for the isotropic couplings).
    m : int >= 2, optional
        Number of directions (default d: one block).
    n_draws : int >= 2
    kind : str
        A feature kind of :mod:`theory.feature_kinds`.
    rng, xp, device, dtype, path, progress, haar_route, **params
        As in :func:`kernel_estimate`.

    Returns
    -------
    Estimate

    Raises
    ------
    ValueError
        Bad arguments, or a v so large that the statistic overflows (the
        message names v).
    """
    return _pair_stat(coupling, d, v, m, n_draws, kind, rng, xp, device, dtype, path, progress, haar_route,
                      False, params)


def empirical_pair_moments(coupling, d, v, m=None, n_draws=10_000, kind="prf", rng=None, xp=None, device=None, *,
                           dtype=None, path="auto", progress=False, haar_route=None, **params):
    r"""Empirical :math:`\mathbb E[b_ib_j]` for every pair, an (m, m) Estimate.

    Off-diagonal entries within a block estimate the pair term of the
    coupling (:func:`theory.conformity` for PRFs), entries across blocks
    :math:`(\mathbb E b)^2` (:math:`e^{v^2}` for PRFs), and the diagonal
    :math:`\mathbb E[b_i^2]` (:math:`e^{2v^2}` for PRFs).  Arguments as in
    :func:`empirical_conformity`.
    """
    return _pair_stat(coupling, d, v, m, n_draws, kind, rng, xp, device, dtype, path, progress, haar_route,
                      True, params)


# ---------------------------------------------------------------------------
# Gram matrices


def _features_batch(X, w, fmap, xpn):
    """Per-draw features of a feature map for a stack of weights w (k, m, d): (k, N, width m)."""
    rows, terms = fmap.prepared(w, rows_axis=True)
    z = xpn.matmul(X[None, :, :], xpn.matrix_transpose(rows))
    sq = xpn.sum(X * X, axis=1)[None, :, None]
    return fmap.apply(z, sq, m=w.shape[1], d=w.shape[2], **terms)


def gram_estimate(coupling, X, m, n_draws, Y=None, kernel="gaussian", rng=None, xp=None, device=None, *,
                  kind="prf", dtype=None, progress=False, haar_route=None, **params):
    r"""Gram-matrix estimate :math:`\hat K_{ab} = \phi(x_a)^\top\phi(y_b)` averaged over n_draws (Sec. 5.2).

    Parameters
    ----------
    coupling : str
    X : array (N, d)
    m : int >= 1
    n_draws : int >= 2
    Y : array (N', d), optional
        Defaults to X.
    kernel : {'gaussian', 'softmax'}
        The target kernel.
    rng, xp, device, dtype, haar_route, progress
        As in :func:`kernel_estimate` (the weights are drawn on the full path).
    kind : str, keyword-only
        The feature kind ('prf', 'rff', 'hyperbolic', 'oprf', ...).
    **params
        The kind's parameters, all required (``A`` for 'oprf': e.g.
        :func:`montecarlo.oprf.data_optimal_a` of X and Y).

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
    fmap = FeatureMap(kind, kernel=kernel, where="gram_estimate", **params)
    coupling = check_coupling(coupling)
    xpn = namespace(xp)
    dev = resolve_device(xpn, device)
    dt = resolve_dtype(xpn, dtype)
    X = check_data(X, xpn, "X", 2, device=dev, dtype=dt)
    d = X.shape[1]
    Y = X if Y is None else check_data(Y, xpn, "Y", 2, d, device=dev, dtype=dt)
    for name, arr in (("X", X), ("Y", Y)):
        if arr.shape[0] == 0:
            raise ValueError(f"{name} must hold at least one point (row), got shape {tuple(arr.shape)}")
    check_budget(X.shape[0] * Y.shape[0], f"the (N, N') = ({X.shape[0]}, {Y.shape[0]}) Gram matrix",
                 "pass fewer points")
    coupling, d, random, route, _ = _setup(coupling, d, rng, xpn, dev, dt, haar_route, "full")
    m = check_int(m, "m", 1)
    n_draws = check_int(n_draws, "n_draws", 2)
    with np.errstate(over="ignore"):  # refused just below
        exact = xpn.exp(log_kernel_matrix(X, Y, kernel))
        exact_norm = xpn.linalg.vector_norm(xpn.reshape(exact, (-1,)))
    if not math.isfinite(float(exact_norm)):
        raise ValueError(f"an exact {kernel} kernel value of X and Y overflows {exact.dtype} (or their Frobenius norm "
                         "does): the relative Frobenius error is undefined; scale the points down (log values: "
                         "montecarlo.features.log_kernel_matrix)")
    if not float(exact_norm) > 0.0:
        raise ValueError(f"every exact {kernel} kernel value of X and Y underflows to 0 in {exact.dtype}: the "
                         "relative Frobenius error is undefined; scale the points down (log values: "
                         "montecarlo.features.log_kernel_matrix)")
    width = fmap.width * m
    per = X.shape[0] * Y.shape[0] * 2 + (X.shape[0] + Y.shape[0]) * width * 3 + m * d * 3
    check_budget(per, f"one draw of the Gram estimate (N = {X.shape[0]}, N' = {Y.shape[0]}, m = {show_int(m)}, "
                 f"d = {d})",
                 "pass fewer points or features")
    _work(n_draws, per, "gram_estimate")
    size = max(1, CHUNK_ELEMENTS // per)
    acc, frob = _Moments(), _Moments()
    bar = _Progress(progress, n_draws, "gram")
    done = 0
    for k in _draw_chunks(n_draws, size, "gram_estimate"):
        w = _weights_batch(coupling, d, m, k, random, route, {})
        fx = _features_batch(X, w, fmap, xpn)
        fy = fx if Y is X else _features_batch(Y, w, fmap, xpn)
        g = xpn.matmul(fx, xpn.matrix_transpose(fy))
        acc.add(xpn, g)
        err = xpn.linalg.vector_norm(xpn.reshape(g - exact[None], (k, -1)), axis=1) / exact_norm
        frob.add(xpn, err)
        done += k
        bar.update(done)
    return acc.result(xpn, scalar=False), frob.result(xpn, scalar=True)


def exact_kernel(x, y, kernel="gaussian"):
    """Exact kernel value for two points: Gaussian (the target of every kind's Gaussian estimator) or softmax.

    A float64 to relative accuracy; a ValueError where it would overflow or fall below float64's smallest
    normal number (2.2e-308: the log kernel outside [-708.4, 709.8]);
    :func:`montecarlo.features.log_kernel_matrix` gives the log there."""
    kernel = check_kernel(kernel)
    xn = to_numpy(check_data(x, namespace("numpy"), "x", 1))
    yn = to_numpy(check_data(y, namespace("numpy"), "y", 1, xn.shape[0]))
    log_value = _log_kernel_value(kernel, xn, yn)
    if not _LOG_TINIEST_NORMAL <= log_value <= _LOG_LARGEST:
        raise ValueError(f"the exact {kernel} kernel of x and y is exp({log_value:.6g}), outside float64's normal "
                         "range (it would overflow to inf or lose its relative accuracy below 2.2e-308); the log "
                         "value is montecarlo.features.log_kernel_matrix(x[None], y[None], kernel)")
    return math.exp(log_value)


#: log of float64's smallest normal number: the low end of exact_kernel's range (the high end: _LOG_LARGEST).
_LOG_TINIEST_NORMAL = math.log(np.finfo(np.float64).tiny)
