r"""The cross-pair conformity: coupled directions with *different* vectors (issue 41, for the attention error).

The paper's RF-conformity (Sec. 4) is :math:`\mathbb E[e^{w_i^\top v}e^{w_j^\top v}]` for a coupled pair of
directions and one vector :math:`v = x + y`.  The error of random-feature *attention* (see
:func:`montecarlo.nn.attention_error`) also needs the pair with two different vectors,
the estimates of :math:`K(x, y_1)` and :math:`K(x, y_2)` that share the query's features:

.. math::
    M(z_1, z_2) = \mathbb E\big[e^{w_i^\top z_1 + w_j^\top z_2}\big],
    \qquad z_1 = x + y_1,\; z_2 = x + y_2,

a function of :math:`A = \|z_1\|^2`, :math:`B = \|z_2\|^2` and :math:`C = z_1^\top z_2` (rotation invariance).

Closed form
-----------
For a coupled pair :math:`w_i = \rho_1u_1`, :math:`w_j = \rho_2(cu_1 + su_2)` with :math:`(u_1, u_2)` a
Haar-random orthonormal pair, :math:`c = \cos\theta` the coupling's angle (0 for ``orthogonal``,
:math:`-1/(d-1)` for ``simplex``), :math:`s^2 = 1 - c^2`, and independent :math:`\chi_d` norms:

1. :math:`W = [w_i, w_j] = UR` with :math:`R = \begin{pmatrix}\rho_1 & c\rho_2\\ 0 & s\rho_2\end{pmatrix}`,
   and the Stiefel integral :math:`\mathbb E_U\,e^{\operatorname{tr}(M^\top U)} = {}_0F_1(\tfrac d2; \tfrac14M^\top M)`
   (Herz; Muirhead, Thm 7.4.1) with :math:`M = ZR^\top`, :math:`Z = [z_1, z_2]`: a 2 x 2 matrix argument
   :math:`X` with :math:`\operatorname{tr}X = \tfrac14(\rho_1^2A + 2c\rho_1\rho_2C + \rho_2^2B)` and
   :math:`\det X = \tfrac1{16}s^2\rho_1^2\rho_2^2\Delta`, :math:`\Delta = AB - C^2 \ge 0`;
2. for a 2 x 2 argument, :math:`{}_0F_1(b; X) = \sum_k \frac{(\det X)^k}{k!\,(b)_{2k}\,(b-\frac12)_k}
   {}_0F_1(b+2k; \operatorname{tr}X)` (checked by Monte Carlo in the tests);
3. with :math:`T = \rho_1^2 + \rho_2^2 \sim \chi^2_{2d}` and :math:`\rho_1^2/T = \sin^2(\phi/2)`, independent,
   :math:`\phi` of density :math:`\sin^{d-1}\phi/J` on :math:`[0, \pi]` (as in eq. ``theta_conformity``),
   :math:`\mathbb E_T[T^{2k}{}_0F_1(b+2k; Ty/4)] = 4^k(d)_{2k}\,{}_1F_1(d+2k; b+2k; y/2)`.

Hence, with :math:`b = d/2`,

.. math::
    M = \sum_{k\ge0}\frac{(s^2\Delta/16)^k\,(d)_{2k}}{k!\,(\frac d2)_{2k}\,(\frac{d-1}2)_k}\;
        \mathbb E_\phi\Big[\sin^{2k}\phi\;{}_1F_1\big(d+2k;\tfrac d2+2k;x(\phi)\big)\Big],\qquad
    x(\phi) = \tfrac14\big(A + B + (B - A)\cos\phi\big) + \tfrac c2\,C\sin\phi \;\ge 0.

At :math:`z_1 = z_2 = v` (:math:`\Delta = 0`) only k = 0 remains and this is eq. ``theta_conformity``:
:func:`cross_conformity` generalises :func:`theory.conformity` (``cross_conformity(c, d, v^2, v^2, v^2) =
conformity(c, d, v)``).  The terms are positive, and their ratio is at most
:math:`\frac{s^2\Delta\sin^2\phi}{16}\frac{(d+2k)(d+2k+1)}{(k+1)(\frac d2+2k)(\frac d2+2k+1)(\frac{d-1}2+k)}`,
decreasing in k (since :math:`{}_1F_1(a+2;b+2;x) \le {}_1F_1(a;b;x)` for :math:`a \ge b`, :math:`x \ge 0`),
which bounds the remainder.  ``iid`` pairs are independent: :math:`M = e^{(A+B)/2}`.

Feature kinds (:func:`cross_pair_moment`): the hyperbolic PRF's statistic :math:`\cosh(w^\top z)` gives
:math:`\frac12(M(A,B,C) + M(A,B,-C))`; the OPRF's, :math:`(1-4A)^{d/2}e^{2A\|w\|^2 + \sqrt{1-4A}\,w^\top z}`,
gives M itself for every A: its tilt :math:`e^{2A\rho^2}` with the factor :math:`(1-4A)^{d/2}` makes
:math:`\sqrt{1-4A}\,\rho` a :math:`\chi_d` norm again, independently for each direction of the pair.

Independent route (:func:`cross_conformity_conditional`): condition on :math:`u_1`; :math:`u_2` is uniform on
the sphere of :math:`u_1^\perp` and the part of :math:`u_1` orthogonal to :math:`z_2` uniform on a sphere too,
which leaves one integral over :math:`t = u_1^\top z_2/\|z_2\|` (density :math:`\propto(1-t^2)^{(d-3)/2}`) of
norm averages that are double series of :math:`\chi_d` moments:

.. math::
    M = \mathbb E_t\Big[\mathbb E_{\rho_1}\big[e^{\rho_1\alpha t}\,\Omega(\rho_1\beta\sqrt{1-t^2})\big]\,
        \mathbb E_{\rho_2}\big[e^{\rho_2c\sqrt B\,t}\,\Omega(\rho_2s\sqrt{B(1-t^2)})\big]\Big],\quad
    \Omega(r) = {}_0F_1(\tfrac{d-1}2; \tfrac{r^2}4),

with :math:`\alpha = C/\sqrt B`, :math:`\beta = \sqrt{\Delta/B}`.

References
----------
Reid et al., "Simplex Random Features", ICML 2023, Sec. 4 and App. A; Muirhead, "Aspects of Multivariate
Statistical Theory" (1982), Sec. 7.4; Herz, "Bessel functions of matrix argument", Ann. Math. 61 (1955).
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
