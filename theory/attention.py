r"""The cross-pair conformity: coupled directions with *different* vectors (issue 41, for the attention error).

The closed form, its derivation and the independent route: :ref:`guide-theory.attention`
(``docs/guide/derivations.rst``).
"""

from __future__ import annotations

from ._checks import check_coupling, check_dimension, check_nonnegative, guarded, to_mpf
from ._context import check_time, mp
from ._hypergeometric import hyp1f1_pos
from ._series import sum_series
from .conformities import _sine_weighted_average
from .distributions import coupling_cos
from .errors import ConvergenceError
from .validation import check_real

__all__ = ["PAIR_COUPLINGS", "PAIR_KINDS", "cross_conformity", "cross_conformity_conditional", "cross_pair_moment",
           "same_direction_moment"]

#: Couplings whose cross-pair conformity is in closed form here.
PAIR_COUPLINGS = ("iid", "orthogonal", "simplex")
#: Feature kinds of :func:`cross_pair_moment` and :func:`same_direction_moment`.
PAIR_KINDS = ("prf", "hyperbolic", "oprf")


def _check_pair_coupling(coupling):
    name = check_coupling(coupling)
    if name not in PAIR_COUPLINGS:
        raise ValueError(f"coupling must be one of {', '.join(repr(c) for c in PAIR_COUPLINGS)} for the cross-pair "
                         f"conformity, got {coupling!r}")
    return name


def _check_vectors(z1_sq, z2_sq, z12):
    """(A, B, C) with A, B >= 0 and C^2 <= AB (to the rounding of the three numbers: |C| is clipped to
    sqrt(AB) when it exceeds it by at most a few units in the last place; beyond, a ValueError)."""
    A = check_nonnegative(z1_sq, "z1_sq")
    B = check_nonnegative(z2_sq, "z2_sq")
    C = to_mpf(z12, "z12")
    top = mp.sqrt(A * B)
    if abs(C) > top:
        if abs(C) - top > 8 * mp.eps * max(abs(C), 1):
            raise ValueError(f"z12 must satisfy z12^2 <= z1_sq * z2_sq (an inner product of two vectors with those "
                             f"squared norms), got z12 = {mp.nstr(C, 8)} with sqrt(z1_sq * z2_sq) = {mp.nstr(top, 8)}")
        C = mp.sign(C) * top
    return A, B, C


@guarded(grid=("d", "z1_sq", "z2_sq", "z12"))
def cross_conformity(coupling, d, z1_sq, z2_sq, z12):
    r"""The cross-pair conformity :math:`M = \mathbb E[e^{w_i^\top z_1 + w_j^\top z_2}]` of a coupled pair of
    directions (module docs).

    Parameters
    ----------
    coupling : {"iid", "orthogonal", "simplex"}
    d : int >= 2
    z1_sq, z2_sq : real >= 0
        :math:`\|z_1\|^2`, :math:`\|z_2\|^2`.
    z12 : real
        :math:`z_1^\top z_2`, with :math:`z_{12}^2 \le \|z_1\|^2\|z_2\|^2`.

    Returns
    -------
    mpf
        M, correct to the working precision.  ``cross_conformity(c, d, v**2, v**2, v**2)`` is
        :func:`theory.conformity` ``(c, d, v)``.

    Raises
    ------
    theory.errors.ConvergenceError
        Past the time budget (large arguments: the k-series has about :math:`\sqrt{\Delta}/4` terms of
        interest and each term is a quadrature).
    """
    coupling = _check_pair_coupling(coupling)
    d = check_dimension(d, coupling)
    A, B, C = _check_vectors(z1_sq, z2_sq, z12)
    return _cross(coupling, d, A, B, C)


def _cross(coupling, d, A, B, C):
    if coupling == "iid":
        return mp.exp((A + B) / 2)
    c = coupling_cos(coupling, d)
    return _cross_at_angle(d, A, B, C, c)


def _cross_at_angle(d, A, B, C, c):
    s2 = 1 - c * c
    delta = max(A * B - C * C, mp.mpf(0)) * s2
    dd, h, g = mp.mpf(d), mp.mpf(d) / 2, (mp.mpf(d) - 1) / 2
    what = f"cross_conformity at d = {d}"

    def inner(cos_phi, sin_phi):
        x = (A + B + (B - A) * cos_phi) / 4 + c * C * sin_phi / 2
        x = max(x, mp.mpf(0))  # (>= 0 exactly; rounding only)
        u = delta * sin_phi ** 2 / 16
        if not u:
            return hyp1f1_pos(dd, h, x, what)

        def terms():
            coef = mp.mpf(1)
            k = 0
            while True:
                yield coef * hyp1f1_pos(dd + 2 * k, h + 2 * k, x, what)
                coef *= u * (dd + 2 * k) * (dd + 2 * k + 1) / ((k + 1) * (h + 2 * k) * (h + 2 * k + 1) * (g + k))
                k += 1

        def ratio_bound(k):
            return u * (dd + 2 * k) * (dd + 2 * k + 1) / ((k + 1) * (h + 2 * k) * (h + 2 * k + 1) * (g + k))

        return sum_series(terms, ratio_bound, what=f"{what}: the series in det X")

    offset = (A + B) / 2  # (the size of log M: the integrand is formed relative to it)

    def log_f(phi, s):  # symmetrised about pi/2 (the average runs over [0, pi/2]): phi and pi - phi
        check_time(what)
        cos_phi = mp.cos(phi)
        if A == B:
            return mp.log(inner(cos_phi, s)) - offset, 1
        return mp.log((inner(cos_phi, s) + inner(-cos_phi, s)) / 2) - offset, 1

    return _sine_weighted_average(d, log_f, what, offset=offset)


@guarded(grid=("d", "z1_sq", "z2_sq", "z12"))
def cross_conformity_conditional(coupling, d, z1_sq, z2_sq, z12, max_terms=4000):
    r"""The cross-pair conformity by the independent conditional route (module docs): one integral over
    :math:`t = u_1^\top\hat z_2` of two norm averages, each a double series of :math:`\chi_d` moments.

    A check route for moderate arguments (:math:`A, B \lesssim 50`; the double series have about
    :math:`(\sqrt{2A}+\sqrt{2B})^2` terms of interest, all positive): a ConvergenceError beyond
    ``max_terms`` terms.  ``coupling`` as :func:`cross_conformity`; d >= 3 (the density of t).
    """
    coupling = _check_pair_coupling(coupling)
    d = check_dimension(d, coupling)
    if d < 3:
        raise ValueError(f"d must be >= 3 for the conditional route, got {d}")
    A, B, C = _check_vectors(z1_sq, z2_sq, z12)
    if coupling == "iid":
        return mp.exp((A + B) / 2)
    c = coupling_cos(coupling, d)
    s = mp.sqrt(1 - c * c)
    what = f"cross_conformity_conditional at d = {d}"
    if not B:  # z2 = 0: the second factor is 1, the first the chi moment generating function of the norm of z1
        A, B, C = B, A, C
        if not B:
            return mp.mpf(1)
        # (symmetric in the two directions' roles up to the angle's sign, which does not matter at z = 0)
    alpha = C / mp.sqrt(B)
    beta = mp.sqrt(max(A * B - C * C, 0) / B)
    h, g = mp.mpf(d) / 2, (mp.mpf(d) - 1) / 2
    log_norm_t = mp.loggamma(h) - mp.loggamma(g) - mp.log(mp.pi) / 2  # density of t: (1-t^2)^((d-3)/2) / norm

    def norm_average(a, r):
        r"""E_rho[e^{rho a} 0F1(g; rho^2 r^2 / 4)] = sum_k (r^2/4)^k / (k! (g)_k) E[rho^{2k} e^{rho a}], with
        E[rho^{2k} e^{rho a}] = 2^k (h)_k 1F1(h+k; 1/2; a^2/2) + a sqrt(2) 2^k Gamma(h+k+1/2)/Gamma(h)
        1F1(h+k+1/2; 3/2; a^2/2) (the even and odd powers of the chi moments)."""
        total = mp.mpf(0)
        rr = r * r / 4
        half, three_half = mp.mpf(1) / 2, mp.mpf(3) / 2
        lg_h = mp.loggamma(h)
        coef = mp.mpf(1)  # (r^2/4)^k / (k! (g)_k) 2^k
        for k in range(max_terms):
            check_time(what)
            even = mp.rf(h, k) * mp.hyp1f1(h + k, half, a * a / 2)
            odd = a * mp.sqrt(2) * mp.exp(mp.loggamma(h + k + half) - lg_h) * mp.hyp1f1(h + k + half, three_half,
                                                                                      a * a / 2)
            term = coef * (even + odd)
            total += term
            if k > rr and abs(term) <= mp.eps * abs(total) / 16:
                return total
            coef *= 2 * rr / ((k + 1) * (g + k))
        raise ConvergenceError(f"{what}: the norm average did not converge in {max_terms} terms (arguments too "
                               "large for this check route; use cross_conformity)")

    def integrand(t):
        w = mp.sqrt(1 - t * t)
        return (mp.exp(log_norm_t) * w ** (d - 3) * norm_average(alpha * t, beta * w)
                * norm_average(c * mp.sqrt(B) * t, s * mp.sqrt(B) * w))

    return mp.quad(integrand, [-1, 0, 1])


def _check_kind(kind):
    if kind not in PAIR_KINDS:
        raise ValueError(f"kind must be one of {', '.join(repr(k) for k in PAIR_KINDS)}, got {kind!r}")
    return kind


def _oprf_a(A, kind):
    if kind != "oprf":
        if A is not None:
            raise ValueError(f"A is a parameter of kind 'oprf' only, got A = {A!r} for kind {kind!r}")
        return None
    if A is None:
        raise ValueError("kind 'oprf' needs its parameter A (< 1/8)")
    a = check_real(A, "A")
    a = to_mpf(a, "A")
    if not a < mp.mpf(1) / 8:
        raise ValueError(f"A must be < 1/8 (the OPRF variance is finite only there), got {A!r}")
    return a


@guarded(grid=("d", "z1_sq", "z2_sq", "z12"))
def cross_pair_moment(coupling, d, z1_sq, z2_sq, z12, *, kind="prf", A=None):
    r""":math:`\mathbb E[b_i(z_1)\,b_j(z_2)]` for a coupled pair of distinct directions and a feature kind's
    statistic b (:math:`\mathbb E\,b(z) = e^{\|z\|^2/2}`): ``prf`` :math:`e^{w^\top z}`, M of
    :func:`cross_conformity`; ``hyperbolic`` :math:`\cosh(w^\top z)`, :math:`\frac12(M(C) + M(-C))`; ``oprf``
    with its A (< 1/8), M for every A (module docs).  ``iid``: :math:`e^{(A+B)/2}` for every kind."""
    kind = _check_kind(kind)
    _oprf_a(A, kind)
    coupling = _check_pair_coupling(coupling)
    d = check_dimension(d, coupling)
    a, b, c = _check_vectors(z1_sq, z2_sq, z12)
    if kind == "hyperbolic" and coupling != "iid":
        return (_cross(coupling, d, a, b, c) + _cross(coupling, d, a, b, -c)) / 2
    return _cross(coupling, d, a, b, c)


@guarded(grid=("d", "z1_sq", "z2_sq", "z12"))
def same_direction_moment(d, z1_sq, z2_sq, z12, *, kind="prf", A=None):
    r""":math:`\mathbb E[b(z_1)\,b(z_2)]` for one Gaussian direction w: ``prf`` :math:`e^{\|z_1+z_2\|^2/2}`;
    ``hyperbolic`` :math:`\frac12(e^{\|z_1+z_2\|^2/2} + e^{\|z_1-z_2\|^2/2})`; ``oprf``
    :math:`(1-4A)^d(1-8A)^{-d/2}e^{(1-4A)\|z_1+z_2\|^2/(2(1-8A))}` (finite for A < 1/8)."""
    kind = _check_kind(kind)
    a = _oprf_a(A, kind)
    d = check_dimension(d)
    p, q, r = _check_vectors(z1_sq, z2_sq, z12)
    plus = p + q + 2 * r
    if kind == "prf":
        return mp.exp(plus / 2)
    if kind == "hyperbolic":
        return (mp.exp(plus / 2) + mp.exp((p + q - 2 * r) / 2)) / 2
    return (mp.exp(d * mp.log1p(-4 * a) - d * mp.log1p(-8 * a) / 2 + (1 - 4 * a) * plus / (2 * (1 - 8 * a))))
