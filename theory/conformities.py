r"""RF-conformities of IIDRFs, ORFs, SimRFs and any fixed angle (Sec. 4).

The routes and the derivation of the fast route: :ref:`guide-theory.conformities`
(``docs/guide/derivations.rst``).
"""

from __future__ import annotations

from ._context import mp

from .errors import ConvergenceError
from ._checks import (
    call_hook,
    check_coupling,
    check_cos_theta,
    check_dimension,
    check_nonnegative,
    guarded,
    half_square,
    square,
)
from ._context import check_time
from ._hypergeometric import hyp1f1_neg, hyp1f1_pos
from ._series import drop_scale, log2abs, peak_in_log, quad_checked, sum_ratio_series, sum_series
from .distributions import _wij_moment, coupling_cos, simplex_cos
from .registry import get as get_coupling, register
from .validation import show_int

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


#: Largest v (and z) any closed form accepts: beyond it e^{v^2} needs more than about 2^2000 of exponent
#: range to be resolved and the calls raise ConvergenceError (outside the reachable domain).
V_MAX = mp.mpf("1e300")


def check_v(value, name="v"):
    """v (or z) >= 0 as an mpf; ConvergenceError above :data:`V_MAX` (outside the reachable domain)."""
    x = check_nonnegative(value, name)
    if x > V_MAX:
        with mp.workprec(64):  # (nstr of the exact mantissa of "1e100000" exceeds Python's int-to-str limit)
            shown = mp.nstr(+x, 5)
        raise ConvergenceError(f"{name} = {shown} is beyond the reachable domain of the closed forms "
                               f"({name} <= 1e300)")
    return x


def _exp_square(x):
    """e^{x^2} with x^2 formed exactly (no rounding of the exponent's argument)."""
    return mp.exp(square(x))


@guarded(grid=("d", "v"))
def conformity_iid(d, v):
    r"""IIDRF conformity :math:`\rho_{\mathrm{IIDRF}} = e^{v^2}` (eq. ``iidrf_conformity``).

    Domain: any d >= 1, :math:`0 \le v \le 10^{300}` (above, ConvergenceError).
    """
    check_dimension(d)
    vv = check_v(v)
    return _exp_square(vv)


# ---------------------------------------------------------------------------
# ORF (Thm 4.3, eq. orf_conformity)


@guarded(grid=("d", "v"))
def conformity_orthogonal(d, v):
    r"""ORF conformity as a confluent hypergeometric function.

    .. math:: \rho_{\mathrm{ORF}} = {}_1F_1(d; \tfrac d2; \tfrac{v^2}{2})

    which is eq. ``orf_conformity`` summed in closed form
    (:math:`\frac{\Gamma(d/2)\Gamma(k+d)}{\Gamma(d)\Gamma(k+d/2)} = \frac{(d)_k}{(d/2)_k}`).

    Domain: even d any size, odd d <= 4097, and :math:`v \le 10^{300}`; for
    larger odd d the middle range :math:`d \lesssim v^2/2 \lesssim d^2` raises
    ConvergenceError (see :ref:`theory._hypergeometric <guide-theory._hypergeometric>` for the routes).
    """
    d = check_dimension(d)
    vv = check_v(v)
    return _orf(d, vv)


def _orf(d, vv):
    return hyp1f1_pos(mp.mpf(d), mp.mpf(d) / 2, half_square(vv),
                      f"ORF conformity 1F1(d; d/2; v^2/2) at d = {show_int(d)}")


@guarded(grid=("d", "v"))
def orf_conformity_series(d, v):
    r"""Eq. ``orf_conformity`` summed term by term as printed.

    .. math:: \rho_{\mathrm{ORF}} = \frac{\Gamma(\frac d2)}{\Gamma(d)}\sum_{k\ge0}
              \frac{v^{2k}}{2^kk!}\frac{\Gamma(k+d)}{\Gamma(k+\frac d2)}

    The term ratio :math:`\frac{(k+d)}{(k+d/2)(k+1)}\frac{v^2}{2}` is
    non-increasing in k, which gives a proved remainder bound.
    """
    d = check_dimension(d)
    vv = check_v(v)
    return sum_ratio_series(_orf_ratio(d), half_square(vv), what="orf_conformity_series")


@guarded(grid=("d", "v"))
def orf_conformity_kummer(d, v):
    r"""ORF conformity via Kummer's transformation (even d only).

    :math:`M(d, \frac d2, x) = e^x M(-\frac d2, \frac d2, -x)`; for even d the
    second factor is a polynomial of degree d/2 (a Laguerre polynomial), so the
    sum is finite and exact.  Raises ValueError for odd d.
    """
    d = check_dimension(d)
    if d % 2:
        raise ValueError(f"d must be even for the Kummer route (a finite sum), got {show_int(d)}")
    vv = check_v(v)
    x = half_square(vv)
    n = d // 2
    what = (f"orf_conformity_kummer at d = {show_int(d)} (a finite sum of d/2 = {show_int(n)} terms; "
            "conformity_orthogonal is O(1) in d)")
    term = mp.mpf(1)
    total = mp.mpf(1)
    for j in range(n):
        if j % 256 == 0:
            check_time(what, units=min(256, n - j))  # up to 256 terms of a few products
        # (-n)_j / (n)_j * (-x)^j / j!  ->  ratio (j - n)/((n + j)(j + 1)) * (-x)
        term *= mp.mpf(j - n) / ((n + j) * (j + 1)) * (-x)
        total += term
    return mp.exp(x) * total


# ---------------------------------------------------------------------------
# SimRF (Thm 4.3, eq. simrf_conformity)


@guarded(grid=("d", "v"))
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
    Cost is quadratic in the number of terms (about :math:`2ev^2` of them):
    this is the reference form, not the fast one (see
    :func:`conformity_at_angle`).  Domain: :math:`v^2 \le 200` (beyond it,
    or past ``max_terms``, ConvergenceError at once).
    """
    d = check_dimension(d, "simplex")
    vv = check_v(v)
    return _theta_double_series(d, half_square(vv), simplex_cos(d), max_terms)


#: Largest x = v^2/2 of the quadratic-cost double series (about 6 x e outer terms).
DOUBLE_SERIES_X_MAX = 100


def _theta_double_series(d, x, c, max_terms):
    """Eq. simrf_conformity generalised to any cos(theta) = c (the binomial
    expansion of eq. theta_conformity): sum_k e_k x^k H_k, H_k = sum_p C(k,p) c^p g_p."""
    if x > DOUBLE_SERIES_X_MAX or 3 * x * mp.e > max_terms:
        raise ConvergenceError(
            f"the printed double series at x = v^2/2 = {mp.nstr(x, 6)} needs about {int(3 * x * mp.e) + 40} outer "
            f"terms at quadratic cost (domain x <= {DOUBLE_SERIES_X_MAX}, max_terms = {max_terms}); "
            "use conformity_at_angle (or theory.conformity) for large v")
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
        for _ in range(12):
            check_time("double series (eq. simrf_conformity)")
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
        raise ConvergenceError("double series: an inner alternating sum cancels beyond 12 precision increases")

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


@guarded(grid=("d", "v", "cos_theta"))
def theta_conformity_series(d, v, cos_theta, max_terms=20_000):
    r"""Eq. ``theta_conformity`` with the integral done term by term (binomial
    expansion of :math:`(1+\sin\phi\cos\theta)^k`), for any :math:`\cos\theta`.

    At :math:`\cos\theta = -1/(d-1)` this is eq. ``simrf_conformity`` as printed.
    Domain as :func:`simrf_conformity_series` (:math:`v^2 \le 200`).
    """
    d = check_dimension(d)
    vv = check_v(v)
    c = check_cos_theta(cos_theta)
    return _theta_double_series(d, half_square(vv), c, max_terms)


# ---------------------------------------------------------------------------
# any angle: fast route and quadrature route

#: The Taylor route in cos(theta) is used while ``|cos theta| x <= TAYLOR_MAX`` (about
#: e * TAYLOR_MAX + 40 terms, each a 1F1; for cos theta < 0 they alternate and cancel about
#: 2.9 * TAYLOR_MAX bits); beyond it the quadrature route (positive integrand, Laplace-aware
#: breakpoints) is used.
TAYLOR_MAX = 64

#: For odd d the RFF forms at an angle evaluate many half-integer-degree 1F1s, each costing about
#: 1.45 z^2/2 guard bits once z^2/2 > d (see theory._hypergeometric): they are attempted up to
#: z^2/2 = max(d, ODD_RFF_Y_MAX), and again from the asymptotic range z^2/2 >= 4 (d + 1)^2 on.
ODD_RFF_Y_MAX = 2000


@guarded(grid=("d", "v", "cos_theta"))
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

    Raises
    ------
    theory.errors.ConvergenceError
        Outside the reachable domain or past the work budget.

    Notes
    -----
    Two routes.  While :math:`|\cos\theta|\,v^2/2 \le` :data:`TAYLOR_MAX`, the
    Taylor expansion in :math:`\cos\theta` described in :ref:`guide-theory.conformities`,
    with a proved remainder bound and cancellation control (terms alternate
    when :math:`\cos\theta < 0`; about :math:`e|\cos\theta|v^2/2` terms).  Beyond,
    eq. ``theta_conformity`` as a one-dimensional integral over
    :math:`\phi` (:func:`conformity_at_angle_quad`), whose integrand is positive
    and peaked where :math:`\sin^{d-1}\phi\,e^{x\cos\theta\sin\phi}` is largest:
    the peak is located and the interval broken around it on its own scale.

    Domain: d >= 1 (the 1F1 domain of :func:`conformity_orthogonal`), any
    :math:`\cos\theta`, :math:`v \le 10^{300}`.
    """
    d = check_dimension(d)
    vv = check_v(v)
    c = check_cos_theta(cos_theta)
    return _prf_at_angle(d, half_square(vv), c)


def _prf_at_angle(d, x, c):
    if c == 0 or x == 0:
        return hyp1f1_pos(mp.mpf(d), mp.mpf(d) / 2, x, "conformity 1F1")
    if abs(c) * x <= TAYLOR_MAX:
        return _taylor_in_cos(d, x, c)
    return _prf_quad(d, x, c)


def _magnitude_bits(x):
    """Extra bits so that x (1 + c sin(phi)) is formed to the working precision in absolute terms:
    the integrands exponentiate it."""
    return max(0, int(mp.mag(x))) + 8 if x else 0


def _prf_quad(d, x, c, maxdegree=None):
    r""":math:`\rho_\theta` by quadrature of eq. ``theta_conformity``, with the integrand in log form.

    :math:`\log M(d,\frac d2,t) - x` is formed without the huge :math:`t = x(1+c\sin\phi)`
    itself, from the large-t expansion
    :math:`M(d,\frac d2,t) = \frac{\Gamma(d/2)}{\Gamma(d)}e^tt^{d/2}\sum_{k<d}
    \frac{(-d/2)_k(1-d)_k}{k!}t^{-k} + R` (a finite sum), so that
    :math:`t - x = xc\sin\phi` is exact to the working precision whatever x, wherever
    :func:`_large_t_expansion_holds`: :math:`t \ge d` and :math:`R` below the working precision
    (:math:`R = 0` for even d; for odd d, DLMF 13.2.41 with :math:`U(d, \frac d2, t) \le t^{-d}`
    bounds :math:`|R|` relative to the sum by :math:`\Gamma(d)\Gamma(1+\frac d2)\,e^{-t}t^{-3d/2}/\pi`,
    the sum being at least 1 for :math:`t \ge d`).  Elsewhere from
    :func:`theory._hypergeometric.hyp1f1_pos`.  (Before, the expansion waited for
    :math:`t \ge \max(d^2, 2p + 128)`: at d = 267, v = 43.79, 120 digits every node went through
    mpmath's series, 48 s for one value; the sum is formed in fixed point, :func:`_large_t_sum`: 2.5 s now.)
    """
    dd, h = mp.mpf(d), mp.mpf(d) / 2
    holds = _large_t_expansion_holds(d)
    log_gamma_ratio = mp.loggamma(h) - mp.loggamma(dd)
    what = "conformity_at_angle (quadrature route)"
    what_d = f"{what} at d = {show_int(d)} (large-argument expansion of 1F1(d; d/2; t), up to d terms)"

    def one_plus_cs(phi, s):
        if c == -1:
            return mp.cos(phi) ** 2 / (1 + s)  # 1 - sin(phi) without cancellation
        return 1 + c * s

    def log_f(phi, s):
        t = x * one_plus_cs(phi, s)
        if holds(t):
            total = _large_t_sum(d, t, what_d)
            return log_gamma_ratio + x * c * s + h * mp.log(t) + mp.log(total), 1
        return mp.log(hyp1f1_pos(dd, h, t, what)) - x, 1

    return _sine_weighted_average(d, log_f, what, maxdegree, offset=x)


def _large_t_sum(d, t, what):
    r""":math:`\sum_{k<d}\frac{(-d/2)_k(1-d)_k}{k!}t^{-k}` for :math:`t \ge d`, to the working precision.

    In fixed point (Python integers with F = p + 2 log2(d) + 24 fraction bits; each term from the last by one
    product with 1/t and the exact ratio :math:`(2k-d)(k+1-d)/(2(k+1))`), about 20x faster than mpf arithmetic.
    The sum is at least 1 and at least its largest term for :math:`t \ge d` (positive terms up to k = d/2, then
    alternating terms of falling size), so the <= d roundings of 2^-F, carried at most by the largest term's
    growth, stay below 2^-p relative.  Stops where the next terms cannot matter: the term below 2^-(p+2) of the
    sum, in the alternating tail or with the (falling) positive ratio <= 1/2."""
    prec = mp.prec
    frac = prec + 2 * int(d).bit_length() + 24
    with mp.workprec(frac + 8):
        inv_t = int(mp.nint(mp.ldexp(1 / mp.mpf(t), frac)))
    one = 1 << frac
    term = total = one
    for k in range(d):
        if k % 64 == 63:
            check_time(what, units=16)  # 64 terms of a few integer products
        num, den = (2 * k - d) * (k + 1 - d), 2 * (k + 1)
        term = ((term * inv_t) >> frac) * num // den
        total += term
        if abs(term) << (prec + 2) < total and (2 * k > d or abs(num) * inv_t <= (k + 1) << frac):
            break
    return mp.ldexp(mp.mpf(total), -frac)


def _large_t_expansion_holds(d):
    """A test ``holds(t)``: True where :func:`_prf_quad`'s finite large-t expansion of M(d, d/2, t) is exact to
    the working precision (16 guard bits): t >= d and, for odd d, the omitted part's bound
    log(Gamma(d) Gamma(1 + d/2) / pi) - t - (3d/2) log t below -(p + 16) log 2."""
    dd = mp.mpf(d)
    if d % 2 == 0:
        return lambda t: t >= dd
    log_c = mp.loggamma(dd) + mp.loggamma(1 + dd / 2) - mp.log(mp.pi)
    need = -(mp.prec + 16) * mp.ln2
    return lambda t: t >= dd and log_c - t - 3 * dd / 2 * mp.log(t) <= need


def _taylor_in_cos(d, x, c):
    h = mp.mpf(d) / 2
    dd = mp.mpf(d)
    if c == 0 or x == 0:
        return hyp1f1_pos(dd, h, x, "conformity 1F1")

    def make_terms():
        y = mp.mpf(c) * x
        r_prev, r_cur = mp.mpf(1), _sin_moment_first(d)  # R_0, R_1
        coef = mp.mpf(1)  # y^p / p! * (d)_p / (d/2)_p
        p = 0
        while True:
            yield coef * hyp1f1_pos(dd + p, h + p, x, "conformity_at_angle (Taylor in cos theta)") * r_prev
            coef = coef * y / (p + 1) * (d + p) / (h + p)
            # R_{p+2} = R_p (d + p) / (d + p + 1)
            r_prev, r_cur = r_cur, r_prev * (d + p) / (d + p + 1)
            p += 1

    def ratio_bound(p):
        return abs(c * x) / (p + 1) * (d + p) / (h + p)

    return sum_series(make_terms, ratio_bound, what="conformity_at_angle (Taylor in cos theta)")


def _rff_at_angle(d, zz, c):
    r"""RFF conformity at a fixed angle: the even Taylor terms (:func:`_rff_even_taylor`) while
    :math:`|\cos\theta|z^2/2 \le` :data:`TAYLOR_MAX`, else the quadrature route."""
    y = half_square(zz)
    if c == 0 or y == 0:
        return hyp1f1_neg(mp.mpf(d), mp.mpf(d) / 2, y, "RFF conformity 1F1(d; d/2; -z^2/2)")
    if d % 2 and max(d, ODD_RFF_Y_MAX) < y < 4 * (d + 1) ** 2 + 2 * mp.prec:
        raise ConvergenceError(
            f"RFF conformity at an angle: z^2/2 = {mp.nstr(y, 6)} is outside the reachable domain for odd "
            f"d = {show_int(d)} "
            f"(z^2/2 <= max(d, {ODD_RFF_Y_MAX}) or >= 4 (d + 1)^2: in between each of the many 1F1 evaluations "
            "needs about 1.45 z^2/2 guard bits); use an even d nearby")
    if abs(c) * y <= TAYLOR_MAX:
        return _rff_even_taylor(d, zz, c)
    return _rff_quad(d, y, c)


def _rff_quad(d, y, c, maxdegree=None):
    dd, h = mp.mpf(d), mp.mpf(d) / 2
    what = "rff_conformity_at_angle (quadrature route)"

    def log_f(phi, s):
        val = (hyp1f1_neg(dd, h, y * (1 + c * s), what, absolute=True)
               + hyp1f1_neg(dd, h, y * (1 - c * s), what, absolute=True)) / 2
        return (mp.log(abs(val)), 1 if val > 0 else -1) if val else (-mp.inf, 0)

    with mp.workprec(mp.prec + _magnitude_bits(y)):
        return _sine_weighted_average(d, log_f, what, maxdegree)


def _rff_even_taylor(d, zz, c):
    r"""RFF conformity at a fixed angle: :math:`\frac12(g(c) + g(-c))` with
    :math:`g(c) = \mathbb{E}_\phi[M(d,\frac d2,-\frac{z^2}{2}(1+c\sin\phi))]`, i.e. the
    even terms of the Taylor expansion in :math:`\cos\theta` at :math:`x = -z^2/2`.

    Remainder: :math:`M(d,\frac d2,-t) = \mathbb E[{}_0F_1(;\frac d2;-tw^2/2)]` with
    :math:`w\sim\chi_{2d}` (the ORF form of App. A.5), so
    :math:`M^{(p)}(-t) = \mathbb E[(-w^2/2)^p\,{}_0F_1(;\frac d2+p;-tw^2/2)]/(\frac d2)_p`, and
    :math:`|{}_0F_1(;b;-u)| \le 1` for :math:`b \ge \frac12` (the Bessel bound
    :math:`|\Gamma(\nu+1)(2/x)^\nu J_\nu(x)| \le 1`, :math:`\nu \ge -\frac12`) gives
    :math:`|M^{(p)}(-t)| \le \mathbb E[(w^2/2)^p]/(\frac d2)_p = (d)_p/(\frac d2)_p = M^{(p)}(0)`
    for every :math:`t \ge 0`.  The p-th term is therefore at most
    :math:`T_p = \frac{(|c||x|)^p}{p!}\frac{(d)_p}{(d/2)_p}R_p`, whose ratios are bounded by
    the non-increasing :math:`q_p = \frac{|c||x|}{p+1}\frac{d+p}{d/2+p}`; the sum of the
    terms after p is at most :math:`T_pq_p/(1-q_p)` once :math:`q_p<1` (a bound free of
    :math:`e^{|x|}`, which the cruder :math:`M^{(p)}(|x|)` would carry).

    For even d the bound also carries :math:`e^{-t/2}`: by Kummer's transformation
    :math:`M(d+p,\frac d2+p,-t) = e^{-t}M(-\frac d2,\frac d2+p,t)`, a Laguerre polynomial
    :math:`\frac{n!}{(\alpha+1)_n}L_n^{(\alpha)}(t)` with :math:`n = \frac d2`,
    :math:`\alpha = \frac d2+p-1 \ge 0`, and Szego's bound
    :math:`|L_n^{(\alpha)}(t)| \le \frac{(\alpha+1)_n}{n!}e^{t/2}` (DLMF 18.14.8) gives
    :math:`|M(d+p,\frac d2+p,-t)| \le e^{-t/2}`.
    """
    h = mp.mpf(d) / 2
    dd = mp.mpf(d)
    ax = half_square(zz)
    what = "rff_conformity_at_angle (even Taylor terms)"
    if c == 0 or ax == 0:
        return hyp1f1_neg(dd, h, ax, what)
    r1 = _sin_moment_first(d)
    # The remainder bound at p = 2k needs R_p and the coefficient at p, products of p factors; they are
    # extended from the last p asked at this precision (a cache: the same products in the same order, so
    # the same bits as from scratch, at O(1) instead of O(p) per term).  The work charged is still that of
    # the products from scratch (the budget's behaviour is unchanged).
    prefix = {}  # (which, parity or y, prec) -> (p, value)

    def sin_moment(p):
        # R_p from R_0 = 1, R_1 and R_{p+2} = R_p (d + p)/(d + p + 1)
        for j in range(p % 2, p - 1, 1024):
            check_time(what, units=min(512, (p - j) // 2))  # up to 512 steps of a few products
        key = ("R", p % 2, mp.prec)
        start, r = prefix.get(key, (p % 2, None))
        if r is None or start > p:
            start, r = p % 2, (mp.mpf(1) if p % 2 == 0 else r1)
        for j in range(start, p - 1, 2):
            r = r * (d + j) / (d + j + 1)
        prefix[key] = (max(start, p), r)
        return r

    def coef(p, y):
        for _ in range(1023, p, 1024):
            check_time(what, units=1024)  # 1024 steps of a few products
        key = ("coef", y, mp.prec)
        start, out = prefix.get(key, (0, None))
        if out is None or start > p:
            start, out = 0, mp.mpf(1)
        for j in range(start, p):
            out = out * y / (j + 1) * (d + j) / (h + j)
        prefix[key] = (max(start, p), out)
        return out

    known = {}  # p -> M(d + p, d/2 + p, -t) at the precision of the current pass

    def f(p):
        if p not in known:
            known[p] = hyp1f1_neg(dd + p, h + p, ax, what)
        return known[p]

    def make_terms():
        known.clear()  # a new pass (more bits after cancellation) recomputes the values
        y = -mp.mpf(c) * ax
        r_even = mp.mpf(1)
        cf = mp.mpf(1)  # y^p/p! (d)_p/(d/2)_p
        p = 0
        while True:
            yield cf * f(p) * r_even
            # advance by two: coefficient and R_{p+2} = R_p (d+p)/(d+p+1)
            cf = cf * y / (p + 1) * (d + p) / (h + p) * y / (p + 2) * (d + p + 1) / (h + p + 1)
            r_even = r_even * (d + p) / (d + p + 1)
            p += 2

    cap = mp.exp(-ax / 2) if d % 2 == 0 else mp.mpf(1)  # |M(d+p, d/2+p, -t)| <= cap for every p

    def remainder(k):
        p = 2 * k
        q = abs(c) * ax / (p + 1) * (d + p) / (h + p)
        cf = coef(p, abs(c) * ax)
        bound = mp.inf
        if q < 1:
            # |M^{(p)}(-t)| <= (d)_p/(d/2)_p (in coef) times cap (Szego for even d)
            bound = cf * sin_moment(p) * cap * q / (1 - q)
        if p >= 2 and k % 2 == 0:  # every other check: the bound that follows the values (one more 1F1)
            try:
                bound = min(bound, _recurrence_tail(d, h, ax, abs(c), p, cf, f(p - 1), f(p), cap))
            except ConvergenceError:
                # f_{p-1} at an exact zero has no relative accuracy (d = 2: M(9, 8, -8) = 0): skip this
                # optional bound; a spent work budget raises again here and propagates
                check_time(what)
        return bound

    return sum_series(make_terms, remainder=remainder, what=what)


def _recurrence_tail(d, h, t, cabs, p, cf, f_prev, f_p, cap, max_steps=20_000):
    r"""A proved bound on :math:`\sum_{k>p}\frac{(|c|t)^k}{k!}\frac{(d)_k}{(d/2)_k}R_k|f_k|`,
    :math:`f_k = M(d+k, \frac d2+k, -t)`, from the computed :math:`f_{p-1}, f_p` and the
    coefficient ``cf`` :math:`= \frac{(|c|t)^p}{p!}\frac{(d)_p}{(d/2)_p}` at k = p.

    DLMF 13.3.7, :math:`azM(a+1,b+1,z) = b(1-b+z)M(a,b,z) + b(b-1)M(a-1,b-1,z)` at
    :math:`a = d+k`, :math:`b = \frac d2+k`, :math:`z = -t`, gives
    :math:`|f_{k+1}| \le A_k|f_k| + B_k|f_{k-1}|` with
    :math:`A_k = b|b-1+t|/(at)`, :math:`B_k = b|b-1|/(at)`; the majorant
    :math:`g_k = \min(A_{k-1}g_{k-1} + B_{k-1}g_{k-2},\ \mathrm{cap})` starts from the computed values
    (inflated by :math:`2^{8-p}` for their rounding) and bounds :math:`|f_k|` by induction.  With
    :math:`R_k \le 1` the tail is summed term by term until the cap's geometric tail
    :math:`T_kq_k/(1-q_k)` is below a thousandth of the sum (then added), so the bound follows the
    size of the values instead of the a-priori cap, which is what the series needs when the value
    is tiny (:math:`10^{-2066}`-sized at d = 65536, z = 67.6).
    """
    slack = 1 + mp.mpf(2) ** (8 - mp.prec)
    g_prev, g = abs(f_prev) * slack, abs(f_p) * slack
    total = mp.mpf(0)
    k = p
    for step in range(max_steps):
        if step % 1024 == 1023:
            check_time("rff_conformity_at_angle (remainder bound of the even Taylor terms)", units=1024)
        a, b = d + k, h + k
        g_prev, g = g, min((b * abs(b - 1 + t) * g + b * abs(b - 1) * g_prev) / (a * t), cap)
        cf = cf * cabs * t / (k + 1) * (d + k) / (h + k)
        k += 1
        total += cf * g
        q = cabs * t / (k + 1) * (d + k) / (h + k)
        if q < 1:
            cap_tail = cf * cap * q / (1 - q)
            if cap_tail <= total / 1000:
                return total + cap_tail
    return mp.inf


@guarded(grid=("d", "z", "cos_theta"))
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
    For :math:`\cos\theta = 0` this is :math:`{}_1F_1(d;\frac d2;-\frac{z^2}{2})` (Thm 4.5),
    evaluated with relative accuracy (:ref:`theory._hypergeometric <guide-theory._hypergeometric>`).

    Routes: the even Taylor terms while :math:`|\cos\theta|z^2/2 \le` :data:`TAYLOR_MAX`,
    else the quadrature route (:func:`rff_conformity_at_angle_quad`; there the
    integrand has one sign, :math:`z^2/2` being far beyond the last zero of
    the 1F1).  Domain: d >= 1, any :math:`\cos\theta`; z as stated for the simplex
    angle in :func:`theory.rff_conformity` (every d for :math:`z \le 10`; beyond, the
    1F1 terms grow costly with d and z, and ConvergenceError is raised within the time
    budget where it runs out).
    """
    d = check_dimension(d)
    zz = check_v(z, "z")
    c = check_cos_theta(cos_theta)
    return _rff_at_angle(d, zz, c)


@guarded(grid=("d", "z", "cos_theta"))
def rff_conformity_at_angle_quad(d, z, cos_theta, maxdegree=None):
    r"""Independent route for :func:`rff_conformity_at_angle`: the two 1-D
    integrals :math:`\frac12\sum_\pm\mathbb{E}_\phi[{}_1F_1(d;\frac d2;-\frac{z^2}{2}(1\pm\cos\theta\sin\phi))]`
    by tanh-sinh quadrature, the interval broken around the integrand's peak.

    Where the integrand changes sign many times (large d and
    :math:`z^2/2` inside the oscillation range of the 1F1, about
    :math:`0.1d \lesssim z^2/2 \lesssim 3d`) the quadrature may not reach
    relative accuracy; it then raises ConvergenceError.
    """
    d = check_dimension(d)
    zz = check_v(z, "z")
    c = check_cos_theta(cos_theta)
    return _rff_quad(d, half_square(zz), c, maxdegree)


def _sine_weighted_average(d, log_f, what, maxdegree=None, offset=0):
    r""":math:`\mathbb{E}_\phi[f]` for the density :math:`\sin^{d-1}\phi/J` on
    :math:`[0,\pi]`, :math:`1/J = \Gamma(d)/(2^{d-1}\Gamma(\frac d2)^2)`, by tanh-sinh
    quadrature on :math:`[0,\pi/2]` (the integrand is symmetric about :math:`\pi/2`).

    ``log_f(phi, sin_phi)`` returns :math:`(\log|f| - \mathrm{offset}, \operatorname{sign} f)`
    (f in log form, so that huge or tiny integrands need no extra precision).
    Breakpoints follow the integrand: the maximum :math:`\phi^*` of
    :math:`\lambda(\phi) = (d-1)\log\sin\phi + \log|f|` is found by a
    scan and golden-section search in :math:`u = \log\phi`, the scale
    :math:`w` on which :math:`\lambda` drops by 2 is measured on each side, and
    the interval is broken at :math:`u^* \pm w\,2^k` (k = -1, 1, 3, 5, 7), so that each
    piece holds a smooth part of the integrand whatever the scale of the peak
    (it moves from :math:`\pi/2` for large d to :math:`\approx (d-1)/(x|\cos\theta|)`
    for the PRF at large :math:`x = v^2/2` and :math:`\cos\theta < 0`).  The
    quadrature's error estimate is checked (:func:`theory._series.quad_checked`).
    """
    log_norm = mp.loggamma(d) - (d - 1) * mp.log(2) - 2 * mp.loggamma(mp.mpf(d) / 2)
    half_pi = mp.pi / 2
    u_hi = mp.log(half_pi)

    def lam_phi(phi):
        s = mp.sin(phi)
        if s <= 0:
            return -mp.inf, 0
        lf, sign = log_f(phi, s)
        return (d - 1) * mp.log(s) + lf, sign

    def lam(u):
        return lam_phi(mp.exp(u))[0]

    peak_u, peak = peak_in_log(lam, u_hi, what)
    if peak == -mp.inf:
        return mp.mpf(0)
    points = {mp.mpf(0), half_pi}
    for side in (-1, 1):
        if side == 1 and peak_u >= u_hi:
            continue
        w = drop_scale(lam, peak_u, peak, side, u_hi)
        for k in (-1, 1, 3, 5, 7):
            u = peak_u + side * w * mp.mpf(2) ** k
            if u < u_hi:
                points.add(mp.exp(u))
    points.add(mp.exp(peak_u) if peak_u < u_hi else half_pi)
    points = sorted(points)

    def integrand(phi):
        val, sign = lam_phi(phi)
        return sign * mp.exp(val - peak) if sign else mp.mpf(0)

    total = quad_checked(integrand, points, what=what, maxdegree=maxdegree, units=30)  # about 300 us per node
    # offset (exact, possibly huge) is exponentiated on its own: adding it to the O(d) rest first
    # would round away its fraction
    return 2 * mp.exp(offset) * mp.exp(log_norm + peak) * total


@guarded(grid=("d", "v", "cos_theta"))
def conformity_at_angle_quad(d, v, cos_theta, maxdegree=None):
    r"""Eq. ``theta_conformity`` as a one-dimensional integral of a 1F1.

    .. math::
        \rho_\theta = \frac{\Gamma(d)}{2^{d-1}\Gamma(\frac d2)^2}\int_0^\pi d\phi\,
        \sin^{d-1}\phi\; {}_1F_1\big(d;\tfrac d2;\tfrac{v^2}{2}(1+\sin\phi\cos\theta)\big)

    (the inner sum of eq. ``theta_conformity`` is this 1F1).  The integrand is
    symmetric about :math:`\pi/2` and positive; tanh-sinh quadrature on
    :math:`[0,\pi/2]`, broken around its peak (see
    :func:`conformity_at_angle`), with its error estimate checked.
    """
    d = check_dimension(d)
    vv = check_v(v)
    c = check_cos_theta(cos_theta)
    return _prf_quad(d, half_square(vv), c, maxdegree)


@guarded(grid=("d", "v", "cos_theta"))
def conformity_from_moments(d, v, cos_theta, max_terms=5_000):
    r"""Conformity from its definition and exact moments, without Lemma 4.2.

    .. math::
        \rho_\theta = \Gamma(\tfrac d2)\sum_k\frac{v^{2k}\,
        \mathbb{E}[(w_i^2+w_j^2+2w_iw_j\cos\theta)^k]}{2^{2k}k!\,\Gamma(k+\frac d2)}

    with independent :math:`\chi_d` norms (the moments by the multinomial
    theorem, :func:`theory.distributions.wij_moment`).  Since
    :math:`w_{ij}^2 \le (1+\max(\cos\theta,0))(w_i^2+w_j^2)`, the k-th term is at
    most :math:`(1+\max(\cos\theta,0))^k` times the k-th ORF term, which bounds the
    remainder.  Cost grows like the cube of the number of terms (about
    :math:`2ev^2`): a check route for :math:`v^2 \le 100` (beyond,
    ConvergenceError at once).
    """
    d = check_dimension(d)
    vv = check_v(v)
    c = check_cos_theta(cos_theta)
    x = half_square(vv)
    if x > DOUBLE_SERIES_X_MAX / 2 or 3 * x * mp.e > max_terms:
        raise ConvergenceError(
            f"conformity_from_moments at x = v^2/2 = {mp.nstr(x, 6)} needs about {int(3 * x * mp.e) + 40} terms "
            f"at cubic cost (domain x <= {DOUBLE_SERIES_X_MAX // 2}); use conformity_at_angle for large v")
    h = mp.mpf(d) / 2
    growth = 1 + max(c, 0)
    ratio = _orf_ratio(d)
    eps = mp.mpf(2) ** (-mp.prec)
    total = mp.mpf(0)
    coef = mp.mpf(1)  # (v^2/4)^k Gamma(d/2) / (k! Gamma(k + d/2))
    orf_term = mp.mpf(1)  # k-th term of the ORF series (the majorant, up to growth^k)
    for k in range(max_terms):
        check_time("conformity_from_moments")
        total += coef * _wij_moment(k, d, c)
        q = x * ratio(k + 1) * growth
        nxt = orf_term * x * ratio(k) * growth ** (k + 1)
        if q < 1 and nxt <= eps * total * (1 - q):
            return total
        coef = coef * x / (2 * (k + 1) * (k + h))
        orf_term = orf_term * x * ratio(k)
    raise ConvergenceError(f"conformity_from_moments: no convergence within {max_terms} terms; "
                           "use a smaller v or raise max_terms")


# ---------------------------------------------------------------------------
# public dispatch


@guarded(grid=("d", "v"))
def conformity(coupling, d, v):
    r"""RF-conformity of a coupled pair for a named coupling.

    Parameters
    ----------
    coupling : str
        A coupling with a PRF closed form (``theory.PRF_COUPLINGS``: 'iid',
        'orthogonal', 'simplex', ...).
    d : int or array_like of int
        Data dimensionality; >= 2 for the simplex coupling, else >= 1.
    v : real >= 0 or array_like
        :math:`v = \|x + y\|_2` (a decimal string is read exactly).

    Returns
    -------
    mpf, or numpy object array of mpf
        :math:`e^{v^2}` (Lemma 4.1), :math:`{}_1F_1(d;\frac d2;\frac{v^2}{2})`
        (eq. ``orf_conformity``) or :math:`\rho_{\mathrm{SimRF}}`
        (eq. ``simrf_conformity``, evaluated by :func:`conformity_at_angle`);
        an array of the broadcast shape of d and v when either is a sequence
        or array.

    Raises
    ------
    theory.errors.ConvergenceError
        Outside the reachable domain (see :func:`conformity_at_angle`) or
        past the work budget (:func:`theory.budget`).

    Examples
    --------
    >>> from mpmath import mp; import theory
    >>> with mp.workdps(30):
    ...     print(theory.conformity("simplex", 64, 1) < theory.conformity("orthogonal", 64, 1))
    True
    """
    coupling = check_coupling(coupling, has="prf_conformity")
    d = check_dimension(d, coupling)
    vv = check_v(v)
    return call_hook(coupling, "prf_conformity", d, vv)


def coupling_conformity_v2_coefficient(coupling, d):
    r"""Coefficient :math:`a` in :math:`\rho = 1 + a v^2 + O(v^4)` (registry hook ``prf_conformity_v2``).

    Evaluated at the current precision (internal helper of :mod:`theory.mse`).
    """
    return call_hook(coupling, "prf_conformity_v2", d)


def coupling_conformity_v4_excess(coupling, d):
    r"""Coefficient :math:`e` in :math:`\rho - e^{v^2} = (a - 1)v^2 + e\,v^4 + O(v^6)`, or None where no
    closed form is known (internal helper of :mod:`theory.mse`, at the current precision).

    For an exact, isotropic pair with :math:`s = \|w_i + w_j\|^2`,
    :math:`\rho = \mathbb E[{}_0F_1(;\frac d2;\frac{v^2s}{4})]`, whose :math:`v^{2k}` coefficient is
    :math:`\mathbb E[s^k]/(4^kk!(\frac d2)_k)`: :math:`\mathbb E[s^2]/(8d(d+2))` at k = 2, against 1/2 for
    :math:`e^{v^2}`.

    * A fixed angle :math:`\cos\theta = c` with independent :math:`\chi_d` norms (orthogonal, simplex):
      with :math:`\mathbb E r^2 = d`, :math:`\mathbb E r^4 = d(d+2)`,
      :math:`\mathbb E r^3 = (d+1)\mathbb E r` and :math:`(\mathbb E r)^2 = dR_1`,
      :math:`\mathbb E[s^2] = 4d(d+1) + 8c(d+1)dR_1 + 4c^2d^2`, so

      .. math:: e = \frac{c^2d - 1 + 2c(d+1)R_1}{2(d+2)}

      (:math:`-\frac{1}{2(d+2)}` for ORFs; its even part in c is the RFF coefficient
      :math:`b = \frac{dc^2-1}{2(d+2)}` of :func:`theory.rff_mse_ratio`).
    * c = 0 with coupled norms (pnc_orthogonal): :math:`(w_i, -w_j)` has the law of :math:`(w_i, w_j)`, so
      :math:`\rho^{\mathrm{RFF}}(z) = \rho(iz)` and e is the RFF coefficient b (registry hook
      ``rff_conformity_z4``).

    Checked against the Taylor route at v = 1e-5 (60 digits) and against the chi moments
    (``tests/test_theory_mse.py``).  IID pairs (no fixed angle) give None: there
    :math:`\rho = e^{v^2}` exactly (Lemma 4.1), which the caller uses.
    """
    rec = get_coupling(coupling)
    if not (rec.exact and rec.isotropic) or rec.cos_theta is None:
        return None
    c = coupling_cos(coupling, d)
    if rec.norm_pairs is None:
        return (c * c * d - 1 + 2 * c * (d + 1) * _sin_moment_first(d)) / (2 * mp.mpf(d + 2))
    if c == 0:
        return call_hook(coupling, "rff_conformity_z4", d)
    return None


# ---------------------------------------------------------------------------
# registry hooks of the couplings with a fixed pair angle (iid, orthogonal, simplex)

register("iid", "prf_conformity", lambda d, vv: _exp_square(vv))
register("orthogonal", "prf_conformity", _orf)
register("simplex", "prf_conformity", lambda d, vv: _prf_at_angle(d, half_square(vv), simplex_cos(d)))


def _v2_fixed_angle(coupling):
    r""":math:`a = 1 + \cos\theta\,R_1` at a fixed angle, with
    :math:`R_1 = \Gamma(\frac{d+1}{2})^2/(\Gamma(\frac d2)\Gamma(\frac d2+1))` (1 for IID and ORF)."""

    def coefficient(d):
        return 1 + coupling_cos(coupling, d) * _sin_moment_first(d)

    return coefficient


register("iid", "prf_conformity_v2", lambda d: mp.mpf(1))
register("orthogonal", "prf_conformity_v2", lambda d: mp.mpf(1))
register("simplex", "prf_conformity_v2", _v2_fixed_angle("simplex"))
