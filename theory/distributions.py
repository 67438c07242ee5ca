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

from ._context import mp

from ._checks import (
    call_hook,
    check_coupling,
    check_cos_theta,
    check_dimension,
    check_int,
    check_nonnegative,
    guarded,
)
from ._series import quad_checked
from ._context import check_time
from .errors import ConvergenceError
from .registry import RECORDS, get as get_coupling, register
from .validation import check_real


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
    c = rec.cos_theta(d)
    return mp.mpf(c.numerator) / c.denominator


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
    return mp.exp(_log_chi_pdf(r, k))


@guarded(grid=("n", "k"))
def chi_moment(n, k):
    r""":math:`\mathbb{E}[r^n]` for :math:`r\sim\chi_k`: :math:`2^{n/2}\Gamma(\frac{k+n}{2})/\Gamma(\frac k2)`."""
    k = check_int(k, "k", 1)
    n = check_nonnegative(n, "n")
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
    return mp.exp((d - 1) * mp.log(w) - w * w / 4 - (d - 1) * mp.log(2) - mp.loggamma(mp.mpf(d) / 2))


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
    The integrand is symmetric under :math:`\phi\to\pi/2-\phi`; the integral is
    evaluated in :math:`\delta = \pi/4-\phi \in [0,\pi/4]` and doubled, which
    puts the only delicate point (:math:`\phi=\pi/4` when :math:`\cos\theta=-1`)
    at an endpoint of the tanh-sinh rule, where
    :math:`1+\sin2\phi\cos\theta = (1+\cos\theta)-2\cos\theta\sin^2\delta` is
    evaluated without cancellation.  At :math:`\cos\theta=-1` (e.g. the simplex with d = 2)
    :math:`w_{ij} = |w_i - w_j|` and :math:`p(0) = 2\int p_{\chi_d}^2 =
    \Gamma(d-\frac12)/(2^{d-2}\Gamma(\frac d2)^2)` is returned as the limit.
    """
    d = check_dimension(d)
    w = check_nonnegative(w, "w")
    c = check_cos_theta(cos_theta)
    if w == 0:
        if c == -1:
            return mp.gamma(d - mp.mpf(1) / 2) / (mp.mpf(2) ** (d - 2) * mp.gamma(mp.mpf(d) / 2) ** 2)
        return mp.mpf(0)
    w2 = w * w

    def log_integrand(delta):
        # phi = pi/4 - delta: sin(2 phi) = cos(2 delta) and
        # 1 + cos(theta) sin(2 phi) = (1 + c) - 2 c sin(delta)^2, free of cancellation at c = -1
        s = mp.cos(2 * delta)
        t = (1 + c) - 2 * c * mp.sin(delta) ** 2
        if s <= 0 or t <= 0:
            return None
        return (d - 1) * mp.log(s / 2) - w2 / (2 * t) - d * mp.log(t)

    # factor out the largest value on a grid, so that the quadrature's error
    # estimate (absolute, of order 2**-prec) is compared with an O(1) integral
    # and break the interval around the peak of the integrand
    # (a uniform grid plus points clustering geometrically at both ends, where
    # the peak sits for large w or for cos_theta near -1)
    quarter = mp.pi / 4
    uniform = [quarter * j / 32 for j in range(33)]
    near_0 = [quarter * mp.mpf(2) ** -j for j in range(6, 60, 2)]
    near_end = [quarter * (1 - mp.mpf(2) ** -j) for j in range(6, 60, 2)]
    grid = sorted(set(uniform) | set(near_0) | set(near_end))
    samples = [log_integrand(phi) for phi in grid]
    j_best = max((j for j in range(len(grid)) if samples[j] is not None), key=lambda j: samples[j])
    shift = samples[j_best]
    phi_best = grid[j_best]
    # breakpoints: a coarse uniform partition, the peak and its neighbours, and
    # the geometric points when the peak lies within the first or last uniform
    # cell (a log-spaced partition keeps the variation bounded on each piece)
    points = set(uniform[::4]) | {grid[max(j_best - 1, 0)], phi_best, grid[min(j_best + 1, len(grid) - 1)]}
    if phi_best < uniform[1] or (c < 0 and phi_best < quarter / 2):
        # for cos_theta < 0 the peak approaches delta = 0 as w -> 0, ever sharper
        points |= {t for t in near_0 if t < uniform[1]}
    if phi_best > uniform[-2]:
        points |= {t for t in near_end if t > uniform[-2]}
    points = sorted(points)

    def integrand(phi):
        t = log_integrand(phi)
        return mp.mpf(0) if t is None else mp.exp(t - shift)

    integral = 2 * quad_checked(integrand, points, what="pdf_wij (Lemma 4.2)", maxdegree=maxdegree)
    log_pref = (2 * d - 1) * mp.log(w) - (d - 2) * mp.log(2) - 2 * mp.loggamma(mp.mpf(d) / 2)
    return mp.exp(log_pref + shift) * integral


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
    :math:`p(w) = 2\int_0^\infty p_{\chi_d}(r)p_{\chi_d}(r+w)dr`.
    """
    d = check_dimension(d)
    w = check_nonnegative(w, "w")
    c = check_cos_theta(cos_theta)

    def chi(r):
        return mp.exp(_log_chi_pdf(r, d)) if r > 0 else (mp.mpf(0) if d > 1 else mp.sqrt(2 / mp.pi))

    if c == -1:
        return 2 * quad_checked(lambda r: chi(r) * chi(r + w), [0, w + 1, w + 4, w + 12, mp.inf],
                                what="pdf_wij_convolution")
    if w == 0:
        return mp.mpf(0)
    if c == 1:
        return quad_checked(lambda r: chi(r) * chi(w - r), [0, w / 2, w], what="pdf_wij_convolution")
    # substitute w_i = (w/s) sin(u): sqrt(w^2 - s^2 w_i^2) = w cos(u) and the
    # Jacobian cancels the inverse square root, leaving a smooth integrand
    s = mp.sqrt(1 - c * c)
    top = w / s

    def branch(sign):
        def f(u):
            r = top * mp.sin(u)
            rj = -c * r + sign * w * mp.cos(u)
            if rj <= 0:
                return mp.mpf(0)
            return chi(r) * chi(rj) * top
        return f

    # for c > 0 the plus branch reaches w_j = 0 at tan(u) = s/c
    u1 = mp.atan2(s, c) if c > 0 else mp.pi / 2
    total = quad_checked(branch(+1), [0, u1 / 2, u1], what="pdf_wij_convolution")
    if c < 0:
        u0 = mp.atan2(s, -c)  # the minus branch needs w_i >= w, i.e. tan(u) >= s/|c|
        total += quad_checked(branch(-1), [u0, (u0 + mp.pi / 2) / 2, mp.pi / 2], what="pdf_wij_convolution")
    return total


def pdf_wij_float(w, d, cos_theta):
    r"""Eq. ``theta_proby_dist`` in double precision (scipy quadrature over phi).

    A fast companion of :func:`pdf_wij` for plotting and binning (float in,
    float out): the quadrature's error estimate is required below 1e-10 of
    the density (else :class:`~theory.errors.ConvergenceError`); the tests pin
    it to :func:`pdf_wij` to 1e-9 relative over d = 2..256 and every regime of w
    and :math:`\cos\theta`.
    """
    import warnings

    import numpy as np
    from scipy import integrate, special

    d = check_dimension(d)
    w = check_real(w, "w", minimum=0.0)
    c = check_real(cos_theta, "cos_theta", minimum=-1.0, maximum=1.0)
    if w == 0:
        return float(pdf_wij(0, d, c))
    logpref = (2 * d - 1) * np.log(w) - (d - 2) * np.log(2) - 2 * special.gammaln(d / 2)

    def log_f(delta):
        # phi = pi/4 - delta (see pdf_wij): no cancellation in 1 + c sin(2 phi)
        s2 = np.cos(2 * delta)
        t = (1 + c) - 2 * c * np.sin(delta) ** 2
        with np.errstate(divide="ignore", invalid="ignore"):
            out = logpref + (d - 1) * np.log(s2 / 2) - w * w / (2 * t) - d * np.log(t)
        return np.where((s2 > 0) & (t > 0), out, -np.inf)

    def f(delta):
        return float(np.exp(log_f(delta)))

    # breakpoints where the integrand lives: its peak moves to delta ~ w / (2 sqrt(d)) for
    # cos_theta = -1 and small w, so a fixed partition can miss it entirely
    grid = np.unique(np.concatenate([np.pi / 4 * np.geomspace(1e-14, 1, 600), np.linspace(0, np.pi / 4, 257)]))
    lf = log_f(grid)
    top = lf.max()
    live = np.flatnonzero(lf >= top - 80)
    if live.size == 0 or not np.isfinite(top):
        return 0.0
    keep = set(np.linspace(live[0], live[-1], min(24, live.size)).astype(int)) | {int(np.argmax(lf))}
    keep |= {max(live[0] - 1, 0), min(live[-1] + 1, grid.size - 1)}
    pts = sorted({0.0, np.pi / 4} | {float(grid[i]) for i in keep})
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
                               f"{total:.3g} at w = {w}, d = {d}, cos_theta = {c}; use pdf_wij (arbitrary precision)")
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
    as an independent check of it.
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
    what = f"wij_moment at n = {n} (a double sum of about n^2/2 = {n * n // 2 + n} terms)"

    def checked(items):
        for i, item in enumerate(items):
            if i % 256 == 0:
                check_time(what)
            yield item

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
            for b in range(n + 1):
                check_time(what)
                a = n - b
                coef = mp.binomial(n, b) * (2 * c) ** b
                inner = mp.fsum(mp.binomial(a, r) * mom[2 * r + b] * mom[2 * (a - r) + b]
                                for r in checked(range(a + 1)))
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
