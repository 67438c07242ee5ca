r"""Kernel-estimator MSEs, MSE ratios and orthogonality gaps (Secs. 3-5).

All functions accept any number of features m >= 1.  For m <= d every pair is
coupled (the paper's setting); for m > d the features form independent blocks
(see :mod:`theory.kernels`), with :math:`P` coupled ordered pairs, and every
formula below carries :math:`P/m` where the paper writes :math:`m-1`
(they agree for m <= d).

PRF (Gaussian kernel, Thm 3.2):

.. math::
    \mathrm{MSE} = \frac{e^{-2\|x\|^2-2\|y\|^2}}{m}\Big(e^{v^2}(e^{v^2}-1)
    + \frac Pm(\rho_c - e^{v^2})\Big)

RFF (App. A.5):

.. math::
    \mathrm{MSE} = \frac1m\Big(\frac{(1-e^{-z^2})^2}{2} + \frac Pm(\rho^{\mathrm{RFF}}_c - e^{-z^2})\Big),
    \qquad \rho^{\mathrm{RFF}}_{\mathrm{ORF}} = {}_1F_1(d;\tfrac d2;-\tfrac{z^2}{2})

(the PRF form with :math:`v \to -iz`).  Differences :math:`\rho_c - e^{v^2}`
are evaluated with extra bits so that small v (or z) loses no accuracy.
"""

from __future__ import annotations

import math

from ._context import mp

from .errors import ConvergenceError
from ._checks import (
    PRF_COUPLINGS,
    RFF_COUPLINGS,
    check_coupling,
    check_dimension,
    check_int,
    check_nonnegative,
    check_norms_and_v,
    guarded,
)
from ._series import sum_ratio_series
from .conformities import (
    _rff_even_taylor,
    _sin_moment_first,
    conformity,
    coupling_conformity_v2_coefficient,
    hyp1f1_negative,
)
from .distributions import coupling_cos, simplex_cos
from .kernels import _check_kernel, _prf_prefactor, coupled_pairs
from .registry import block_pair_split, hook, register
from .validation import check_choice


def _small_arg_bits(t):
    """Extra bits needed to resolve a difference of order t**4 against 1."""
    if t == 0:
        return 0
    return max(0, int(-4 * math.log2(float(t)) if t < 1 else 0)) + 8


def _prf_excess(coupling, d, vv):
    r""":math:`\rho_c - e^{v^2}` without cancellation loss at small v."""
    with mp.workprec(mp.prec + _small_arg_bits(vv)):
        return conformity(coupling, d, vv) - mp.exp(vv * vv)


def _rff_conformity_raw(coupling, d, zz):
    return hook(coupling, "rff_conformity")(d, zz)


register("iid", "rff_conformity", lambda d, zz: mp.exp(-zz * zz))
register("orthogonal", "rff_conformity", lambda d, zz: hyp1f1_negative(d, mp.mpf(d) / 2, -zz * zz / 2))
register("simplex", "rff_conformity", lambda d, zz: _rff_even_taylor(d, zz, simplex_cos(d)))


def _rff_z4_coefficient(coupling, d):
    r"""b in :math:`\rho^{\mathrm{RFF}} - e^{-z^2} = b z^4 + O(z^6)` (registry hook ``rff_conformity_z4``)."""
    return hook(coupling, "rff_conformity_z4")(d)


def _z4_fixed_angle(coupling):
    r""":math:`(d\cos^2\theta - 1)/(2(d+2))` at a fixed angle (0 for IID).

    From :math:`M(d,\frac d2,t) = 1 + 2t + \frac{2(d+1)}{d+2}t^2 + O(t^3)`, the even
    part in :math:`\cos\theta` and :math:`\mathbb{E}_\phi[\sin^2\phi] = d/(d+1)`."""

    def coefficient(d):
        c = coupling_cos(coupling, d)
        return (d * c * c - 1) / (2 * mp.mpf(d + 2))

    return coefficient


register("iid", "rff_conformity_z4", lambda d: mp.mpf(0))
register("orthogonal", "rff_conformity_z4", _z4_fixed_angle("orthogonal"))
register("simplex", "rff_conformity_z4", _z4_fixed_angle("simplex"))


def _rff_excess(coupling, d, zz):
    r""":math:`\rho^{\mathrm{RFF}}_c - e^{-z^2}` without cancellation loss at small z."""
    with mp.workprec(mp.prec + _small_arg_bits(zz)):
        return _rff_conformity_raw(coupling, d, zz) - mp.exp(-zz * zz)


def _pair_weight(d, m):
    """P/m: coupled ordered pairs per feature (m - 1 when m <= d)."""
    return mp.mpf(coupled_pairs(d, m)) / m


def _pair_kinds(coupling, d, m):
    """[(kind, weight)]: the pair kinds of m features of ``coupling`` and their weights per feature.

    Every coupling of the paper has one kind of coupled pair, weight P/m.  A
    coupling whose blocks mix two kinds (registry hook ``block_pair_weights``)
    adds ORF-like pairs with their own weight; blocks are counted in closed form.
    """
    q, r = divmod(m, d)
    n_c, n_o = (q * x for x in block_pair_split(coupling, d, d))
    if r:
        c2, o2 = block_pair_split(coupling, d, r)
        n_c, n_o = n_c + c2, n_o + o2
    kinds = [(coupling, mp.mpf(n_c) / m)]
    if n_o:
        kinds.append(("orthogonal", mp.mpf(n_o) / m))
    return kinds


def _weighted_pairs(coupling, d, m, term):
    """Sum over pair kinds of weight * term(kind)."""
    return mp.fsum(w * term(kind) for kind, w in _pair_kinds(coupling, d, m) if w)


@guarded()
def mean_conformity(coupling, d, v, m=None, kind="prf"):
    r"""Pair-averaged conformity of m features, :math:`\frac{1}{m(m-1)}\sum_{i\ne j}\mathbb E[b_ib_j]`.

    :math:`b_i = e^{w_i^\top v}` (``kind='prf'``, eq. ``def_rf_conformity``) or
    :math:`\cos(w_i^\top z)` (``kind='rff'``).  Pairs inside a block take the
    coupling's pair conformity (or, for a coupling whose blocks mix two kinds of
    pairs, each kind its own), pairs across blocks the IID value
    (:math:`e^{v^2}`, :math:`e^{-z^2}`).  This is the quantity a Monte Carlo
    estimate of eq. ``def_rf_conformity`` over all pairs of m features
    estimates (:func:`montecarlo.empirical_conformity`).

    Parameters
    ----------
    coupling : str
        A coupling with the closed form of ``kind`` (see :mod:`theory.registry`).
    d : int
    v : real >= 0
        :math:`\|x + y\|` (PRF) or :math:`\|x - y\|` (RFF).
    m : int >= 2, optional
        Number of features (default d: one block).
    kind : {'prf', 'rff'}

    Returns
    -------
    mpf
    """
    kind = check_choice(kind, "kind", ("prf", "rff"))
    hook_name = "prf_conformity" if kind == "prf" else "rff_conformity"
    coupling = check_coupling(coupling, has=hook_name)
    d = check_dimension(d, coupling)
    m = d if m is None else check_int(m, "m", 2, "(the conformity averages over pairs of features)")
    vv = check_nonnegative(v, "v")
    total = m * (m - 1)
    pair = (lambda c: conformity(c, d, vv)) if kind == "prf" else (lambda c: _rff_conformity_raw(c, d, vv))
    independent = pair("iid")
    kinds = [(c, w * m) for c, w in _pair_kinds(coupling, d, m) if w]
    coupled = sum(n for _, n in kinds)
    return (mp.fsum(n * pair(c) for c, n in kinds) + (total - coupled) * independent) / total


# ---------------------------------------------------------------------------
# PRF


@guarded()
def prf_mse(coupling, d, m, x_norm, y_norm, v, kernel="gaussian"):
    r"""MSE of the PRF kernel estimator (Thm 3.2) for a named coupling.

    Parameters
    ----------
    coupling : {'iid', 'orthogonal', 'simplex'}
    d : int
        Dimensionality (>= 2 for the simplex coupling).
    m : int >= 1
        Number of random features; m > d uses independent blocks (last one
        truncated when d does not divide m).
    x_norm, y_norm, v : real >= 0
        :math:`\|x\|`, :math:`\|y\|`, :math:`v=\|x+y\|` (must satisfy the
        triangle inequality).
    kernel : {'gaussian', 'softmax'}

    Returns
    -------
    mpf
    """
    coupling = check_coupling(coupling, has="prf_conformity")
    d = check_dimension(d, coupling)
    m = check_int(m, "m", 1)
    xn, yn, vv = check_norms_and_v(x_norm, y_norm, v)
    _check_kernel(kernel)
    v2 = vv * vv
    inner = mp.exp(v2) * mp.expm1(v2) + _weighted_pairs(coupling, d, m, lambda c: _prf_excess(c, d, vv))
    return _prf_prefactor(xn, yn, kernel) * inner / m


def _prf_scaled_mse(coupling, d, m, vv):
    """m e^{2x^2+2y^2} MSE (depends on v only); the v -> 0 limit of /v^2 at v = 0."""
    if vv == 0:
        return 1 + _weighted_pairs(coupling, d, m, lambda c: coupling_conformity_v2_coefficient(c, d) - 1)
    v2 = vv * vv
    return mp.exp(v2) * mp.expm1(v2) + _weighted_pairs(coupling, d, m, lambda c: _prf_excess(c, d, vv))


@guarded()
def mse_ratio(coupling, baseline, d, v, m=None):
    r"""Ratio of PRF MSEs of two couplings, :math:`\mathrm{MSE}_c/\mathrm{MSE}_b` (Fig. 6).

    The ratio depends on the data only through :math:`v = \|x+y\|`.  At
    v = 0 both MSEs vanish; the ratio returned there is its limit
    :math:`v\to0`, :math:`(1 + \frac Pm(a_c-1))/(1+\frac Pm(a_b-1))` with
    :math:`\rho = 1 + a v^2 + O(v^4)` (see :func:`simplex_v2_prefactor`).

    Parameters
    ----------
    coupling, baseline : {'iid', 'orthogonal', 'simplex'}
    d : int
    v : real >= 0
    m : int, optional
        Number of features; defaults to d (one full block).
    """
    coupling = check_coupling(coupling, has="prf_conformity")
    baseline = check_coupling(baseline, "baseline", has="prf_conformity")
    d = check_dimension(d, coupling)
    d = check_dimension(d, baseline)
    m = d if m is None else check_int(m, "m", 1)
    vv = check_nonnegative(v, "v")
    return _prf_scaled_mse(coupling, d, m, vv) / _prf_scaled_mse(baseline, d, m, vv)


@guarded()
def orthogonality_gap(d, v, m, x_norm, y_norm):
    r"""PRF orthogonality gap :math:`\mathrm{MSE}_{\mathrm{IID}} - \mathrm{MSE}_{\mathrm{ORF}}` (Cor 4.4).

    .. math::
        \Delta\mathrm{MSE} = e^{-2\|x\|^2-2\|y\|^2}\frac{P}{m^2}
        \Big(e^{v^2} - \frac{\Gamma(d/2)}{\Gamma(d)}\sum_k\frac{v^{2k}}{2^kk!}
        \frac{\Gamma(k+d)}{\Gamma(k+d/2)}\Big)

    with :math:`P/m^2 = (m-1)/m` for m <= d.  Note the :math:`2^k`: the main
    text's eq. ``prf_orth_gap`` omits it (an erratum recorded in
    ``paper_checks``); the appendix and eq. ``orf_conformity`` have it.
    """
    d = check_dimension(d)
    vv = check_nonnegative(v, "v")
    m = check_int(m, "m", 1)
    xn, yn, vv = check_norms_and_v(x_norm, y_norm, vv)
    return -mp.exp(-2 * (xn * xn + yn * yn)) * _pair_weight(d, m) / m * _prf_excess("orthogonal", d, vv)


@guarded()
def orthogonality_gap_series(d, v, m, x_norm, y_norm):
    r"""PRF orthogonality gap from the positive series of App. A.8 (second line).

    .. math::
        \Delta\mathrm{MSE} = e^{-2x^2-2y^2}\frac{P}{m^2}\sum_{k\ge0}\frac{v^{2k}}{k!}
        \Big(1 - \frac{(k+d-1)!}{(d-1)!}\frac{(d-2)!!}{(2k+d-2)!!}\Big),\qquad
        \frac{(k+d-1)!}{(d-1)!}\frac{(d-2)!!}{(2k+d-2)!!} = \prod_{j<k}\frac{d+j}{d+2j}

    Every term is >= 0 (the product is <= 1), which is the paper's proof that
    the gap is positive.  The k-th term is at most :math:`v^{2k}/k!`, so the
    exponential-series remainder bounds the tail.
    """
    d = check_dimension(d)
    vv = check_nonnegative(v, "v")
    m = check_int(m, "m", 1)
    xn, yn, vv = check_norms_and_v(x_norm, y_norm, vv)
    v2 = vv * vv
    eps = mp.mpf(2) ** (-mp.prec)
    total = mp.mpf(0)
    power = mp.mpf(1)  # v^{2k} / k!
    prod = mp.mpf(1)  # prod_{j<k} (d+j)/(d+2j)
    k = 0
    while True:
        total += power * (1 - prod)
        # remainder after k: sum_{j>k} v^{2j}/j! <= power * q/(1-q), q = v^2/(k+2) once < 1
        nxt = power * v2 / (k + 1)
        q = v2 / (k + 2)
        if total > 0 and q < 1 and nxt <= eps * total * (1 - q):
            break
        if total == 0 and v2 == 0:
            break
        if k > 200_000:
            raise ConvergenceError("orthogonality_gap_series: no convergence; use a smaller v")
        prod = prod * (d + k) / (d + 2 * k)
        power = nxt
        k += 1
    return mp.exp(-2 * (xn * xn + yn * yn)) * _pair_weight(d, m) / m * total


@guarded()
def simplex_v2_prefactor(d, m=None):
    r"""Coefficient of :math:`v^2` in the SimRF MSE relative to IIDRFs (Sec. 5.1).

    :math:`\mathrm{MSE}_{\mathrm{SimRF}} = \frac{e^{-2x^2-2y^2}}{m}\,C\,v^2 + O(v^4)`
    while :math:`\mathrm{MSE}_{\mathrm{IIDRF}} = \frac{e^{-2x^2-2y^2}}{m}v^2 + O(v^4)`, with

    .. math::
        C = 1 - \frac{P}{m}\,\frac{R_1}{d-1},\qquad
        R_1 = \frac{\Gamma(\frac{d+1}{2})^2}{\Gamma(\frac d2)\Gamma(\frac d2+1)}
            = \frac{\sqrt\pi\,\Gamma(d+1)\Gamma(\frac d2+\frac12)}{\Gamma(\frac d2)\Gamma(\frac d2+1)^2 2^d}.

    For m = d (the paper's case) :math:`P/m = d-1` and :math:`C = 1 - R_1`,
    0.00778... at d = 64.

    Parameters
    ----------
    d : int >= 2
    m : int >= 1, optional
        Defaults to d.
    """
    d = check_dimension(d, "simplex")
    m = d if m is None else check_int(m, "m", 1)
    return 1 - _pair_weight(d, m) * _sin_moment_first(d) / (d - 1)


@guarded()
def simplex_v2_prefactor_printed(d):
    r"""The Sec. 5.1 expression as printed (m = d):
    :math:`1 - \frac{\sqrt\pi\,\Gamma(d+1)\Gamma(\frac d2+\frac12)}{\Gamma(\frac d2)\Gamma(\frac d2+1)^2 2^d}`."""
    d = check_dimension(d, "simplex")
    h = mp.mpf(d) / 2
    return 1 - mp.sqrt(mp.pi) * mp.gammaprod([d + 1, h + mp.mpf(1) / 2], [h, h + 1, h + 1]) / mp.mpf(2) ** d


# ---------------------------------------------------------------------------
# RFF


@guarded()
def rff_conformity(coupling, d, z):
    r"""RFF analogue of the conformity, :math:`\mathbb{E}[\cos(w_i^\top z)\cos(w_j^\top z)]`.

    :math:`e^{-z^2}` for IID pairs; :math:`{}_1F_1(d;\frac d2;-\frac{z^2}{2})`
    for orthogonal pairs (App. A.5: the PRF form with :math:`v\to -iz`); for
    simplex pairs (beyond the paper) :func:`theory.rff_conformity_at_angle` at
    :math:`\cos\theta = -1/(d-1)`, where :math:`w_i \pm w_j` have different laws.
    """
    coupling = check_coupling(coupling, has="rff_conformity")
    d = check_dimension(d, coupling)
    zz = check_nonnegative(z, "z")
    return _rff_conformity_raw(coupling, d, zz)


@guarded()
def rff_orf_conformity_series(d, z):
    r"""The ORF RFF conformity summed as printed in Thm 4.5,
    :math:`\frac{\Gamma(d/2)}{\Gamma(d)}\sum_k\frac{(-z^2)^k}{2^kk!}\frac{\Gamma(k+d)}{\Gamma(k+d/2)}`,
    with cancellation control (the terms alternate)."""
    d = check_dimension(d)
    zz = check_nonnegative(z, "z")
    h = mp.mpf(d) / 2
    return sum_ratio_series(lambda k: (k + d) / ((k + h) * (k + 1)), -zz * zz / 2,
                            what="rff_orf_conformity_series")


def _rff_scaled_mse(coupling, d, m, zz):
    """m * MSE; at z = 0 the z -> 0 limit of m * MSE / z^4."""
    if zz == 0:
        return mp.mpf(1) / 2 + _weighted_pairs(coupling, d, m, lambda c: _rff_z4_coefficient(c, d))
    return mp.expm1(-zz * zz) ** 2 / 2 + _weighted_pairs(coupling, d, m, lambda c: _rff_excess(c, d, zz))


@guarded()
def rff_mse(coupling, d, m, z):
    r"""MSE of the RFF kernel estimator (App. A.5; the simplex case is beyond the paper).

    Parameters
    ----------
    coupling : {'iid', 'orthogonal', 'simplex'}
    d : int >= 1
    m : int >= 1
    z : real >= 0
        :math:`z = \|x - y\|`.
    """
    coupling = check_coupling(coupling, has="rff_conformity")
    d = check_dimension(d, coupling)
    m = check_int(m, "m", 1)
    zz = check_nonnegative(z, "z")
    if zz == 0:
        return mp.mpf(0)
    return _rff_scaled_mse(coupling, d, m, zz) / m


@guarded()
def rff_mse_ratio(coupling, baseline, d, z, m=None):
    r"""Ratio of RFF MSEs, :math:`\mathrm{MSE}_c/\mathrm{MSE}_b`; m defaults to d.

    At z = 0 both vanish like :math:`z^4`; the limit
    :math:`(\frac12 + \frac Pm b_c)/(\frac12 + \frac Pm b_b)` is returned, with
    :math:`\rho^{\mathrm{RFF}} - e^{-z^2} = b z^4 + O(z^6)`,
    :math:`b_\theta = \frac{d\cos^2\theta-1}{2(d+2)}` (:math:`b_{\mathrm{ORF}} = -\frac{1}{2(d+2)}`,
    :math:`b_{\mathrm{IID}} = 0`; for SimRFs :math:`b > b_{\mathrm{ORF}}`, so ORFs win at small z).
    """
    coupling = check_coupling(coupling, has="rff_conformity")
    baseline = check_coupling(baseline, "baseline", has="rff_conformity")
    d = check_dimension(d, coupling)
    d = check_dimension(d, baseline)
    m = d if m is None else check_int(m, "m", 1)
    zz = check_nonnegative(z, "z")
    return _rff_scaled_mse(coupling, d, m, zz) / _rff_scaled_mse(baseline, d, m, zz)


@guarded()
def rff_orthogonality_gap(d, z, m):
    r"""RFF orthogonality gap :math:`\mathrm{MSE}_{\mathrm{IID}}-\mathrm{MSE}_{\mathrm{ORF}}` (Thm 4.5).

    .. math::
        \Delta\mathrm{MSE} = \frac{P}{m^2}\Big(e^{-z^2} - \frac{\Gamma(d/2)}{\Gamma(d)}
        \sum_k\frac{(-z^2)^k}{2^kk!}\frac{\Gamma(k+d)}{\Gamma(k+d/2)}\Big)

    (:math:`P/m^2 = (m-1)/m` for m <= d).  Positive for z below
    :func:`z_crit`, with sign changes beyond it.
    """
    d = check_dimension(d)
    zz = check_nonnegative(z, "z")
    m = check_int(m, "m", 1)
    return -_pair_weight(d, m) / m * _rff_excess("orthogonal", d, zz)


@guarded()
def rff_asymptotic_ratio(d, z, m):
    r"""Leading 1/d form of the ORF/IID RFF MSE ratio (Cor 4.6, eq. ``asymptotic_ratio``).

    .. math:: 1 - \frac Pm\,\frac{e^{-z^2}z^4}{d(1-e^{-z^2})^2}

    (the paper's :math:`m-1` is :math:`P/m` for m <= d); the exact ratio is
    :func:`rff_mse_ratio` and differs by :math:`O(1/d^2)`.  At z = 0 the limit
    :math:`1 - \frac{P}{m d}` is returned.
    """
    d = check_dimension(d)
    zz = check_nonnegative(z, "z")
    m = check_int(m, "m", 1)
    w = _pair_weight(d, m)
    if zz == 0:
        return 1 - w / d
    z2 = zz * zz
    return 1 - w * mp.exp(-z2) * z2 * z2 / (d * mp.expm1(-z2) ** 2)


def _rff_gap_sign_function(d):
    def g(z):
        return mp.exp(-z * z) - hyp1f1_negative(d, mp.mpf(d) / 2, -z * z / 2)
    return g


@guarded()
def z_crit(d, z_max=None):
    r"""Threshold :math:`z_{\mathrm{crit}}(d)`: ORFs beat IIDRFs for RFFs when
    :math:`z = \|x-y\| < z_{\mathrm{crit}}` (Sec. 4.2).

    Defined as the smallest z > 0 where the RFF orthogonality gap (Thm 4.5)
    changes sign.  Near 0 the gap is :math:`\frac{m-1}{m}\frac{z^4}{2(d+2)} > 0`.

    Returns ``mpmath.inf`` for d = 2, where the gap is
    :math:`\frac{m-1}{m}e^{-y}(e^{-y}-1+y) > 0` for all :math:`y = z^2/2 > 0`.

    Notes
    -----
    The gap is scanned on a grid of step :math:`\min(0.05, 0.5/\sqrt d)`
    (about 1/6 of the observed spacing :math:`\approx 3/\sqrt d` of its
    sign changes) up to ``z_max`` (default :math:`4\sqrt d + 10`), and the
    first bracketed sign change is refined by bisection to the working
    precision.  Raises ``mpmath.NoConvergence`` if no sign change is found.
    """
    d = check_int(d, "d", 2, "(z_crit compares coupled pairs)")
    if d == 2:
        return mp.inf
    g = _rff_gap_sign_function(d)
    step = min(mp.mpf("0.05"), mp.mpf("0.5") / mp.sqrt(d))
    top = 4 * mp.sqrt(d) + 10 if z_max is None else check_nonnegative(z_max, "z_max")
    lo = step
    with mp.workprec(64):
        g_lo = g(lo)
        if g_lo <= 0:
            raise ConvergenceError(f"z_crit: gap not positive at z = {lo}; reduce the grid step")
        z = lo
        while z < top:
            hi = z + step
            g_hi = g(hi)
            if g_hi <= 0:
                break
            z = hi
        else:
            raise ConvergenceError(f"z_crit: no sign change of the RFF gap for z < {mp.nstr(top, 6)}; "
                                   "raise z_max")
        a, b = z, hi
    # bisection at full precision
    a, b = mp.mpf(a), mp.mpf(b)
    tol = mp.mpf(2) ** (-mp.prec + 4) * b
    while b - a > tol:
        mid = (a + b) / 2
        if g(mid) > 0:
            a = mid
        else:
            b = mid
    return (a + b) / 2


__all__ = [
    "PRF_COUPLINGS",
    "mean_conformity",
    "mse_ratio",
    "orthogonality_gap",
    "orthogonality_gap_series",
    "prf_mse",
    "rff_asymptotic_ratio",
    "rff_conformity",
    "rff_mse",
    "rff_mse_ratio",
    "rff_orf_conformity_series",
    "rff_orthogonality_gap",
    "simplex_v2_prefactor",
    "simplex_v2_prefactor_printed",
    "z_crit",
]
