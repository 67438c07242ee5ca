r"""RF-conformities of IIDRFs, ORFs, SimRFs and any fixed angle (Sec. 4).

The RF-conformity of a coupled pair (eq. ``def_rf_conformity``) is

.. math::
    \rho = \Gamma(\tfrac d2)\,\mathbb{E}_{w_{ij}}\Big[\sum_{k\ge0}
    \frac{v^{2k}w_{ij}^{2k}}{2^{2k}k!\,\Gamma(k+\frac d2)}\Big]
    = \mathbb{E}\big[{}_0F_1(;\tfrac d2;\tfrac{v^2w_{ij}^2}{4})\big].

Several routes are encoded, so that each closed form can be checked by an
independent one (the tests and ``paper_checks`` compare them):

============================  ==================================================
function                      route
============================  ==================================================
``conformity``                public entry point; the fastest route per coupling
``conformity_iid``            Lemma 4.1, :math:`e^{v^2}`
``conformity_orthogonal``     :math:`{}_1F_1(d;\frac d2;\frac{v^2}{2})` (mpmath)
``orf_conformity_series``     eq. ``orf_conformity`` summed as printed
``orf_conformity_kummer``     Kummer's transformation, a finite sum for even d
``simrf_conformity_series``   eq. ``simrf_conformity`` (double series) as printed
``conformity_at_angle``       Taylor expansion in :math:`\cos\theta` (fast)
``conformity_at_angle_quad``  eq. ``theta_conformity`` as a 1-D integral of 1F1
``conformity_from_moments``   definition with exact chi moments (no Lemma 4.2)
============================  ==================================================

Derivation of the fast route.  Writing eq. ``theta_conformity`` with
:math:`x = v^2/2` and the normalised weight :math:`\sin^{d-1}\phi/J` on
:math:`[0,\pi]` (:math:`J=\sqrt\pi\,\Gamma(\frac d2)/\Gamma(\frac{d+1}{2})`),

.. math::
    \rho_\theta = \mathbb{E}_\phi\big[M(d,\tfrac d2,x(1+\cos\theta\sin\phi))\big]
    = \sum_{p\ge0}\frac{(x\cos\theta)^p}{p!}\,M^{(p)}(d,\tfrac d2,x)\,R_p,

with :math:`M^{(p)}(a,b,x) = \frac{(a)_p}{(b)_p}M(a+p,b+p,x)` and
:math:`R_p = \mathbb{E}_\phi[\sin^p\phi] = \frac{\Gamma(\frac{d+1}{2})\Gamma(\frac{d+p}{2})}
{\Gamma(\frac d2)\Gamma(\frac{d+p+1}{2})}`.  For :math:`x \ge 0`,
:math:`M^{(p+1)} \le \frac{d+p}{d/2+p}M^{(p)}` and :math:`R_{p+1}\le R_p`, which
bounds the remainder (see :func:`theory._series.sum_series`).
"""

from __future__ import annotations

from ._context import mp

from .errors import ConvergenceError
from ._checks import (
    check_coupling,
    check_cos_theta,
    check_dimension,
    check_nonnegative,
    guarded,
)
from ._series import log2abs, quad_checked, sum_ratio_series, sum_series
from .distributions import _wij_moment, coupling_cos, simplex_cos
from .registry import hook, register

# ---------------------------------------------------------------------------
# helpers


def _sin_moment_first(d):
    r""":math:`R_1 = \mathbb{E}_\phi[\sin\phi] = \Gamma(\frac{d+1}{2})^2/(\Gamma(\frac d2)\Gamma(\frac d2+1))`."""
    h = mp.mpf(d) / 2
    return mp.gammaprod([h + mp.mpf(1) / 2, h + mp.mpf(1) / 2], [h, h + 1])


def _orf_ratio(d):
    h = mp.mpf(d) / 2

    def ratio(k):
        return (k + d) / ((k + h) * (k + 1))

    return ratio


# ---------------------------------------------------------------------------
# IID (Lemma 4.1)


@guarded()
def conformity_iid(d, v):
    r"""IIDRF conformity :math:`\rho_{\mathrm{IIDRF}} = e^{v^2}` (eq. ``iidrf_conformity``)."""
    check_dimension(d)
    vv = check_nonnegative(v, "v")
    return mp.exp(vv * vv)


# ---------------------------------------------------------------------------
# ORF (Thm 4.3, eq. orf_conformity)


@guarded()
def conformity_orthogonal(d, v):
    r"""ORF conformity as a confluent hypergeometric function.

    .. math:: \rho_{\mathrm{ORF}} = {}_1F_1(d; \tfrac d2; \tfrac{v^2}{2})

    which is eq. ``orf_conformity`` summed in closed form
    (:math:`\frac{\Gamma(d/2)\Gamma(k+d)}{\Gamma(d)\Gamma(k+d/2)} = \frac{(d)_k}{(d/2)_k}`).
    """
    d = check_dimension(d)
    vv = check_nonnegative(v, "v")
    return mp.hyp1f1(d, mp.mpf(d) / 2, vv * vv / 2)


@guarded()
def orf_conformity_series(d, v):
    r"""Eq. ``orf_conformity`` summed term by term as printed.

    .. math:: \rho_{\mathrm{ORF}} = \frac{\Gamma(\frac d2)}{\Gamma(d)}\sum_{k\ge0}
              \frac{v^{2k}}{2^kk!}\frac{\Gamma(k+d)}{\Gamma(k+\frac d2)}

    The term ratio :math:`\frac{(k+d)}{(k+d/2)(k+1)}\frac{v^2}{2}` is
    non-increasing in k, which gives a proved remainder bound.
    """
    d = check_dimension(d)
    vv = check_nonnegative(v, "v")
    return sum_ratio_series(_orf_ratio(d), vv * vv / 2, what="orf_conformity_series")


@guarded()
def orf_conformity_kummer(d, v):
    r"""ORF conformity via Kummer's transformation (even d only).

    :math:`M(d, \frac d2, x) = e^x M(-\frac d2, \frac d2, -x)`; for even d the
    second factor is a polynomial of degree d/2 (a Laguerre polynomial), so the
    sum is finite and exact.  Raises ValueError for odd d.
    """
    d = check_dimension(d)
    if d % 2:
        raise ValueError(f"d must be even for the Kummer route (a finite sum), got {d}")
    vv = check_nonnegative(v, "v")
    x = vv * vv / 2
    n = d // 2
    term = mp.mpf(1)
    total = mp.mpf(1)
    for j in range(n):
        # (-n)_j / (n)_j * (-x)^j / j!  ->  ratio (j - n)/((n + j)(j + 1)) * (-x)
        term *= mp.mpf(j - n) / ((n + j) * (j + 1)) * (-x)
        total += term
    return mp.exp(x) * total


# ---------------------------------------------------------------------------
# SimRF (Thm 4.3, eq. simrf_conformity)


@guarded()
def simrf_conformity_series(d, v, max_terms=20_000):
    r"""Eq. ``simrf_conformity`` evaluated as printed (a double series).

    .. math::
        \rho_{\mathrm{SimRF}} = \frac{\sqrt\pi}{\Gamma(\frac d2)2^{d-1}}\sum_{k\ge0}
        \frac{\Gamma(k+d)}{\Gamma(k+\frac d2)}\frac{v^{2k}}{2^k}
        \sum_{p=0}^k\Big(-\frac{1}{d-1}\Big)^p
        \frac{\Gamma(\frac{d+p}{2})}{\Gamma(\frac{d+p+1}{2})}\frac{1}{(k-p)!p!}

    Notes
    -----
    The inner sums alternate; each is recomputed with more bits until its
    cancellation is covered.  The k-th outer term is at most the k-th term of
    eq. ``orf_conformity`` (the inner sum is
    :math:`\int_0^\pi\sin^{d-1}\phi(1-\frac{\sin\phi}{d-1})^k d\phi/(\sqrt\pi k!)`,
    between 0 and its k = 0 value), so the ORF remainder bound applies.
    Cost is quadratic in the number of terms: this is the reference form, not
    the fast one (see :func:`conformity_at_angle`).
    """
    d = check_dimension(d, "simplex")
    vv = check_nonnegative(v, "v")
    return _theta_double_series(d, vv * vv / 2, simplex_cos(d), max_terms)


def _theta_double_series(d, x, c, max_terms):
    """Eq. simrf_conformity generalised to any cos(theta) = c (the binomial
    expansion of eq. theta_conformity): sum_k e_k x^k H_k, H_k = sum_p C(k,p) c^p g_p."""
    prec = mp.prec
    eps = mp.mpf(2) ** (-prec)
    h = mp.mpf(d) / 2
    pref = mp.sqrt(mp.pi) / (mp.gamma(h) * mp.mpf(2) ** (d - 1))
    ratio = _orf_ratio(d)
    g_cache = {}

    def g_list(n, bits):
        # g_p = Gamma((d+p)/2) / Gamma((d+p+1)/2), p = 0..n, at `bits` precision;
        # g_{p+2} = g_p (d+p)/(d+p+1)
        with mp.workprec(bits):
            lst = g_cache.get(bits)
            if lst is None:
                half = mp.mpf(1) / 2
                lst = g_cache[bits] = [mp.gammaprod([h], [h + half]), mp.gammaprod([h + half], [h + 1])]
            while len(lst) <= n:
                p = len(lst) - 2
                lst.append(lst[p] * (d + p) / (d + p + 1))
        return lst

    inner_guard = 16

    def inner(k):
        nonlocal inner_guard
        while True:
            bits = prec + inner_guard
            g = g_list(k, bits)
            with mp.workprec(bits):
                cc = mp.mpf(c)
                total = mp.mpf(0)
                absum = mp.mpf(0)
                binom = mp.mpf(1)
                cp = mp.mpf(1)
                for p in range(k + 1):
                    t = binom * cp * g[p]
                    total += t
                    absum += abs(t)
                    binom = binom * (k - p) / (p + 1)
                    cp *= cc
            lost = log2abs(absum) - log2abs(total)
            if total > 0 and lost <= inner_guard - 8:
                return +total
            inner_guard = int(lost) + 24 if total > 0 else 2 * inner_guard + 32

    # the outer majorant (ORF terms) is in units of pref * e_k * g_0 * (1 + max(c, 0))^k
    growth = 1 + max(c, 0)
    total = mp.mpf(0)
    e_k = mp.mpf(1)  # Gamma(k+d)/Gamma(k+d/2) * Gamma(d/2)/Gamma(d) * x^k / k! (ORF term)
    e_scale = mp.gamma(mp.mpf(d)) / mp.gamma(h)  # undo the Gamma(d/2)/Gamma(d) normalisation
    g0 = g_list(0, prec + inner_guard)[0]
    for k in range(max_terms):
        total += e_k * inner(k)
        q = abs(x * ratio(k + 1)) * growth
        nxt = e_k * x * ratio(k) * growth ** (k + 1)
        if q < 1 and nxt * g0 <= eps * total * (1 - q):
            return pref * e_scale * total
        e_k = e_k * x * ratio(k)
    raise ConvergenceError(
        f"simrf_conformity_series: no convergence within {max_terms} outer terms at "
        f"x = v^2/2 = {mp.nstr(x, 8)}; this quadratic-cost form is meant for moderate v, "
        "use conformity_at_angle for large v or raise max_terms"
    )


@guarded()
def theta_conformity_series(d, v, cos_theta, max_terms=20_000):
    r"""Eq. ``theta_conformity`` with the integral done term by term (binomial
    expansion of :math:`(1+\sin\phi\cos\theta)^k`), for any :math:`\cos\theta`.

    At :math:`\cos\theta = -1/(d-1)` this is eq. ``simrf_conformity`` as printed.
    """
    d = check_dimension(d)
    vv = check_nonnegative(v, "v")
    c = check_cos_theta(cos_theta)
    return _theta_double_series(d, vv * vv / 2, c, max_terms)


# ---------------------------------------------------------------------------
# any angle: fast route and quadrature route


@guarded()
def conformity_at_angle(d, v, cos_theta):
    r"""Conformity :math:`\rho_\theta` of a pair of marginally Gaussian vectors
    conditioned to subtend a fixed angle (eq. ``theta_conformity``).

    Parameters
    ----------
    d : int >= 1
    v : real >= 0
        :math:`v = \|x + y\|`.
    cos_theta : real in [-1, 1]
        0 gives :math:`\rho_{\mathrm{ORF}}`, -1/(d-1) gives :math:`\rho_{\mathrm{SimRF}}`.

    Returns
    -------
    mpf
        :math:`\rho_\theta`, correct to the working precision.

    Notes
    -----
    Uses the Taylor expansion in :math:`\cos\theta` described in the module
    docstring, with a proved remainder bound and cancellation control
    (terms alternate when :math:`\cos\theta < 0`).  The number of terms grows
    like :math:`e\,|\cos\theta|\,v^2`, so this is fast whenever
    :math:`|\cos\theta| v^2` is moderate, e.g. for SimRFs at any d >= 3.
    """
    d = check_dimension(d)
    vv = check_nonnegative(v, "v")
    c = check_cos_theta(cos_theta)
    return _taylor_in_cos(d, vv * vv / 2, c)


def _taylor_in_cos(d, x, c):
    h = mp.mpf(d) / 2
    if c == 0 or x == 0:
        return mp.hyp1f1(d, h, x)

    def make_terms():
        y = mp.mpf(c) * x
        r_prev, r_cur = mp.mpf(1), _sin_moment_first(d)  # R_0, R_1
        coef = mp.mpf(1)  # y^p / p! * (d)_p / (d/2)_p
        p = 0
        while True:
            yield coef * mp.hyp1f1(d + p, h + p, x) * r_prev
            coef = coef * y / (p + 1) * (d + p) / (h + p)
            # R_{p+2} = R_p (d + p) / (d + p + 1)
            r_prev, r_cur = r_cur, r_prev * (d + p) / (d + p + 1)
            p += 1

    def ratio_bound(p):
        return abs(c * x) / (p + 1) * (d + p) / (h + p)

    return sum_series(make_terms, ratio_bound, what="conformity_at_angle (Taylor in cos theta)")


def hyp1f1_negative(a, b, x):
    r""":math:`{}_1F_1(a;b;x)` for :math:`x \le 0` with absolute accuracy near its zeros.

    On the negative axis 1F1 oscillates through zeros, where no relative
    accuracy exists; its natural scale is :math:`e^{x}` times a polynomial
    (Kummer).  mpmath is asked for relative accuracy except below
    :math:`e^{x}2^{-2p}`, where it may return 0 (``zeroprec``).
    """
    zp = 2 * mp.prec + 16 + int(-x / mp.ln2) if x < 0 else None
    return mp.hyp1f1(a, b, x, zeroprec=zp) if zp else mp.hyp1f1(a, b, x)


def _rff_even_taylor(d, zz, c):
    r"""RFF conformity at a fixed angle: :math:`\frac12(g(c) + g(-c))` with
    :math:`g(c) = \mathbb{E}_\phi[M(d,\frac d2,-\frac{z^2}{2}(1+c\sin\phi))]`, i.e. the
    even terms of the Taylor expansion in :math:`\cos\theta` at :math:`x = -z^2/2`.

    Remainder: the coefficients of M are positive, so
    :math:`|M^{(p)}(x)| \le M^{(p)}(|x|)` and the p-th term is at most
    :math:`T_p = \frac{(|c||x|)^p}{p!}M^{(p)}(|x|)R_p`, whose ratios are bounded by
    the non-increasing :math:`q_p = \frac{|c||x|}{p+1}\frac{d+p}{d/2+p}`; the sum of the
    terms after p is at most :math:`T_pq_p/(1-q_p)` once :math:`q_p<1`.
    """
    h = mp.mpf(d) / 2
    x = -zz * zz / 2
    if c == 0 or x == 0:
        return hyp1f1_negative(d, h, x)
    ax = abs(x)
    r1 = _sin_moment_first(d)

    def sin_moment(p):
        # R_p from R_0 = 1, R_1 and R_{p+2} = R_p (d + p)/(d + p + 1)
        r = mp.mpf(1) if p % 2 == 0 else r1
        for j in range(p % 2, p - 1, 2):
            r = r * (d + j) / (d + j + 1)
        return r

    def coef(p, y):
        out = mp.mpf(1)
        for j in range(p):
            out = out * y / (j + 1) * (d + j) / (h + j)
        return out

    def make_terms():
        y = mp.mpf(c) * x
        r_even = mp.mpf(1)
        cf = mp.mpf(1)  # y^p/p! (d)_p/(d/2)_p
        p = 0
        while True:
            yield cf * hyp1f1_negative(d + p, h + p, x) * r_even
            # advance by two: coefficient and R_{p+2} = R_p (d+p)/(d+p+1)
            cf = cf * y / (p + 1) * (d + p) / (h + p) * y / (p + 2) * (d + p + 1) / (h + p + 1)
            r_even = r_even * (d + p) / (d + p + 1)
            p += 2

    def remainder(k):
        p = 2 * k
        q = abs(c) * ax / (p + 1) * (d + p) / (h + p)
        if q >= 1:
            return mp.inf
        t = coef(p, abs(c) * ax) * mp.hyp1f1(d + p, h + p, ax) * sin_moment(p)
        return t * q / (1 - q)

    return sum_series(make_terms, remainder=remainder, what="rff_conformity_at_angle (even Taylor terms)")


@guarded()
def rff_conformity_at_angle(d, z, cos_theta):
    r"""RFF conformity of a pair at a fixed angle, :math:`\mathbb{E}[\cos(w_i^\top z)\cos(w_j^\top z)]`.

    Beyond the paper (App. A.5 stops at IID and ORF).  With
    :math:`\cos a\cos b = \frac12(\cos(a+b) + \cos(a-b))`: :math:`w_i+w_j` has
    the law of Lemma 4.2 at angle :math:`\theta`, and :math:`w_i-w_j` at angle
    :math:`\pi-\theta` (cosine :math:`-\cos\theta`); each expectation is the PRF
    form with :math:`v\to iz`:

    .. math::
        \rho^{\mathrm{RFF}}_\theta = \tfrac12\big(g(\cos\theta) + g(-\cos\theta)\big),\quad
        g(c) = \mathbb{E}_\phi\big[{}_1F_1(d;\tfrac d2;-\tfrac{z^2}{2}(1+c\sin\phi))\big],

    so only the even terms of the Taylor expansion in :math:`\cos\theta` survive.
    For :math:`\cos\theta = 0` this is :math:`{}_1F_1(d;\frac d2;-\frac{z^2}{2})` (Thm 4.5).
    """
    d = check_dimension(d)
    zz = check_nonnegative(z, "z")
    c = check_cos_theta(cos_theta)
    return _rff_even_taylor(d, zz, c)


@guarded()
def rff_conformity_at_angle_quad(d, z, cos_theta, maxdegree=None):
    r"""Independent route for :func:`rff_conformity_at_angle`: the two 1-D
    integrals :math:`\frac12\sum_\pm\mathbb{E}_\phi[{}_1F_1(d;\frac d2;-\frac{z^2}{2}(1\pm\cos\theta\sin\phi))]`
    by tanh-sinh quadrature (mpmath's 1F1 handles the alternating series)."""
    d = check_dimension(d)
    zz = check_nonnegative(z, "z")
    c = check_cos_theta(cos_theta)
    x = -zz * zz / 2
    h = mp.mpf(d) / 2
    return _sine_weighted_average(
        d, lambda s: (hyp1f1_negative(d, h, x * (1 + c * s)) + hyp1f1_negative(d, h, x * (1 - c * s))) / 2,
        "rff_conformity_at_angle_quad", maxdegree)


def _sine_weighted_average(d, f, what, maxdegree=None):
    r""":math:`\mathbb{E}_\phi[f(\sin\phi)]` for the density :math:`\sin^{d-1}\phi/J` on
    :math:`[0,\pi]`, :math:`1/J = \Gamma(d)/(2^{d-1}\Gamma(\frac d2)^2)`: tanh-sinh on
    :math:`[0,\pi/2]` (the integrand is symmetric about :math:`\pi/2`), broken where
    the weight concentrates for large d, with the error estimate checked."""
    log_norm = mp.loggamma(d) - (d - 1) * mp.log(2) - 2 * mp.loggamma(mp.mpf(d) / 2)

    def integrand(phi):
        s = mp.sin(phi)
        if s <= 0:
            return mp.mpf(0)
        return mp.exp((d - 1) * mp.log(s) + log_norm) * f(s)

    edge = mp.pi / 2 - min(mp.pi / 4, 6 / mp.sqrt(d))
    return 2 * quad_checked(integrand, [0, edge, mp.pi / 2], what=what, maxdegree=maxdegree)


@guarded()
def conformity_at_angle_quad(d, v, cos_theta, maxdegree=None):
    r"""Eq. ``theta_conformity`` as a one-dimensional integral of a 1F1.

    .. math::
        \rho_\theta = \frac{\Gamma(d)}{2^{d-1}\Gamma(\frac d2)^2}\int_0^\pi d\phi\,
        \sin^{d-1}\phi\; {}_1F_1\big(d;\tfrac d2;\tfrac{v^2}{2}(1+\sin\phi\cos\theta)\big)

    (the inner sum of eq. ``theta_conformity`` is this 1F1).  The integrand is
    symmetric about :math:`\pi/2`; tanh-sinh quadrature on :math:`[0,\pi/2]`
    with its error estimate checked.
    """
    d = check_dimension(d)
    vv = check_nonnegative(v, "v")
    c = check_cos_theta(cos_theta)
    x = vv * vv / 2
    h = mp.mpf(d) / 2
    return _sine_weighted_average(d, lambda s: mp.hyp1f1(d, h, x * (1 + c * s)), "conformity_at_angle_quad",
                                  maxdegree)


@guarded()
def conformity_from_moments(d, v, cos_theta, max_terms=5_000):
    r"""Conformity from its definition and exact moments, without Lemma 4.2.

    .. math::
        \rho_\theta = \Gamma(\tfrac d2)\sum_k\frac{v^{2k}\,
        \mathbb{E}[(w_i^2+w_j^2+2w_iw_j\cos\theta)^k]}{2^{2k}k!\,\Gamma(k+\frac d2)}

    with independent :math:`\chi_d` norms (the moments by the multinomial
    theorem, :func:`theory.distributions.wij_moment`).  Since
    :math:`w_{ij}^2 \le (1+\max(\cos\theta,0))(w_i^2+w_j^2)`, the k-th term is at
    most :math:`(1+\max(\cos\theta,0))^k` times the k-th ORF term, which bounds the
    remainder.  Cost grows like the cube of the number of terms: a check route.
    """
    d = check_dimension(d)
    vv = check_nonnegative(v, "v")
    c = check_cos_theta(cos_theta)
    x = vv * vv / 2
    h = mp.mpf(d) / 2
    growth = 1 + max(c, 0)
    ratio = _orf_ratio(d)
    eps = mp.mpf(2) ** (-mp.prec)
    total = mp.mpf(0)
    coef = mp.mpf(1)  # (v^2/4)^k Gamma(d/2) / (k! Gamma(k + d/2))
    orf_term = mp.mpf(1)  # k-th term of the ORF series (the majorant, up to growth^k)
    for k in range(max_terms):
        total += coef * _wij_moment(k, d, c)
        q = x * ratio(k + 1) * growth
        nxt = orf_term * x * ratio(k) * growth ** (k + 1)
        if q < 1 and nxt <= eps * total * (1 - q):
            return total
        coef = coef * vv * vv / (4 * (k + 1) * (k + h))
        orf_term = orf_term * x * ratio(k)
    raise ConvergenceError(f"conformity_from_moments: no convergence within {max_terms} terms; "
                           "use a smaller v or raise max_terms")


# ---------------------------------------------------------------------------
# public dispatch


@guarded()
def conformity(coupling, d, v):
    r"""RF-conformity of a coupled pair for a named coupling.

    Parameters
    ----------
    coupling : {'iid', 'orthogonal', 'simplex'}
    d : int
        Data dimensionality; >= 2 for the simplex coupling, else >= 1.
    v : real >= 0
        :math:`v = \|x + y\|_2`.

    Returns
    -------
    mpf
        :math:`e^{v^2}` (Lemma 4.1), :math:`{}_1F_1(d;\frac d2;\frac{v^2}{2})`
        (eq. ``orf_conformity``) or :math:`\rho_{\mathrm{SimRF}}`
        (eq. ``simrf_conformity``, evaluated by :func:`conformity_at_angle`).

    Examples
    --------
    >>> from mpmath import mp; import theory
    >>> with mp.workdps(30):
    ...     print(theory.conformity("simplex", 64, 1) < theory.conformity("orthogonal", 64, 1))
    True
    """
    coupling = check_coupling(coupling, has="prf_conformity")
    d = check_dimension(d, coupling)
    vv = check_nonnegative(v, "v")
    return hook(coupling, "prf_conformity")(d, vv)


def coupling_conformity_v2_coefficient(coupling, d):
    r"""Coefficient :math:`a` in :math:`\rho = 1 + a v^2 + O(v^4)` (registry hook ``prf_conformity_v2``).

    Evaluated at the current precision (internal helper of :mod:`theory.mse`).
    """
    return hook(coupling, "prf_conformity_v2")(d)


# ---------------------------------------------------------------------------
# registry hooks of the couplings with a fixed pair angle (iid, orthogonal, simplex)

register("iid", "prf_conformity", lambda d, vv: mp.exp(vv * vv))
register("orthogonal", "prf_conformity", lambda d, vv: mp.hyp1f1(d, mp.mpf(d) / 2, vv * vv / 2))
register("simplex", "prf_conformity", lambda d, vv: _taylor_in_cos(d, vv * vv / 2, simplex_cos(d)))


def _v2_fixed_angle(coupling):
    r""":math:`a = 1 + \cos\theta\,R_1` at a fixed angle, with
    :math:`R_1 = \Gamma(\frac{d+1}{2})^2/(\Gamma(\frac d2)\Gamma(\frac d2+1))` (1 for IID and ORF)."""

    def coefficient(d):
        return 1 + coupling_cos(coupling, d) * _sin_moment_first(d)

    return coefficient


register("iid", "prf_conformity_v2", lambda d: mp.mpf(1))
register("orthogonal", "prf_conformity_v2", lambda d: mp.mpf(1))
register("simplex", "prf_conformity_v2", _v2_fixed_angle("simplex"))
