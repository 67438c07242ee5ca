r"""Distributions of :math:`w_{ij} = \|w_i + w_j\|_2` (Lemmas 4.1 and 4.2).

* IID vectors: :math:`w_i + w_j \sim N(0, 2I_d)`, so :math:`w_{ij}/\sqrt2 \sim \chi_d`
  (eq. ``iid_pdf``).
* Vectors with independent :math:`\chi_d` norms conditioned to subtend a fixed
  angle :math:`\theta`: :math:`w_{ij}^2 = w_i^2 + w_j^2 + 2w_iw_j\cos\theta`, with
  the density of eq. ``theta_proby_dist`` (a one-dimensional integral), which
  reduces to :math:`\chi_{2d}` at :math:`\theta = \pi/2` (eq. ``chi_2d_dist``).

Moments used by the checks and by the footnote of Sec. 3.2 are exact:
:math:`\mathbb{E}[\chi_d^n] = 2^{n/2}\Gamma(\frac{d+n}{2})/\Gamma(\frac d2)`.
"""

from __future__ import annotations

import math

from ._context import mp

from ._checks import (
    call_hook,
    check_coupling,
    check_cos_theta,
    check_dimension,
    check_int,
    check_nonnegative,
    guarded,
    rational,
)
from ._series import drop_scale, peak_in_log, quad_checked
from ._context import check_time
from .errors import ConvergenceError
from .registry import RECORDS, get as get_coupling, register
from .validation import check_real, show_int


def simplex_cos(d):
    r"""Cosine of the angle subtended by two simplex vectors, :math:`-1/(d-1)`."""
    return mp.mpf(-1) / (d - 1)


def coupling_cos(coupling, d):
    """cos(theta) of a coupled pair at the current precision, from the coupling's registry record
    (0 for 'orthogonal', -1/(d-1) for 'simplex'); ValueError for a coupling without a fixed angle."""
    rec = get_coupling(coupling)
    if rec.cos_theta is None:
        fixed = ", ".join(repr(r.name) for r in RECORDS if r.cos_theta is not None)
        raise ValueError(f"coupling {coupling!r} has no fixed pair angle; couplings with one: {fixed}")
    return rational(rec.cos_theta(d))


def _log_density_bits(k, r):
    """Working precision for the logarithm of a density with k degrees of freedom at r: its terms
    are of size k log k and r^2, so that many more bits give it to the working precision in absolute
    terms (and its exponential relatively); without them pdf_chi(2**32, 2**64) was 0.2% off."""
    return mp.prec + int(k).bit_length() + max(0, 2 * int(mp.mag(r))) + 16


#: Largest bit length of an integer dimension (d or k) for which the functions that resolve
#: differences of order 1/d against 1 (:func:`chi_moment`, :func:`wij_moment`, and in
#: :mod:`theory.mse` 1 - R_1 and rho - e^{v^2}) carry the :func:`dimension_bits` they need:
#: d < 2^16384 (about 1.2e4932) takes at most a few seconds; beyond, ConvergenceError.
D_MAX_BITS = 16384


def dimension_bits(d, what):
    r"""Extra bits for a computation with an integer dimension d (any size up to
    :math:`2^{16384}`): :math:`2\log_2 d + 16`, so that d, d/2 and d/2 + 1/2 (and d + n
    for moderate n) are exact, a ratio of Gamma functions at arguments of size d is known to
    the working precision, and a difference of order 1/d against 1 (e.g.
    :math:`1 - \Gamma(\frac{d+1}{2})^2/(\Gamma(\frac d2)\Gamma(\frac d2+1))
    \approx 1/(2d)`) keeps every digit.  ``what`` names the call in the error raised for
    d >= 2^:data:`D_MAX_BITS` (the Gamma functions at that many bits would run for minutes)."""
    n = int(d).bit_length()
    if n > D_MAX_BITS:
        raise ConvergenceError(f"{what}: d (or k) = 2^{n - 1}... has {n} bits; the reachable domain is "
                               f"d < 2^{D_MAX_BITS} (differences of order 1/d need 2 log2(d) extra bits)")
    return 2 * n + 16


def _log_chi_pdf(r, k):
    return (k - 1) * mp.log(r) - r * r / 2 - (mp.mpf(k) / 2 - 1) * mp.log(2) - mp.loggamma(mp.mpf(k) / 2)


@guarded(grid=("r", "k"))
def pdf_chi(r, k):
    r"""Density of the :math:`\chi_k` distribution,
    :math:`r^{k-1}e^{-r^2/2}/(2^{k/2-1}\Gamma(k/2))`."""
    k = check_int(k, "k", 1)
    r = check_nonnegative(r, "r")
    if r == 0:
        return mp.mpf(1) / mp.sqrt(mp.pi / 2) if k == 1 else mp.mpf(0)
    with mp.workprec(_log_density_bits(k, r)):
        return mp.exp(_log_chi_pdf(r, k))


@guarded(grid=("n", "k"))
def chi_moment(n, k):
    r""":math:`\mathbb{E}[r^n]` for :math:`r\sim\chi_k`: :math:`2^{n/2}\Gamma(\frac{k+n}{2})/\Gamma(\frac k2)`.

    Domain: every k and n below :math:`2^{16384}` (the Gamma arguments are formed exactly,
    with :func:`dimension_bits`: e.g. :math:`\mathbb{E}[\chi_k^{1/2}] = 3.1623\times10^7`
    at :math:`k = 10^{30}`); beyond, ConvergenceError."""
    k = check_int(k, "k", 1)
    n = check_nonnegative(n, "n")
    # (k + n)/2 and k/2 exact (or rounded far below the working precision): at prec + 24 bits
    # (k + n)/2 rounded to k/2 once k > 2^77, and gammaprod returned 1 (2^(1/4) for k^(1/4))
    size = max(k, int(mp.ceil(n)))
    extra = dimension_bits(size, "chi_moment")  # (the message names the size of k or n, not its digits)
    with mp.workprec(mp.prec + extra):
        return mp.mpf(2) ** (n / 2) * mp.gammaprod([(k + n) / 2], [mp.mpf(k) / 2])


@guarded(grid=("w", "d"))
def pdf_wij_iid(w, d):
    r"""Density of :math:`w_{ij}` for i.i.d. Gaussian vectors (eq. ``iid_pdf``, Lemma 4.1).

    .. math:: p_{\mathrm{iid}}(w) = \frac{w^{d-1}e^{-w^2/4}}{2^{d-1}\Gamma(d/2)}
    """
    d = check_dimension(d)
    w = check_nonnegative(w, "w")
    if w == 0:
        return mp.mpf(1) / mp.sqrt(mp.pi) if d == 1 else mp.mpf(0)
    with mp.workprec(_log_density_bits(d, w)):
        return mp.exp((d - 1) * mp.log(w) - w * w / 4 - (d - 1) * mp.log(2) - mp.loggamma(mp.mpf(d) / 2))


#: Largest w that :func:`pdf_wij` is known to reach within the default work budget (every d and angle).
W_REACH = mp.mpf("1e100")


@guarded(grid=("w", "d", "cos_theta"))
def pdf_wij(w, d, cos_theta, maxdegree=None):
    r"""Density :math:`p_\theta(w)` of :math:`w_{ij}` at a fixed angle (eq. ``theta_proby_dist``, Lemma 4.2).

    .. math::
        p_\theta(w) = \frac{w^{2d-1}}{2^{d-2}\Gamma(\frac d2)^2}\int_0^{\pi/2}
        d\phi\,(\sin\phi\cos\phi)^{d-1}
        \frac{e^{-w^2/(2(1+\sin2\phi\cos\theta))}}{(1+\sin2\phi\cos\theta)^d}

    Parameters
    ----------
    w : real >= 0
    d : int >= 1
    cos_theta : real in [-1, 1]
        0 for ORFs, -1/(d-1) for SimRFs.
    maxdegree : int, optional
        Passed to ``mpmath.quad``.

    Notes
    -----
    The integrand is symmetric under :math:`\phi\to\pi/2-\phi`; the integral over
    :math:`[0, \pi/4]` is doubled, split at :math:`\pi/8`, and each half is integrated in
    the logarithm of the distance to its own end: :math:`\log\phi` near 0 (where the mass
    sits for large w, at :math:`\phi \approx d/(w^2|\cos\theta|)`), :math:`\log\delta`,
    :math:`\delta = \pi/4-\phi`, near :math:`\pi/4` (where
    :math:`1+\sin2\phi\cos\theta = (1+\cos\theta)-2\cos\theta\sin^2\delta` is evaluated
    without cancellation, and where the mass sits at :math:`\cos\theta = -1`:
    :math:`\delta \approx w/(2\sqrt d)`, with a width :math:`1/(2\sqrt d)` in
    :math:`\log\delta`).  In either variable the integrand is one peak, which is located to
    within a fraction of its width and broken around on its own scale
    (``theory._series.peak_in_log``), so that no peak is missed whatever d, w and
    :math:`\cos\theta` (a fixed partition missed the peak at :math:`\cos\theta = -1` and
    :math:`d \ge 10^5`, returning values off by a factor up to :math:`10^{28}`).  The
    log-integrand, of size :math:`d + w^2`, is formed with that many more bits.  At
    :math:`\cos\theta=-1` (e.g. the simplex with d = 2) :math:`w_{ij} = |w_i - w_j|` and
    :math:`p(0) = 2\int p_{\chi_d}^2 = \Gamma(d-\frac12)/(2^{d-2}\Gamma(\frac d2)^2)` is
    returned as the limit.

    Domain: every d (checked up to :math:`2^{63}` against the closed form at
    :math:`\cos\theta = 0` and the convolution at :math:`\cos\theta = \pm1`), every
    :math:`\cos\theta`, and :math:`0 \le w \le 10^{100}` within the default work budget (a
    few seconds; :math:`w = 10^{300}` needs 2000-bit arithmetic and 5 to 30 s).  Beyond,
    :class:`~theory.errors.ConvergenceError` naming w, d and :math:`\cos\theta`.
    """
    d = check_dimension(d)
    w = check_nonnegative(w, "w")
    c = check_cos_theta(cos_theta)
    if w == 0:
        if c == -1:
            return mp.gamma(d - mp.mpf(1) / 2) / (mp.mpf(2) ** (d - 2) * mp.gamma(mp.mpf(d) / 2) ** 2)
        return mp.mpf(0)
    what = f"pdf_wij (Lemma 4.2) at w = {mp.nstr(w, 8)}, d = {show_int(d)}, cos_theta = {mp.nstr(c, 17)}"
    if w > W_REACH:
        what += (f" (w > {mp.nstr(W_REACH, 3)} needs {2 * int(mp.mag(w))}-bit arithmetic; the reachable domain "
                 f"within the default budget is w <= {mp.nstr(W_REACH, 3)})")
    # the log-integrand is of size d + w^2 (and its prefactor d log d): carry that many more bits, so
    # that it is known to the working precision in absolute terms and its exponential relatively
    # (the quadratures themselves run at the working precision: only the log-integrand needs the bits)
    hi = _log_density_bits(d, w)
    with mp.workprec(hi):
        w2 = w * w
        log_pref = (2 * d - 1) * mp.log(w) - (d - 2) * mp.log(2) - 2 * mp.loggamma(mp.mpf(d) / 2)
    top, integral = _pdf_wij_integral(w2, d, c, hi, maxdegree, what)
    with mp.workprec(hi):
        return mp.exp(log_pref + top) * integral


def _pdf_wij_integral(w2, d, c, hi, maxdegree, what):
    """(P, I): the integral of eq. theta_proby_dist over phi is e^P I (P at ``hi`` bits, I at the working precision)."""

    # s and t at hi bits (w^2 / (2 t) needs t to that relative precision), the logarithms, of
    # size d, at the working precision plus log2(d) bits
    mid = mp.prec + int(d).bit_length() + 16

    def log_f(s, t):
        if s <= 0 or t <= 0:
            return None
        with mp.workprec(mid):
            logs = (d - 1) * mp.log(s / 2) - d * mp.log(t)
        with mp.workprec(hi):
            return logs - w2 / (2 * t)

    def log_near_phi_0(phi):
        # phi in (0, pi/8]: 1 + cos(theta) sin(2 phi) >= 1 - sin(pi/4), no cancellation
        with mp.workprec(hi):
            s = mp.sin(2 * phi)
            return log_f(s, 1 + c * s)

    def log_near_phi_quarter(delta):
        # phi = pi/4 - delta, delta in (0, pi/8]: sin(2 phi) = cos(2 delta) and
        # 1 + cos(theta) sin(2 phi) = (1 + c) - 2 c sin(delta)^2, free of cancellation at c = -1
        with mp.workprec(hi):
            return log_f(mp.cos(2 * delta), (1 + c) - 2 * c * mp.sin(delta) ** 2)

    # the integrand is symmetric about phi = pi/4: twice the integral over [0, pi/4], split at pi/8
    # and each half integrated in the logarithm of the distance to its own end (so that a peak at
    # either end is resolved in absolute terms: phi ~ d / w^2 for large w, delta ~ w / (2 sqrt(d))
    # at cos_theta = -1)
    halves = [_half_in_log(log_near_phi_0, hi, what), _half_in_log(log_near_phi_quarter, hi, what)]
    top, total = _combine_peaks(halves, hi, maxdegree)
    if top == -mp.inf:
        raise ConvergenceError(f"{what}: the integrand vanishes at every sample; outside the reachable domain")
    return top, 2 * total


def _combine_peaks(parts, hi, maxdegree=None):
    """(P, I) with sum_i e^{P_i} I_i = e^P I for parts (P_i, integrate_i): a part whose peak lies more
    than the working precision (and e^64 for its width) below the largest holds less than 2^-p of the
    sum and is not integrated (e.g. the half of pdf_wij near phi = pi/8 when the mass sits at
    phi ~ d / w^2, whose own quadrature would have to resolve a peak 1e-20 wide for nothing)."""
    top = max(p for p, _ in parts)
    total = mp.mpf(0)
    if top == -mp.inf:
        return top, total
    for peak, integrate in parts:
        with mp.workprec(hi):
            gap = peak - top
        if gap > -(mp.prec * mp.ln2 + 104):
            total += mp.exp(gap) * integrate(maxdegree)
    return top, total


def _half_in_log(log_f, hi, what):
    r"""Locate the peak of :math:`\int_0^{\pi/8} e^{\log f(x)}dx` in :math:`u = \log x`.

    Returns ``(peak, integrate)``: the maximum P of :math:`\lambda(u) = \log f(e^u) + u` (at ``hi``
    bits) and a function ``integrate(maxdegree)`` giving I with integral :math:`= e^PI`.

    In u the integrand :math:`e^{\lambda(u)}` is one smooth peak (width :math:`1/(2\sqrt d)` in u at
    :math:`\cos\theta = -1`, :math:`10^{-10}` at :math:`d = 2^{63}`), or rises to the end
    :math:`x = \pi/8`.  The peak is located to within a fraction of its width
    (``theory._series.peak_in_log``), its width measured on each side, and the interval broken
    at :math:`u^* \mp \mathrm{width}\cdot2^k`, so that every piece holds a smooth part of the
    integrand whatever the scale of the peak; the quadrature variable is :math:`y = u - u^*`, so that
    its nodes resolve a narrow peak far from u = 0; below the last left breakpoint, where the
    integrand is negligible, x itself is the variable down to 0.
    """

    def lam(u):  # at hi bits (its values are of size d + w^2; their differences matter)
        with mp.workprec(hi):
            val = log_f(mp.exp(u))
            return -mp.inf if val is None else val + u

    negligible = mp.prec * mp.ln2 + 40  # below the peak by this much: beyond the working precision
    with mp.workprec(hi):  # the search compares values of lambda: at the bits they are known to
        u_hi = mp.log(mp.pi / 8)
        peak_u, peak, bracket = peak_in_log(lam, u_hi, what, fine=True)
    if peak == -mp.inf:
        return peak, lambda maxdegree: mp.mpf(0)

    def integrate(maxdegree):
        with mp.workprec(hi):
            floor = peak - negligible
            start = max(bracket / 4, mp.eps * (1 + abs(peak_u)) * 16)
            points = {mp.mpf(0), u_hi - peak_u}  # in y = u - u*
            if peak_u < u_hi:
                width = drop_scale(lam, peak_u, peak, 1, u_hi, start=start, what=what)
                for k in range(-1, 2 * mp.prec):
                    check_time(what)
                    y = width * mp.mpf(2) ** k
                    if peak_u + y >= u_hi:
                        break
                    points.add(y)
            width = drop_scale(lam, peak_u, peak, -1, u_hi, start=start, what=what)
            for k in range(-1, 2 * mp.prec):
                check_time(what)
                y_left = -width * mp.mpf(2) ** k
                points.add(y_left)
                if lam(peak_u + y_left) < floor:
                    break
            else:
                raise ConvergenceError(f"{what}: the integrand's left tail does not fall off; outside the "
                                       "reachable domain")
            # below y_left: x in [0, e^{u* + y_left}] as the piece y in [y_left - 1, y_left], x linear in y
            e_left = mp.exp(peak_u + y_left)
        points = sorted(+p for p in points)
        y_left = points[0]
        points.insert(0, y_left - 1)

        def integrand(y):
            with mp.workprec(hi):
                if y >= y_left:
                    val = lam(peak_u + y)
                else:
                    val = log_f(e_left * (y - y_left + 1))
                    val = -mp.inf if val is None else val + peak_u + y_left
                if val == -mp.inf:
                    return mp.mpf(0)
                gap = val - peak
            return mp.exp(gap)

        return quad_checked(integrand, points, what=what, maxdegree=maxdegree, units=20)  # 230 us per node

    return peak, integrate


@guarded(grid=("w", "d", "cos_theta"))
def pdf_wij_convolution(w, d, cos_theta):
    r"""Density of :math:`w_{ij}` at a fixed angle by direct change of variables
    (an independent route to Lemma 4.2).

    With independent :math:`w_i, w_j \sim \chi_d` and
    :math:`w^2 = w_i^2 + w_j^2 + 2cw_iw_j`, solve for
    :math:`w_j = -cw_i \pm\sqrt{w^2 - s^2w_i^2}` (:math:`s^2 = 1-c^2`):

    .. math::
        p(w) = \sum_\pm\int p_{\chi_d}(w_i)\,p_{\chi_d}(w_j^\pm)\,
        \frac{w}{\sqrt{w^2-s^2w_i^2}}\,dw_i

    evaluated with :math:`w_i = (w/s)\sin u`, which removes the inverse square
    root;
    over the :math:`w_i` where :math:`w_j^\pm \ge 0` (the minus branch exists
    only for c < 0, at :math:`w_i \ge w`).  At c = -1,
    :math:`p(w) = 2\int_0^\infty p_{\chi_d}(r)p_{\chi_d}(r+w)dr`; at c = 1,
    :math:`p(w) = \int_0^w p_{\chi_d}(r)p_{\chi_d}(w-r)dr`.  Each integrand is one peak (of width
    about 1 in :math:`w_i` whatever d), located and broken around on its own scale
    (``_unimodal_peak``; fixed breakpoints missed it at d >= 1024 and c = -1, silently: 0.98
    instead of 0.259 at d = 10^5, w = 1.5).

    Domain (a check route): d up to :math:`2^{63}` at moderate w; w up to :math:`10^{10}` at
    :math:`\cos\theta = \pm1`; beyond (e.g. w = :math:`10^{10}`, :math:`\cos\theta = -0.5`)
    the work budget runs out (ConvergenceError naming w, d and :math:`\cos\theta`).
    """
    d = check_dimension(d)
    w = check_nonnegative(w, "w")
    c = check_cos_theta(cos_theta)
    what = f"pdf_wij_convolution at w = {mp.nstr(w, 8)}, d = {show_int(d)}, cos_theta = {mp.nstr(c, 17)}"
    if w == 0 and c != -1:
        return mp.mpf(0)
    s = mp.sqrt(1 - c * c)
    reach = max(w, mp.sqrt(d)) if c in (-1, 1) else max(w / s, mp.sqrt(d))
    hi = _log_density_bits(d, reach)
    with mp.workprec(hi):
        log_chi_zero = mp.log(mp.sqrt(2 / mp.pi)) if d == 1 else -mp.inf

    def log_chi(r):
        with mp.workprec(hi):
            return _log_chi_pdf(r, d) if r > 0 else log_chi_zero

    if c == -1:
        # r (r + w) = d - 1 at the peak; the integrand is log-concave: go out until it is negligible
        with mp.workprec(hi):
            r0 = 2 * mp.mpf(d - 1) / (w + mp.sqrt(w * w + 4 * (d - 1))) if d > 1 else mp.mpf(0)
            top_value = log_chi(r0) + log_chi(r0 + w)
            far = r0 + 8
            while log_chi(far) + log_chi(far + w) > top_value - (mp.prec * mp.ln2 + 80):
                far = r0 + 2 * (far - r0)
        parts = [_unimodal_peak(lambda r: log_chi(r) + log_chi(r + w), mp.mpf(0), far, hi, what)]
        factor = 2
    elif c == 1:
        parts = [_unimodal_peak(lambda r: log_chi(r) + log_chi(w - r), mp.mpf(0), w, hi, what)]
        factor = 1
    else:
        parts = _convolution_branches(w, c, s, log_chi, hi, what)
        factor = 1
    top, integral = _combine_peaks(parts, hi)
    if top == -mp.inf:
        return mp.mpf(0)
    with mp.workprec(hi):
        return factor * mp.exp(top) * integral


def _convolution_branches(w, c, s, log_chi, hi, what):
    """The plus (and for c < 0 the minus) branch of pdf_wij_convolution, as parts for _combine_peaks."""
    # substitute w_i = (w/s) sin(u): sqrt(w^2 - s^2 w_i^2) = w cos(u) and the
    # Jacobian cancels the inverse square root, leaving a smooth integrand
    top = w / s

    def branch(sign):
        def log_g(u):
            with mp.workprec(hi):
                r = top * mp.sin(u)
                rj = -c * r + sign * w * mp.cos(u)
                if rj <= 0:
                    return -mp.inf
                return log_chi(r) + log_chi(rj) + mp.log(top)
        return log_g

    # for c > 0 the plus branch reaches w_j = 0 at tan(u) = s/c
    u1 = mp.atan2(s, c) if c > 0 else mp.pi / 2
    parts = [_unimodal_peak(branch(+1), mp.mpf(0), u1, hi, what)]
    if c < 0:
        u0 = mp.atan2(s, -c)  # the minus branch needs w_i >= w, i.e. tan(u) >= s/|c|
        parts.append(_unimodal_peak(branch(-1), u0, mp.pi / 2, hi, what))
    return parts


def _unimodal_peak(log_g, a, b, hi, what, n_scan=64):
    r""":math:`\int_a^b e^{g(x)}dx = e^PI` for a unimodal g (``log_g``, -inf where the integrand
    vanishes, evaluated at ``hi`` bits): returns ``(P, integrate)``, P at ``hi`` bits and
    ``integrate(maxdegree)`` giving I to the working precision (see :func:`_combine_peaks`).

    The peak is located (a uniform scan, then golden section until g is flat across the bracket,
    ``theory._series.peak_in_log``), its width measured on each side
    (:func:`theory._series.drop_scale`), and [a, b] broken at :math:`x^* \mp \mathrm{width}\cdot2^k`,
    so that a peak of any width is resolved; the quadrature variable is :math:`x - x^*`.
    """

    def lam(x):
        return log_g(x) if a <= x <= b else -mp.inf

    with mp.workprec(hi):
        scan = [a + (b - a) * mp.mpf(j) / n_scan for j in range(n_scan + 1)]
        x_star, peak, bracket = peak_in_log(lam, b, what, fine=True, scan=scan)
    if peak == -mp.inf:
        return peak, lambda maxdegree: mp.mpf(0)

    def integrate(maxdegree):
        with mp.workprec(hi):
            start = max(bracket / 4, mp.eps * (1 + abs(x_star)) * 16)
            points = {mp.mpf(0), a - x_star, b - x_star}
            for side in (1, -1):
                width = drop_scale(lam, x_star, peak, side, b, start=start, what=what)
                for k in range(-1, 2 * mp.prec):
                    check_time(what)
                    y = side * width * mp.mpf(2) ** k
                    if not a < x_star + y < b:
                        break
                    points.add(y)
        points = sorted(+p for p in points)

        def integrand(y):
            with mp.workprec(hi):
                val = lam(x_star + y)
                if val == -mp.inf:
                    return mp.mpf(0)
                gap = val - peak
            return mp.exp(gap)

        return quad_checked(integrand, points, what=what, maxdegree=maxdegree, units=20)  # 230 us per node

    return peak, integrate


#: Largest d of :func:`pdf_wij_float` (d, d/2 and 2d - 1 exact in double precision).
FLOAT_MAX_D = 2**52


def pdf_wij_float(w, d, cos_theta):
    r"""Eq. ``theta_proby_dist`` in double precision (scipy quadrature over phi).

    A fast companion of :func:`pdf_wij` for plotting and binning (float in,
    float out): the quadrature's error estimate is required below 1e-10 of
    the density (else :class:`~theory.errors.ConvergenceError`); the tests pin
    it to :func:`pdf_wij` to 1e-9 relative over d = 2..256 and every regime of w
    and :math:`\cos\theta`, including :math:`w \to 0` at :math:`\cos\theta = -1`,
    where the mass sits at :math:`\delta = \pi/4 - \phi \approx w/(2\sqrt d)`.

    The integral runs over :math:`u = \delta/s` with the scale
    :math:`s = \min(1, \max(w/(2\sqrt d), \sqrt{(1+\cos\theta)/2}))` (not below
    :math:`10^{-290}`), and the log-integrand is
    formed from :math:`\log\delta` and :math:`\log(1+\sin2\phi\cos\theta)` (never from
    :math:`\delta^2` or :math:`w^2`, which underflow), so that a peak at any scale lies on
    the breakpoint grid (a grid in :math:`\delta` down to :math:`10^{-14}` missed it for
    :math:`w < 10^{-13}`: -1.05e-23 instead of 0.886 at w = 1e-20, d = 2).  At
    :math:`\cos\theta = -1` and :math:`w \le 10^{-150}` the limit :math:`p(0)` is returned
    (:math:`p(w) = p(0)(1 + O(w))`).  Where the density is below the smallest double it
    underflows to 0.0 (e.g. :math:`p \propto w^{2d-1}` at :math:`\cos\theta > -1`, tiny w).
    """
    import warnings

    import numpy as np
    from scipy import integrate, special

    d = check_int(d, "d", 1, "(pdf_wij_float computes in double precision, where larger d are not exact; "
                  "use pdf_wij)", maximum=FLOAT_MAX_D)
    w = check_real(w, "w", minimum=0.0)
    c = check_real(cos_theta, "cos_theta", minimum=-1.0, maximum=1.0)
    if w == 0 or (c == -1 and w <= 1e-150):
        return float(pdf_wij(0, d, c))
    lw = math.log(w)
    logpref = (2 * d - 1) * lw - (d - 2) * math.log(2) - 2 * special.gammaln(d / 2)
    # delta = s u: near cos_theta = -1 the mass sits at delta ~ max(w / (2 sqrt(d)), sqrt((1 + c) / 2))
    ls = min(0.0, max(lw - math.log(2 * math.sqrt(d)), 0.5 * math.log((1 + c) / 2) if c > -1 else -math.inf,
                      math.log(1e-290)))
    log_1pc = math.log1p(c) if c > -1 else -math.inf

    log_2c = math.log(-2 * c) if c < 0 else None

    def log_f(u):
        # phi = pi/4 - delta (see pdf_wij): 1 + c sin(2 phi) = (1 + c) - 2 c sin(delta)^2, in logarithms
        if u <= 0:
            return -math.inf
        log_delta = ls + math.log(u)
        delta = math.exp(log_delta)
        s2 = math.cos(2 * delta)
        if s2 <= 0:
            return -math.inf
        if c < 0:
            log_sin = log_delta + (math.log(math.sin(delta) / delta) if delta > 0 else 0.0)
            a = log_2c + 2 * log_sin
            log_t = a if log_1pc == -math.inf else max(a, log_1pc) + math.log1p(math.exp(-abs(a - log_1pc)))
        else:
            log_t = math.log((1 + c) - 2 * c * math.sin(delta) ** 2)
        g = 2 * lw - math.log(2) - log_t
        return logpref + ls + (d - 1) * math.log(s2 / 2) - (math.exp(g) if g < 709 else math.inf) - d * log_t

    def f(u):
        val = log_f(u)
        return math.exp(val) if val < 709 else math.inf

    # breakpoints where the integrand lives: a geometric grid from u_lo (delta = 1e-14 pi/4, or
    # 1e-3 of the scale of a peak near delta = 0) to the end delta = pi/4, and a uniform one
    u_hi = math.pi / 4 * math.exp(-ls)
    u_lo = min(1e-14 * u_hi, 1e-3)
    n_geo = max(600, int(43 * math.log10(u_hi / u_lo)))
    grid = np.unique(np.concatenate([np.geomspace(u_lo, u_hi, n_geo), np.linspace(0, u_hi, 257)]))
    lf = np.array([log_f(u) for u in grid])
    top = lf.max()
    live = np.flatnonzero(lf >= top - 80)
    if live.size == 0 or not np.isfinite(top):
        return 0.0
    keep = set(np.linspace(live[0], live[-1], min(24, live.size)).astype(int)) | {int(np.argmax(lf))}
    keep |= {max(live[0] - 1, 0), min(live[-1] + 1, grid.size - 1)}
    pts = sorted({0.0, u_hi} | {float(grid[i]) for i in keep})
    total = err = 0.0
    with warnings.catch_warnings():
        # a piece far in the tail may trip scipy's heuristics; the summed error estimate is checked below
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        for a, b in zip(pts[:-1], pts[1:]):
            val, e = integrate.quad(f, a, b, epsabs=0, epsrel=1e-12, limit=200)
            total += val
            err += e
    if not err <= 1e-10 * abs(total) and total > 1e-290:
        raise ConvergenceError(f"pdf_wij_float: quadrature error estimate {err:.3g} exceeds 1e-10 of the density "
                               f"{total:.3g} at w = {w}, d = {show_int(d)}, cos_theta = {c}; use pdf_wij "
                               "(arbitrary precision)")
    return 2 * total


@guarded(grid=("w", "d"))
def coupling_pdf(coupling, w, d):
    """Density of w_ij for a named coupling: eq. iid_pdf or Lemma 4.2 at its angle (hook ``pair_pdf``)."""
    coupling = check_coupling(coupling, has="pair_pdf")
    d = check_dimension(d, coupling)
    return call_hook(coupling, "pair_pdf", w, d)


def _pdf_at_fixed_angle(coupling):
    def pdf(w, d):
        with mp.workprec(mp.prec + 10):
            c = coupling_cos(coupling, d)
        return pdf_wij(w, d, c)

    return pdf


register("iid", "pair_pdf", lambda w, d: pdf_wij_iid(w, d))
# at theta = pi/2 Lemma 4.2 reduces to the chi_2d density (eq. chi_2d_dist): the closed form, not the integral
register("orthogonal", "pair_pdf", lambda w, d: pdf_chi(w, 2 * d))
register("simplex", "pair_pdf", _pdf_at_fixed_angle("simplex"))


@guarded(grid=("n", "d", "cos_theta"))
def wij_moment(n, d, cos_theta):
    r"""Exact :math:`\mathbb{E}[w_{ij}^{2n}]` at a fixed angle, for integer n >= 0.

    Expands :math:`(w_i^2 + w_j^2 + 2cw_iw_j)^n` by the multinomial theorem with
    independent :math:`\chi_d` norms.  This does not use Lemma 4.2 and serves
    as an independent check of it.  Every d below :math:`2^{16384}` (the cancellation
    of the signed terms at c < 0, e.g. :math:`\mathbb{E}(r_i - r_j)^2 = 1 + O(1/d)`, is
    detected and repeated with more bits); beyond, ConvergenceError.
    """
    n = check_int(n, "n", 0)
    d = check_dimension(d)
    c = check_cos_theta(cos_theta)
    return _wij_moment(n, d, c)


def _wij_moment(n, d, c):
    """Multinomial expansion of E[(w_i^2 + w_j^2 + 2c w_i w_j)^n], repeated with
    more bits when the terms (signed for c < 0) cancel."""
    prec = mp.prec
    guard = 16 + (2 * n + 1).bit_length()  # the moment recurrence accumulates up to 2n roundings
    what = f"wij_moment at n = {show_int(n)} (a double sum of about n^2/2 = {show_int(n * n // 2 + n)} terms)"
    per_term = 1 + n // 2048  # the binomials have up to n bits: a product with one costs about n/2048 units

    def checked(items, per=1):
        for i, item in enumerate(items):
            if i % 256 == 0:
                check_time(what, units=256 * per)
            yield item

    # h + 1/2 and h = d/2 exact, the first moment Gamma(h + 1/2)/Gamma(h) to the working precision
    # (at 16 guard bits h + 1/2 rounded to h once d > 2^77: E w_ij^2 = 2 d instead of 1 at c = -1)
    guard += dimension_bits(d, "wij_moment")
    while True:
        with mp.workprec(prec + guard):
            h = mp.mpf(d) / 2
            mom = [mp.mpf(1)]  # E[chi_d^j] = 2^{j/2} Gamma((d+j)/2) / Gamma(d/2): mom[j+2] = mom[j] (d + j)
            mom.append(mp.sqrt(2) * mp.gammaprod([h + mp.mpf(1) / 2], [h]))
            for j in checked(range(2, 2 * n + 1)):
                mom.append(mom[j - 2] * (d + j - 2))
            total = mp.mpf(0)
            absum = mp.mpf(0)
            # (A + B)^n with A = w_i^2 + w_j^2, B = 2c w_i w_j; A^a = sum_r C(a,r) w_i^{2r} w_j^{2(a-r)}
            # (binomials as exact integers; at c = 0 only b = 0 contributes)
            for b in range(n + 1 if c else 1):
                check_time(what, units=per_term)
                a = n - b
                coef = math.comb(n, b) * (2 * c) ** b
                inner = mp.fsum(math.comb(a, r) * mom[2 * r + b] * mom[2 * (a - r) + b]
                                for r in checked(range(a + 1), per_term))
                total += coef * inner
                absum += abs(coef * inner)
        if total > 0 and mp.log(absum / total, 2) <= guard - 8:
            return +total
        guard = (int(mp.log(absum / total, 2)) if total > 0 else 2 * guard) + 32


@guarded(grid=("n", "d"))
def wij_moment_iid(n, d):
    r"""Exact :math:`\mathbb{E}[w_{ij}^{2n}]` for i.i.d. vectors: :math:`2^n\,\mathbb{E}[\chi_d^{2n}]`."""
    n = check_int(n, "n", 0)
    d = check_dimension(d)
    return mp.mpf(2) ** n * chi_moment(2 * n, d)
