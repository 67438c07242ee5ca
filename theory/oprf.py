r"""Optimised positive random features (OPRFs, FAVOR++) under every coupling (beyond the paper).

The features, the optimal A, the proof that the pair term does not depend on A, and the domain:
:ref:`guide-theory.oprf` (``docs/guide/derivations.rst``).
"""

from __future__ import annotations

import functools
import math

from mpmath.libmp import from_man_exp, mpf_mul, mpf_shift, round_nearest, to_fixed
from mpmath.libmp.libelefun import ln2_fixed

from ._antithetic import _exp_pair, exp_excess as _tail_exp, fixed_series, hyp0f1_excess, hyp0f1_pair_fixed
from ._checks import check_dimension, guarded, square, to_mpf
from ._context import caller_prec, check_time, mp
from .conformities import check_v, coupling_conformity_v2_coefficient
from .errors import ConvergenceError
from .feature_kinds import register
from .mse import _prf_excess, _small_arg_bits, _weighted_pairs
from .registry import MissingHookError, get as get_coupling, names
from .validation import ArgumentTypeError, describe, show_int

__all__ = ["certified_mse", "check_a", "optimal_a", "pnc_pair_term", "second_moment", "theorem_couplings"]

#: Secant steps allowed when locating the optimal A of a norm-coupled coupling.
MAX_SECANT = 60

#: The Newton step of the pnc optimum (:func:`_pnc_optimal_a`) is accepted where this many times its error
#: estimate (the double-precision model's curvature times the step squared) is within the tolerance.
NEWTON_SAFETY = 256

#: The secant's derivative takes the small-(A, v) route (:func:`_pnc_excess_small_derivative`, about 5x the work
#: per node) only where the quadrature of the differentiated pair term would need more than this many extra bits
#: (v below about 1e-3); elsewhere that quadrature, with its extra bits.
SMALL_ROUTE_BITS = 48


def check_a(value, name="A"):
    """A as an mpf, refused unless real and < 1/8 (the OPRF variance is finite only there)."""
    if isinstance(value, bool) or value is None:
        raise ArgumentTypeError(f"{name} must be a real number < 1/8, got {describe(value)}")
    a = to_mpf(value, name)
    if not a < mp.mpf(1) / 8:
        raise ValueError(f"{name} must be < 1/8 (the OPRF second moment (1-8A)^(-d/2) ... is finite only there; "
                         f"A <= 0 keeps the features bounded), got {describe(value)}")
    return a


@functools.lru_cache(maxsize=None)
def theorem_couplings():
    """Couplings whose norms are i.i.d. chi_d and independent of the directions, with a PRF closed form
    (the OPRF pair term is the PRF one): exact, isotropic, no coupled norm pairs."""
    return tuple(c for c in names(has="prf_conformity", exact=True, isotropic=True)
                 if get_coupling(c).norm_pairs is None)


def _log_excess_moment(d, vv, a):
    r""":math:`\log\mathbb E[b^2] - v^2 = d\log(1-4A) - \frac d2\log(1-8A) + v^2/(1-8A)`, evaluated as
    :math:`\frac d2\operatorname{log1p}\big(\frac{16A^2}{1-8A}\big) + \frac{v^2}{1-8A}` (from
    :math:`(1-4A)^2 = (1-8A) + 16A^2`): two terms >= 0, no cancellation.  The two logarithms of the first form
    cancel to :math:`8dA^2`, losing :math:`\log_2(1/(2|A|))` bits (the OPRF variance was 0.0 at A = -1e-30,
    v = 0, and 2.3e-3 off at A = -1e-25)."""
    return mp.mpf(d) / 2 * mp.log1p(16 * a * a / (1 - 8 * a)) + square(vv) / (1 - 8 * a)


def _exponent(d, vv, a):
    """:func:`_log_excess_moment` (X) with the bits its exponential needs, and the precision to use it at.

    exp(X) magnifies the rounding of X by X (large d, v or |A|): X is formed again with mag(X) more bits
    (with 8 + mag(d) guard bits the OPRF MSE was off by 1.1e-7 and :func:`second_moment` by 5.8e-5 at d = 4,
    v = 2^33, A = -1/128)."""
    prec = mp.prec + 8
    with mp.workprec(prec):
        x = _log_excess_moment(d, vv, a)
    extra = max(0, int(mp.mag(x))) if x else 0
    if extra:
        prec += extra
        with mp.workprec(prec):
            x = _log_excess_moment(d, vv, a)
    return x, prec


def _variance(d, vv, A):
    r""":math:`\mathrm{Var}[b] = e^{v^2}\operatorname{expm1}(X)` (:func:`_exponent`): relative accuracy for every
    A < 1/8, v >= 0 and d."""
    x, prec = _exponent(d, vv, A)
    with mp.workprec(prec):
        return mp.exp(square(vv)) * mp.expm1(x)


@guarded(grid=("d", "v"))
def second_moment(d, v, A):
    r"""Per-direction :math:`\mathbb E[b^2] = (1-4A)^d(1-8A)^{-d/2}e^{2(1-4A)v^2/(1-8A)}` (:ref:`guide-theory.oprf`)."""
    d = check_dimension(d)
    vv = check_v(v)
    a = check_a(A)
    x, prec = _exponent(d, vv, a)
    with mp.workprec(prec + (max(0, 2 * int(mp.mag(vv))) if vv else 0)):  # v^2 + X to the bits exp needs
        return mp.exp(square(vv) + x)


@guarded(grid=("s",))
def optimal_a(s):
    r""":math:`A^* = (1 - 2s - \sqrt{(2s+1)^2 + 8s})/16`, the A minimising the OPRF variance at :math:`s = v^2/d`.

    Evaluated without cancellation for every s >= 0 (relative accuracy; mpf has no exponent range, so also at
    s = 1e600, :math:`A^* \approx -s/4`): for :math:`s \ge 1/2` as
    :math:`-(\sqrt{(2s+1)^2+8s} + (2s - 1))/16`, a sum of non-negative terms; for s < 1/2 through the product of
    the two roots of :math:`16A^2 - (2-4s)A - s = 0` (:math:`-s/16`) as :math:`A^* = -s/(16A_+)`,
    :math:`A_+ = (1 - 2s + \sqrt{(2s+1)^2+8s})/16` (again a sum of positive terms), so that A* keeps its relative
    accuracy at tiny s (:math:`A^* \approx -s/2`).

    Parameters
    ----------
    s : real >= 0
        :math:`\|x + y\|^2/d` for one pair, or its mean over queries and keys for a data set.
    """
    s = to_mpf(s, "s")
    if s < 0:
        raise ValueError(f"s must be >= 0 (a mean squared norm over d), got {describe(s)}")
    return _optimal_a(s)


def _optimal_a(s):
    # roots of 16 A^2 - (2 - 4s) A - s = 0; both forms below add terms of one sign (no cancellation):
    # s >= 1/2: A* = -(sqrt(...) + (2s - 1))/16 directly; s < 1/2: A+ A- = -s/16 with
    # A+ = ((1 - 2s) + sqrt(...))/16 > 0 (the direct form would cancel at tiny s, A* ~ -s/2)
    root = mp.sqrt((2 * s + 1) ** 2 + 8 * s)
    if 2 * s >= 1:
        return -(root + (2 * s - 1)) / 16
    return -s / ((1 - 2 * s) + root)


def _pnc_pair_term(d, vv, a):
    r""":math:`(1-4A)^d\,\mathbb E[e^{4As}{}_0F_1(;\frac d2;\frac{(1-4A)v^2s}{2})]`, s = x_1 + x_2 over an antithetic
    pair (x = w^2/2), by the quadrature of :mod:`theory.pnc` (the integrand :func:`_pair_term_integrand`)."""
    from .pnc import _expect_over_lower_half

    return _expect_over_lower_half(
        d, _pair_term_integrand(d, vv, a),
        f"OPRF pair term of pnc_orthogonal (d = {show_int(d)}, v = {mp.nstr(vv, 6)}, A = {mp.nstr(a, 6)})")


def _pair_term_integrand(d, vv, a, derivative=False):
    r"""s -> :math:`e^{c + 4As}F_0` (c = d ln(1 - 4A), :math:`F_0 = {}_0F_1(;h;ts)`, h = d/2, t = (1-4A)v^2/2): the
    integrand of :func:`_pnc_pair_term`; ``derivative``: its A-derivative
    :math:`e^{c + 4As}((4s - c_0)F_0 - c_1sF_1)`, :math:`F_1 = {}_0F_1(;h+1;ts)` (:math:`{}_0F_1' = F_1/h`),
    :math:`c_0 = 4d/(1-4A)`, :math:`c_1 = 2v^2/h` (:func:`_pnc_pair_term_derivative`; the first function of
    :func:`_pair_term_slopes`).  The exponential by :func:`theory._antithetic.exp_affine`, the 0F1 sums by their
    fixed-point loops and the derivative's bracket in fixed point at their scale (absolute error a few units of
    :math:`2^{-p-16}F_0`, below the mpf expression's rounding of s alone, :math:`2^{-p}dF_0`); one rounding: 15-25
    us against 35-55 us for the mpf expressions."""
    from ._antithetic import _hyp0f1_positive, exp_affine

    if derivative:
        return _pair_term_slopes(d, vv, a)[0]
    tt = ((1 - 4 * a) * square(vv) / 2)._mpf_
    base = exp_affine(d * mp.log1p(-4 * a), 4 * a)

    def value(s):
        prec = mp.prec
        z = mpf_mul(tt, s._mpf_, prec, round_nearest)
        return mp.make_mpf(mpf_mul(base(s), _hyp0f1_positive(d, z, 0, raw=True), prec, round_nearest))

    return value


def _pnc_pair_term_derivative(d, vv, a, cancel=0, start=None):
    r""":math:`\partial_A` of :func:`_pnc_pair_term` (the integrand differentiated under the integral,
    :func:`_pair_term_integrand`)."""
    from .pnc import _expect_over_lower_half

    return _expect_over_lower_half(d, _pair_term_integrand(d, vv, a, derivative=True),
                                   f"derivative of the OPRF pnc pair term (d = {show_int(d)})", cancel=cancel,
                                   start=start)


def _pnc_pair_term_derivatives(d, vv, a, cancel=0, start=None):
    r"""(:math:`\partial_A` of :func:`_pnc_pair_term`, a function returning :math:`\partial_A^2`): the second
    quadrature, over the same nodes, reads the first's 0F1 sums from its memo (:func:`_pair_term_slopes`) and runs
    only if asked (the Newton step of :func:`_pnc_optimal_a`)."""
    from .pnc import _expect_over_lower_half

    first, second = _pair_term_slopes(d, vv, a)
    what = f"derivatives of the OPRF pnc pair term (d = {show_int(d)})"
    prec = mp.prec

    def curvature():
        with mp.workprec(prec):
            return _expect_over_lower_half(d, second, what, cancel=cancel, start=start)

    return _expect_over_lower_half(d, first, what, cancel=cancel, start=start), curvature


def _pair_term_slopes(d, vv, a):
    r"""(s -> :math:`\partial_Af`, s -> :math:`\partial_A^2f`) for the pair term's integrand
    :math:`f = e^{c + 4As}F_0` (:func:`_pair_term_integrand`): with :math:`U = 4s - c_0`,
    :math:`B = UF_0 - c_1sF_1` (:math:`\partial_Af = e^{c + 4As}B`) and
    :math:`\partial_AF_0 = -c_1sF_1`, :math:`\partial_AF_1 = -c_1s\frac{h}{h+1}F_2`, :math:`\partial_Ac_0 = c_0^2/d`:
    :math:`\partial_A^2f = e^{c + 4As}(UB - \frac{c_0^2}dF_0 - Uc_1sF_1 + c_1^2s^2\frac h{h+1}F_2)`,
    :math:`F_2 = {}_0F_1(;h+2;ts) = (F_0 - F_1)h(h+1)/(ts)` (the contiguous relation; it loses
    log2(h(h+1)/(ts)) bits, at most about 40 of the p + 16 where this route runs, v >= 1e-3: the second derivative
    only sizes a Newton step).  In fixed point as :func:`_pair_term_integrand`; the second function reads the
    first's sums from a memo keyed on s (the same nodes)."""
    from ._antithetic import exp_affine

    h = mp.mpf(d) / 2
    t = (1 - 4 * a) * square(vv) / 2
    base = exp_affine(d * mp.log1p(-4 * a), 4 * a)
    tt = t._mpf_
    c0, c1 = 4 * d / (1 - 4 * a), 4 * square(vv) / d
    c00, c11 = c0 * c0 / d, c1 * c1 * h / (h + 1)
    consts, memo = {}, {}

    def sums(s):
        st, prec = s._mpf_, mp.prec
        key = (st, prec)
        if key not in memo:
            zt = mpf_mul(tt, st, prec, round_nearest)
            f0, f1, bits = hyp0f1_pair_fixed(d, zt)
            if bits not in consts:
                consts[bits] = tuple(to_fixed(c._mpf_, bits) for c in (c0, c1, c00, c11))
            S = to_fixed(st, bits)
            k0, k1 = consts[bits][:2]
            u, w = (S << 2) - k0, k1 * S >> bits  # 4s - c0, c1 s
            memo[key] = (base(s), bits, S, zt, f0, f1, u, w, u * f0 - w * f1)  # (the last: B at 2^(2 bits))
        return memo[key]

    def first(s):
        e, bits, _, _, _, _, _, _, bracket = sums(s)
        return mp.make_mpf(mpf_mul(e, from_man_exp(bracket, -2 * bits), mp.prec, round_nearest))

    def second(s):
        e, bits, S, zt, f0, f1, u, w, bracket = sums(s)
        k00, k11 = consts[bits][2:]
        Z = to_fixed(zt, bits)
        f2 = ((f0 - f1) * d * (d + 2) << bits) // (4 * Z) if Z else 1 << bits
        curve = ((u * bracket) >> bits) - k00 * f0 - ((u * w) >> bits) * f1 + (((k11 * S >> bits) * S) >> bits) * f2
        return mp.make_mpf(mpf_mul(e, from_man_exp(curve, -2 * bits), mp.prec, round_nearest))

    return first, second


@guarded(grid=("d", "v"))
def pnc_pair_term(d, v, A):
    r""":math:`\mathbb E[b_ib_j]` of one norm-coupled orthogonal pair of OPRFs (depends on A, :ref:`guide-theory.oprf`).

    At A = 0 it is :func:`theory.pnc.pair_conformity`; the tests check it against Monte Carlo and, at A = 0,
    against that function's second route.
    """
    d = check_dimension(d, "pnc_orthogonal")
    return _pnc_pair_term(d, check_v(v), check_a(A))


def _tail_0f1(h, z):
    r"""0F1(; h; z) - 1 - z/h (z >= 0, h a half-integer) without cancellation, to the working precision:
    :func:`theory._antithetic.hyp0f1_excess` (its one home; the series from its z^2 term)."""
    return hyp0f1_excess(int(2 * h), z)


def _tail_0f1_pair(h, z):
    r"""(:func:`_tail_0f1` at h, the same at h + 1) for z >= 0: for z < 1/2 from one fixed-point loop (the terms
    of the second sum are those of the first times :math:`q_2/(q_2 + 2k)`, :math:`q_2 = 2h + 4`: the ratio
    of :math:`(h+2)_k` to :math:`(h+3)_k`), each term truncated by at most one unit as in
    :func:`theory._antithetic._fixed_sum`; else the two calls."""
    if not z < mp.mpf(1) / 2:
        return _tail_0f1(h, z), _tail_0f1(h + 1, z)

    bits = mp.prec + 16
    Z = to_fixed(z._mpf_, bits)
    q2 = int(2 * h) + 4
    total = total1 = term = 1 << bits
    k = 0
    while term:
        term = ((term * Z) >> bits) * 2 // ((q2 + 2 * k) * (3 + k))
        k += 1
        total += term
        total1 += term * q2 // (q2 + 2 * k)
    zz = z * z
    return (zz / (2 * h * (h + 1)) * mp.make_mpf(from_man_exp(total, -bits)),
            zz / (2 * (h + 1) * (h + 2)) * mp.make_mpf(from_man_exp(total1, -bits)))


def _pnc_small_excess_applies(d, vv, a):
    """Whether the second route of the pnc pair excess (:func:`_pnc_excess_small`) converges fast here."""
    t = (1 - 4 * a) * square(vv) / 2
    return 8 * abs(a) * (d + 1) <= 1 and 2 * t * (d + 1) / d <= mp.mpf(1) / 2


def _small_route_bits(d):
    """Bits the small-(A, v) derivative (:func:`_pnc_excess_small_derivative`) adds to the working precision: its
    difference of two expectations loses about log2(d) (2 log2(d) + 16 allowed)."""
    return 2 * max(0, int(mp.mag(d))) + 16


def _small_excess_bits(d):
    """Bits the small-(A, v) pair excess (:func:`_pnc_excess_small`) adds to the working precision first: its
    difference loses log2(d) to log2(d) + 1 bits (measured over the benchmark grid, d = 2 .. 1024, v = 1e-300 ..
    0.25, 30 digits), log2(d) + 16 allowed, the loss measured and the excess redone with more where it exceeds
    them less 12 (:data:`SMALL_EXCESS_TRIES`).  Before: 2 log2(d) + 16 a priori, which put the pnc rule a
    precision tier higher at d = 256 and 1024 (176 bits against 160 at 30 digits)."""
    return max(0, int(mp.mag(d))) + 16


#: Times :func:`_pnc_excess_small` raises its extra bits when its difference loses more than they allow.
SMALL_EXCESS_TRIES = 3


def _pnc_excess_small(d, vv, a):
    r"""The pnc OPRF pair excess :math:`\mathbb E[b_ib_j] - e^{v^2}` at small A and v without the cancellation
    against :math:`e^{v^2}` (so without extra bits growing like log(1/v)).

    With :math:`f(s) = (1-4A)^de^{4As}{}_0F_1(;h;ts)`, h = d/2, t = (1-4A)v^2/2, the pair term is
    :math:`\mathbb E_{pnc}f(s)` over the antithetic pair's sum s, and the same expectation over s ~ Gamma(d)
    (i.i.d. norms) is the orthogonal PRF conformity :math:`\rho_{orth}(v)` (the theorem).  Both laws of s have
    mass 1 and mean d, so the linear part :math:`(1-4A)^d(1 + (4A + t/h)s)` of f drops out of their difference:

    .. math:: \mathbb E b_ib_j - e^{v^2} = \big(\mathbb E_{pnc}\tilde f - \mathbb E_{\Gamma(d)}\tilde f\big)
              + (\rho_{orth}(v) - e^{v^2}),\qquad \tilde f = f - (1-4A)^d(1 + (4A + t/h)s),

    :math:`\tilde f/(1-4A)^d = (e^x-1-x)F + (1+x)(F-1-z/h) + xz/h` (x = 4As, z = ts, F = 0F1(;h;z)) evaluated
    from its tails; :math:`\mathbb E_{pnc}\tilde f` by the quadrature of :mod:`theory.pnc`,
    :math:`\mathbb E_{\Gamma(d)}\tilde f = (1-4A)^d\sum_{n\ge2}(d)_n\sum_{j+k=n}\frac{(4A)^j}{j!}\frac{t^k}
    {(h)_kk!}` (the moments of Gamma(d) are rising factorials); the last term as for the theorem couplings.
    The difference of the two expectations loses about log2(d) bits (their relative gap is the pair's
    covariance over d^2): the working precision is raised by :func:`_small_excess_bits`, the loss measured
    (the larger expectation's exponent less the difference's) and the excess redone with the loss + 16 bits
    where it exceeds them less 12 (the quadrature's tolerance is 2^(10 - p) relative), at most
    :data:`SMALL_EXCESS_TRIES` times.  Used where :func:`_pnc_small_excess_applies` (8|A|(d+1) <= 1,
    2t(d+1)/d <= 1/2: both series shrink by half a term)."""
    from .pnc import _expect_over_lower_half

    h = mp.mpf(d) / 2
    what = f"OPRF pnc pair excess (d = {show_int(d)}, v = {mp.nstr(vv, 6)}, A = {mp.nstr(a, 6)})"
    extra = _small_excess_bits(d)
    for _ in range(SMALL_EXCESS_TRIES):
        with mp.workprec(mp.prec + extra):
            t = (1 - 4 * a) * square(vv) / 2
            scale = mp.exp(d * mp.log1p(-4 * a))

            four_a, inv_h = 4 * a, 1 / h

            def ftilde(s):
                x, z = four_a * s, t * s
                fixed = _ftilde_fixed(d, x, z)
                if fixed is not None:
                    return scale * fixed
                tz = _tail_0f1(h, z)
                zh = z * inv_h
                return scale * (_tail_exp(x) * (1 + zh + tz) + (1 + x) * tz + x * zh)

            e_pnc = _expect_over_lower_half(d, ftilde, what)
            e_gamma = scale * _gamma_series(d, h, a, t, square(vv), False)
            diff = e_pnc - e_gamma
            result = diff + _prf_excess("orthogonal", d, vv)
        size = max(int(mp.mag(e)) if e else -mp.inf for e in (e_pnc, e_gamma))
        lost = size - int(mp.mag(diff)) if diff else extra + 2 * mp.prec
        if lost <= extra - 12:
            return +result
        extra = lost + 16
    raise ConvergenceError(f"{what}: the difference of its two expectations cancels by {lost} bits beyond "
                           f"{SMALL_EXCESS_TRIES} raises of the precision; lower the working precision")


def _ftilde_fixed(d, x, z, derivative=False):
    r""":math:`(e^x-1-x)F + (1+x)(F-1-z/h) + xz/h` (F = 0F1(;h;z), h = d/2; the integrand of
    :func:`_pnc_excess_small` over its factor :math:`(1-4A)^d`) for mpf x and z >= 0 with |x|, z < 1/2, in fixed
    point: None outside (the caller's mpf route).  ``derivative``: also (P, Q), its derivative in A being
    s (P + wQ) for x = 4As, z = ts, t' = w (:func:`_pnc_excess_small_derivative`):
    :math:`P = 4((t_e + x)F + t_z + z/h)`, :math:`Q = t_e(1/h + f_1) + (1 + x)f_1 + x/h`,
    :math:`f_1 = ({}_0F_1(;h+1;z) - 1)/h` (:math:`t_e = e^x - 1 - x`, :math:`t_z = F - 1 - z/h`).

    With :math:`\mu = 2^e > |x|, z` (e <= -1) the value is :math:`\mu^2` and P, Q are :math:`\mu` times numbers
    of order 1 (over powers of d): :math:`t_e = x^2\sum_{k\ge0}x^k/(k+2)!`,
    :math:`t_z = \frac{z^2}{2h(h+1)}\sum_{j\ge0}u_j`, :math:`u_{j+1} = u_jz/((h+2+j)(3+j))` (at h + 1 the same with
    h + 3 + j), each sum by :func:`theory._antithetic.fixed_series` at W = p + 16 + 2 log2(d) bits (the terms
    :math:`\mu^2` over about d^2/2 and d/2; each term below 1/3 of the one before), the products and the quotients by powers of d each to a unit: every result to about 16
    units of :math:`2^{-W}` times its scale, beyond the mpf route's rounding of each of its terms at p bits (the
    terms cancel where A balances t: both routes then lose alike).  About 3x faster than the mpf route (its ten to
    twenty products and sums at 100-200 bits cost 2-3 us each)."""
    xt, zt = x._mpf_, z._mpf_
    ex = xt[2] + xt[3] if xt[1] else None
    ez = zt[2] + zt[3] if zt[1] else None
    if zt[0]:
        return None
    if ex is None and ez is None:
        zero = mp.mpf(0)
        return (zero, zero, zero) if derivative else zero
    e = max(v for v in (ex, ez) if v is not None)  # |x|, z < mu = 2^e
    if e > -1:
        return _ftilde_fixed_large(d, xt, zt, e, derivative)
    W = mp.prec + 16 + 2 * d.bit_length()
    X = to_fixed(mpf_shift(xt, -e), W) if ex is not None else 0  # x / mu at scale 2^W
    Z = to_fixed(mpf_shift(zt, -e), W) if ez is not None else 0
    one, m = 1 << W, -e
    xa, za = X >> m, Z >> m  # x and z themselves at scale 2^W (|x|, z < 1/2)
    se = fixed_series(xa, W, 6, None, 2)  # sum_k x^k / (k + 2)!
    # 0F1's tails at h (and h + 1): u_(j+1) = 2 u_j z / ((d + q + 2j)(3 + j))
    sums = [fixed_series(za, W, d + q, 3, 1) for q in ((4, 6) if derivative else (4,))]
    zz = Z * Z >> W  # (z / mu)^2
    te = ((X * X >> W) * se) >> W  # t_e / mu^2
    tz = (zz * sums[0] >> W) * 2 // (d * (d + 2))  # t_z / mu^2
    zh = 2 * za // d  # z / h
    big_f = one + zh + (tz >> (2 * m))  # F
    value = ((te * big_f) >> W) + (((one + xa) * tz) >> W) + ((X * Z * 2 // d) >> W)
    value = mp.make_mpf(from_man_exp(value, 2 * e - W))
    if not derivative:
        return value
    te, tz = te >> m, tz >> m  # t_e / mu, t_z / mu
    tz1 = ((zz * sums[1] >> W) * 2 // ((d + 2) * (d + 4))) >> m  # (0F1(;h+1;z) - 1 - z/(h+1)) / mu
    f1 = (tz1 + 2 * Z // (d + 2)) * 2 // d  # f_1 / mu
    p_ = 4 * ((((te + X) * big_f) >> W) + tz + 2 * Z // d)
    q_ = ((te * (2 * one // d + (f1 >> m))) >> W) + (((one + xa) * f1) >> W) + 2 * X // d
    return value, mp.make_mpf(from_man_exp(p_, e - W)), mp.make_mpf(from_man_exp(q_, e - W))


#: |x| and z up to 2^this value take the fixed-point form (:func:`_ftilde_fixed_large`); beyond, the mpf route.
FTILDE_MAX_LOG2 = 12


def _ftilde_fixed_large(d, xt, zt, e, derivative):
    r""":func:`_ftilde_fixed` where |x| or z >= 1/2 (mpf tuples ``xt``, ``zt``; 2^e > both): the same expressions
    without the power-of-two scale, from :math:`F = {}_0F_1(;h;z)` and :math:`{}_0F_1(;h+1;z)` by
    :func:`theory._antithetic.hyp0f1_pair_fixed` (at its W = p + 16 + log2(z + p) bits and 2 log2(d) more, as the
    small branch) and :math:`e^x` by one fixed-point exponential:
    :math:`t_e = e^x - 1 - x`, :math:`t_z = F - 1 - z/h` as differences (their absolute errors, a few units of
    2^-W, are below 2^-p of the terms: here |x| >= 1/2 makes :math:`t_e \ge 0.1` or z >= 1/2 makes
    :math:`t_z \ge z^2/(2h(h+1)) \ge 2^{-2\log_2 d - 1}`).  None beyond 2^:data:`FTILDE_MAX_LOG2`."""
    if e > FTILDE_MAX_LOG2:
        return None
    F0, F1, W = hyp0f1_pair_fixed(d, zt, 2 * d.bit_length())
    one = 1 << W
    X, Z = to_fixed(xt, W), to_fixed(zt, W)
    em, en = _exp_pair(X, W, ln2_fixed(W))
    ex = em << en if en >= 0 else em >> -en  # e^x at scale 2^W
    zh = 2 * Z // d  # z / h
    te, tz = ex - one - X, F0 - one - zh
    value = (te * F0 + (one + X) * tz + X * zh) >> W
    value = mp.make_mpf(from_man_exp(value, -W))
    if not derivative:
        return value
    f1 = 2 * (F1 - one) // d  # (0F1(;h+1;z) - 1) / h
    p_ = 4 * ((((te + X) * F0) >> W) + tz + zh)
    q_ = ((te * (2 * one // d + f1) + (one + X) * f1) >> W) + 2 * X // d
    return value, mp.make_mpf(from_man_exp(p_, -W)), mp.make_mpf(from_man_exp(q_, -W))


def _gamma_series(d, h, a, t, v2, derivative):
    r""":math:`\sum_{n\ge2}(d)_nc_n` with :math:`c_n = \sum_{j+k=n}\alpha_j\beta_k`,
    :math:`\alpha_j = \frac{(4A)^j}{j!}`, :math:`\beta_k = \frac{t^k}{(h)_kk!}` (t = (1-4A)v^2/2), or its
    derivative in A (:math:`\alpha_j' = 4\alpha_{j-1}`, :math:`\beta_k' = t'\beta_{k-1}/(h+k-1)`, t' = -2v^2):
    the expectation over Gamma(d) of the part of :math:`e^{4As}{}_0F_1(;h;ts)` beyond the linear one
    (:func:`_pnc_excess_small`).  The coefficients are kept in lists (each c_n a Cauchy product, n + 1
    products); stopped after n > 3 at a term below eps/4 of the sum."""
    total, n, rising = mp.mpf(0), 2, mp.mpf(d) * (d + 1)
    four_a, dt = 4 * a, -2 * v2
    alpha, beta = [mp.mpf(1)], [mp.mpf(1)]
    while True:
        check_time("OPRF pnc pair excess (Gamma(d) series)", units=1 + n // 4)  # a Cauchy product of n + 1 terms
        while len(alpha) <= n:
            j = len(alpha)
            alpha.append(alpha[-1] * four_a / j)
            beta.append(beta[-1] * t / ((h + j - 1) * j))
        if derivative:
            c = mp.fsum(4 * alpha[n - k - 1] * beta[k] for k in range(n)) + mp.fsum(
                alpha[n - k] * dt * beta[k - 1] / (h + k - 1) for k in range(1, n + 1))
        else:
            c = mp.fsum(alpha[n - k] * beta[k] for k in range(n + 1))
        term = rising * c
        total += term
        if n > 3 and abs(term) <= mp.eps * abs(total) / 4:
            return total
        rising *= d + n
        n += 1


def _pnc_excess_small_derivative(d, vv, a, start=None):
    r""":math:`\partial_A` of the pnc OPRF pair term at small A and v, without the cancellation of the
    integrand's near-zero mean: the theorem makes :math:`\partial_A\mathbb E_{\Gamma(d)}f = 0`, and the linear part
    of f has equal expectations under both laws, so
    :math:`\partial_A\mathbb E_{pnc}f = \mathbb E_{pnc}\partial_A\tilde f - \partial_A\mathbb E_{\Gamma(d)}\tilde f`
    (notation of :func:`_pnc_excess_small`), with :math:`\partial_A\tilde f` from the tails' derivatives."""
    from .pnc import _expect_over_lower_half

    h = mp.mpf(d) / 2
    with mp.workprec(mp.prec + _small_route_bits(d)):
        v2 = square(vv)
        t = (1 - 4 * a) * v2 / 2
        scale = mp.exp(d * mp.log1p(-4 * a))
        dscale = -4 * d * scale / (1 - 4 * a)

        four_a, w, inv_h, inv_h1 = 4 * a, -2 * v2, 1 / h, 1 / (h + 1)

        def dftilde(s):
            # d/dA with dx = 4 s dA, dz = w s dA (x = 4As, z = ts), d(e^x - 1 - x)/dx = e^x - 1 = te + x
            x, z = four_a * s, t * s
            fixed = _ftilde_fixed(d, x, z, derivative=True)
            if fixed is not None:
                inner, p_, q_ = fixed
                return dscale * inner + scale * (s * (p_ + w * q_))
            tz, tz1 = _tail_0f1_pair(h, z)
            te = _tail_exp(x)
            zh = z * inv_h
            big_f = 1 + zh + tz
            f1 = (tz1 + z * inv_h1) * inv_h  # (0F1(;h+1;z) - 1)/h = d/dz of the tail
            x1 = 1 + x
            inner = te * big_f + x1 * tz + x * zh
            dinner = s * (4 * ((te + x) * big_f + tz + zh) + w * (te * (inv_h + f1) + x1 * f1 + x * inv_h))
            return dscale * inner + scale * dinner

        e_pnc = _expect_over_lower_half(
            d, dftilde,
            f"derivative of the OPRF pnc pair term (d = {show_int(d)}, v = {mp.nstr(vv, 6)}, A = {mp.nstr(a, 6)})",
            start=start)
        e_gamma = dscale * _gamma_series(d, h, a, t, v2, False) + scale * _gamma_series(d, h, a, t, v2, True)
        result = e_pnc - e_gamma
    return +result


def _pair_excess(coupling, d, vv, A):
    if coupling in theorem_couplings():
        return _prf_excess(coupling, d, vv)  # the theorem: no A
    if coupling == "pnc_orthogonal":
        if _pnc_small_excess_applies(d, vv, A):
            return _pnc_excess_small(d, vv, A)
        with mp.workprec(mp.prec + _small_arg_bits(vv)):
            return _pnc_pair_term(d, vv, A) - mp.exp(square(vv))
    raise MissingHookError(f"coupling must be one of {', '.join(map(repr, _pair_couplings()))} for OPRFs in closed "
                           f"form (no OPRF pair term for {coupling!r}: use montecarlo.empirical_mse), got "
                           f"{coupling!r}")


@functools.lru_cache(maxsize=None)
def _pair_couplings():
    return theorem_couplings() + tuple(c for c in ("pnc_orthogonal",) if c in names())


def _small_v(coupling, d, A):
    """v -> 0: with A = 0 the PRF coefficients of v^2; with A != 0 the MSE does not vanish at v = 0: its values."""
    if A == 0:
        return mp.mpf(1), coupling_conformity_v2_coefficient(coupling, d) - 1
    zero = mp.mpf(0)
    return _variance(d, zero, A), _pair_excess(coupling, d, zero, A)


def _parameters(coupling, d, vv, m, A=None):
    """{"A": A} checked; None -> the A minimising this coupling's MSE at v (closed form under the theorem,
    a secant search on the derivative for pnc_orthogonal)."""
    if A is not None:
        return {"A": check_a(A)}
    a0 = _optimal_a(square(vv) / d)
    if coupling != "pnc_orthogonal" or vv == 0:
        return {"A": a0}
    excess_bits = _pnc_rule_at_the_excess_tier(d, vv, a0)
    return {"A": _pnc_optimal_a(d, vv, m, a0, excess_bits)}


def _pnc_rule_at_the_excess_tier(d, vv, a):
    """Set theory.pnc's rule for d to the precision the pair excess at the optimum will ask for
    (:func:`_pair_excess` at A ~ ``a``, the theorem's A*: its small route's or its difference's extra bits) before
    the search for the optimum, whose derivatives ask for fewer bits: their nodes are then those of the excess
    (at 30 digits the derivatives' rule, a precision tier lower, was built again for the excess: 30-45 % of the
    call).  Only the rule's split points are computed here; its nodes are built by the quadratures that use
    them.  At 15 digits both fall in one tier already.  Returns the excess's precision: the derivatives' quadratures
    start their pieces at the rungs the excess will (``start``), so that they build no rung it will not use (at
    30 digits about a third of the nodes before)."""
    from .pnc import _pair_rule

    small = _pnc_small_excess_applies(d, vv, a)
    bits = mp.prec + (_small_excess_bits(d) if small else _small_arg_bits(vv))
    _pair_rule(d).ensure(f"OPRF pair term of pnc_orthogonal (d = {show_int(d)})", prec=bits)
    return bits


def _pnc_pair_covariance(d):
    r""":math:`\mathrm{Cov}(x_1, x_2)` of the two halves :math:`x = w^2/2` of a norm-coupled antithetic pair
    (Gamma(d/2) marginals), from :math:`\mathbb E[(x_1 + x_2)^2] = d^2 + d + 2\,\mathrm{Cov}` by the quadrature
    of :mod:`theory.pnc` (the d^2 that cancels costs log2(d) bits, Cov ~ -d/2: :func:`_small_excess_bits`, the
    pair excess's, so that both use one rule; before 2 log2(d) + 8, a precision tier above it at d = 1024)."""
    from .pnc import _expect_over_lower_half

    with mp.workprec(mp.prec + _small_excess_bits(d)):
        es2 = _expect_over_lower_half(d, lambda s: s * s, f"second moment of the pnc pair sum (d = {show_int(d)})")
        return (es2 - mp.mpf(d) * d - d) / 2


def _pnc_small_v_a(d, vv, n_pnc):
    r"""Leading term of the pnc OPRF optimum as v -> 0.

    Near (A, v^2) = (0, 0) the derivative of the MSE in A is, to first order,
    :math:`g \approx (16d + 32nC)A + (8 + 8nC/d)v^2` (n the weighted number of norm-coupled pairs, C the
    covariance of the pair's halves, :func:`_pnc_pair_covariance`): from the variance, :math:`16Ad + 8v^2`;
    from the pair term, :math:`\partial_A^2[(1-4A)^d\mathbb E e^{4As}]_{0} = 16(\mathrm{Var}\,s - d) = 32C`
    and :math:`\partial_{v^2}\partial_A = (4/d)\mathrm{Var}\,s - 4 = 8C/d`.  Hence
    :math:`A^* = -\frac{v^2}{2d}\,\frac{1 + nC/d}{1 + 2nC/d}\,(1 + O(v^2))` (n = 0 gives the theorem's
    :math:`-s/2`)."""
    y = n_pnc * _pnc_pair_covariance(d) / d
    return -square(vv) / (2 * d) * (1 + y) / (1 + 2 * y)


def _pnc_optimal_a(d, vv, m, a0, excess_bits=None):
    """Root of the derivative of the pnc OPRF MSE in A: the series of :func:`_pnc_small_v_a` where the MSE at
    its A equals the minimum to the working precision, else the secant method from the theorem's A*
    (``excess_bits``: the bits its quadratures choose their first rungs for, :func:`_pnc_rule_at_the_excess_tier`)."""
    n_pnc = _weighted_pairs("pnc_orthogonal", d, m, lambda c: 1 if c == "pnc_orthogonal" else 0)
    tol = mp.mpf(2) ** (-mp.prec // 2)
    if 4 * d * d * square(vv) ** 3 < mp.mpf(2) ** -(min(mp.prec, caller_prec()) + 8):
        # the series' A is off by a relative O(d v^2) (measured 1.4 d v^2), which moves the MSE at that A
        # from the minimum by a relative O(d^2 v^6) (measured <= 1.2 d^2 v^6 for d = 2..256): 8 bits below the
        # caller's precision here, so the value kernel_mse returns is the minimum's
        return _pnc_small_v_a(d, vv, n_pnc)
    # near A = 0 both terms of the derivative are sums that nearly cancel: the variance's
    # -4d/(1-4A) + 4d/(1-8A) is written as 16 A d/((1-4A)(1-8A)), and the pair term's integrand
    # (4s - 4d/(1-4A)) has mean ~ 0 over the pair, so its quadrature gets the bits it loses, about
    # log2(d / v^2)
    extra = _small_arg_bits(vv) + max(0, int(mp.mag(d)))

    def small_route(a):
        return extra > SMALL_ROUTE_BITS and _pnc_small_excess_applies(d, vv, a)

    def variance_part(a):
        """(e^(v^2 + L), R): the variance's part of g is e^(v^2 + L) L' with L' = R, the bracket
        16Ad/((1-4A)(1-8A)) + 8v^2/(1-8A)^2 (L = _log_excess_moment)."""
        check_time("OPRF optimal A (pnc_orthogonal)")
        ratio = 16 * a * d / ((1 - 4 * a) * (1 - 8 * a)) + 8 * square(vv) / (1 - 8 * a) ** 2
        return mp.exp(square(vv) + _log_excess_moment(d, vv, a)), ratio

    def g(a):
        var, ratio = variance_part(a)
        if small_route(a):
            pair = _pnc_excess_small_derivative(d, vv, a, excess_bits)
        else:
            with mp.workprec(mp.prec + extra):
                pair = _pnc_pair_term_derivative(d, vv, a, cancel=extra, start=excess_bits)
        return var * ratio + n_pnc * pair

    def g_and_slope(a):
        """(g(a), a function returning g'(a)) on the large route, the pair term's second A-derivative from the
        first's 0F1 sums; the variance's part's derivative is e^(v^2 + L)(R^2 + R'),
        R' = 16d(1 - 32A^2)/((1-4A)^2(1-8A)^2) + 128v^2/(1-8A)^3."""
        var, ratio = variance_part(a)
        with mp.workprec(mp.prec + extra):
            pair, pair2 = _pnc_pair_term_derivatives(d, vv, a, cancel=extra, start=excess_bits)

        def slope():
            dratio = 16 * d * (1 - 32 * a * a) / ((1 - 4 * a) * (1 - 8 * a)) ** 2 + 128 * square(vv) / (1 - 8 * a) ** 3
            return var * (ratio * ratio + dratio) + n_pnc * pair2()

        return var * ratio + n_pnc * pair, slope

    start = _pnc_float_a(d, vv, n_pnc, a0, curvature=True)
    try:
        # the search stops at a relative step of tol = 2^(-prec/2): g carries 24 bits beyond that (near the root
        # dvar and the pair term cancel), or the steps wander at g's rounding level
        with mp.workprec(max(53, mp.prec // 2) + 24):
            if start is None:
                a, b = a0, a0 * (1 + mp.mpf(1) / 8) - mp.mpf(2) ** -20
                ga = g(a)
            else:  # the model's root, and a Newton step from it with the model's slope: the secant's second point
                a, slope, curv = start
                newton = curv is not None and not small_route(a)
                if newton:
                    ga, exact_slope = g_and_slope(a)
                else:
                    ga = g(a)
                if not ga:
                    return a
                b = a - ga / slope
                if not b < mp.mpf(1) / 8:
                    b = (a + mp.mpf(1) / 8) / 2
                if abs(b - a) <= tol / 16 * (abs(b) + tol):  # (16: room for a model slope off by up to 16x)
                    return +b
                if newton:  # the step with the exact slope (the first quadrature's sums, memoised)
                    slope_a = exact_slope()
                    if slope_a and abs(slope_a / slope - 1) < mp.mpf(1) / 4:
                        b = a - ga / slope_a
                        bound = NEWTON_SAFETY * (mp.mpf(curv) + 1 / (abs(a) + tol)) * (b - a) ** 2
                        if b < mp.mpf(1) / 8 and bound <= tol * (abs(b) + tol):
                            # Newton's error |b - A*| ~ |g''/(2g')| (b - a)^2, the curvature from the model (at least
                            # 1/|A|), NEWTON_SAFETY times: within the tolerance without another quadrature of g
                            return +b
            for _ in range(MAX_SECANT):
                gb = g(b)
                if gb == ga:
                    break
                c = b - gb * (b - a) / (gb - ga)
                if not c < mp.mpf(1) / 8:
                    c = (b + mp.mpf(1) / 8) / 2
                if abs(c - b) <= tol * (abs(c) + tol):  # (the step is checked before g is evaluated at c)
                    return +c
                a, ga, b = b, gb, c
        cause = f"was not located in {MAX_SECANT} secant steps"
    except ConvergenceError as exc:  # the derivative's quadrature: a nearly cancelling integral
        cause = f"was not located by the secant search ({exc})"
    # fallback at small v: a golden-section search on the MSE itself (whose terms are evaluated without
    # cancellation) in a bracket around the series' A, whose relative error is about 1.4 d v^2
    width = 6 * d * square(vv)
    if width < mp.mpf(1) / 2:
        a = _pnc_golden_a(d, vv, n_pnc, _pnc_small_v_a(d, vv, n_pnc), width, tol)
        if a is not None:
            return a
    raise ConvergenceError(f"the optimal OPRF A for pnc_orthogonal at d = {show_int(d)}, v = {mp.nstr(vv, 6)} {cause}; "
                           f"pass A= explicitly")


def _pnc_float_a(d, vv, n_pnc, a0, curvature=False):
    r"""A start for the secant of :func:`_pnc_optimal_a`: the root of the derivative of the MSE in double precision
    on theory.pnc's float64 model of the pair's law (:func:`theory.pnc._float_rule`), by the secant method from the theorem's
    A* (``a0``), with the model's derivative of g there (a central difference), as (root, slope); None where
    it does not settle (then the secant starts at a0).  Only a starting point: the secant at the working
    precision checks every digit that is returned; its second point is a Newton step from the root with the
    model's slope, so that it takes 2-3 evaluations of the derivative's quadrature from it (4 from the root and
    a point next to it, 8-11 from a0).  ``curvature``: also the model's :math:`|g''/(2g')|` at the root (a second
    difference; None where not finite), for the bound on a Newton step's error (:func:`_pnc_optimal_a`)."""
    import numpy as np
    from scipy import special

    from .pnc import _float_rule

    W, x1, x2 = _float_rule(d)
    s = x1 + x2
    v2, h, fd = float(vv) ** 2, d / 2, float(d)

    def gf(a):
        try:
            return _gf(a)
        except (ArithmeticError, ValueError):  # overflow at huge v: no start from the model
            return None

    def _gf(a):
        if not a < 0.125:
            return None
        dvar = math.exp(v2 + fd / 2 * math.log1p(16 * a * a / (1 - 8 * a)) + v2 / (1 - 8 * a)) * (
            16 * a * fd / ((1 - 4 * a) * (1 - 8 * a)) + 8 * v2 / (1 - 8 * a) ** 2)
        t = (1 - 4 * a) * v2 / 2
        z = t * s
        f1 = special.hyp0f1(h + 1, z) / h
        # the pair term's integrand base (4s - c0) f0 - 2 v^2 s base f1 with its mean-zero linear part (4s - c0)
        # taken out exactly: E[4s] = 4d, so E[4s - c0] = 4d - c0 = -16 a d / (1 - 4a); the rest from
        # base f0 - 1 = expm1(log base) f0 + (f0 - 1), f0 - 1 by its series to the z^5 term below z = 0.01 (the
        # rest below 1e-15 of it), hyp0f1 - 1 above (at most 1e-14 lost); at v = 1e-4 the sum had cancelled to 5e-8
        # of its terms, and the model's root was that far off
        f0m1 = np.where(z < 0.01, z / h * (1 + z / (2 * (h + 1)) * (1 + z / (3 * (h + 2)) * (
            1 + z / (4 * (h + 3)) * (1 + z / (5 * (h + 4)))))), special.hyp0f1(h, z) - 1)
        log_base = fd * math.log1p(-4 * a) + 4 * a * s
        base = np.exp(log_base)
        c0 = 4 * fd / (1 - 4 * a)
        # base f0 - 1: near base = 1 from expm1 (no cancellation at small A and v); elsewhere directly (from
        # expm1 it would cancel where base is small and f0 large: large v, A ~ -1)
        rest = np.where(np.abs(log_base) < 0.5, np.expm1(log_base) * (1 + f0m1) + f0m1, base * (1 + f0m1) - 1)
        pair = -16 * a * fd / (1 - 4 * a) + float(np.sum(W * ((4 * s - c0) * rest - 2 * v2 * s * base * f1)))
        return dvar + float(n_pnc) * pair

    with np.errstate(all="ignore"):
        a, b = float(a0), float(a0) * 1.125 - 2.0 ** -20
        ga, gb = gf(a), gf(b)
        for _ in range(60):
            if ga is None or gb is None or not (math.isfinite(ga) and math.isfinite(gb)) or gb == ga:
                return None
            c = b - gb * (b - a) / (gb - ga)
            a, ga, b, gb = b, gb, c, gf(c)
            if abs(b - a) <= 2.0 ** -40 * abs(b):
                if gb is None or not (math.isfinite(b) and b < 0.125):
                    return None
                step = 2.0 ** -14 * abs(b)  # (not h: gf's 0F1 parameter, which it reads from this scope)
                lo, hi = gf(b - step), gf(b + step)
                slope = (hi - lo) / (2 * step) if lo is not None and hi is not None else math.nan
                if not (math.isfinite(slope) and slope):
                    return None
                if not curvature:
                    return mp.mpf(b), mp.mpf(slope)
                curv = abs((hi - 2 * gb + lo) / (step * step) / (2 * slope))
                return mp.mpf(b), mp.mpf(slope), (curv if math.isfinite(curv) else None)
    return None


def _pnc_golden_a(d, vv, n_pnc, a_s, width, tol):
    """Minimiser of Var + n * (pnc pair excess) over A in a_s (1 +- width) by golden sections, to a relative
    ``tol`` (None if the minimum is at an end of the bracket: the bracket missed it)."""
    def f(a):
        check_time("OPRF optimal A (pnc_orthogonal)")
        return _variance(d, vv, a) + n_pnc * _pair_excess("pnc_orthogonal", d, vv, a)

    lo, hi = a_s * (1 + width), a_s * (1 - width)  # a_s < 0: lo < hi
    r = (mp.sqrt(5) - 1) / 2
    x1, x2 = hi - r * (hi - lo), lo + r * (hi - lo)
    f1, f2 = f(x1), f(x2)
    ends = (lo, hi)
    while hi - lo > tol * abs(a_s):
        if f1 <= f2:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - r * (hi - lo)
            f1 = f(x1)
        else:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + r * (hi - lo)
            f2 = f(x2)
    a = (lo + hi) / 2
    if min(abs(a - e) for e in ends) <= 2 * tol * abs(a_s):
        return None
    return a


register("oprf", "variance", _variance)
register("oprf", "mean_square", lambda d, vv, A: mp.exp(square(vv)))
register("oprf", "pair_excess", _pair_excess)
register("oprf", "pair_couplings", _pair_couplings)
register("oprf", "small_v", _small_v)
register("oprf", "parameters", _parameters)



def certified_mse(coupling, d, v, A, *, x_norm, y_norm, m=None, kernel="gaussian", prec=128):
    r"""A ball (python-flint arb) that contains the OPRF MSE of a theorem coupling (iid, orthogonal, simplex).

    The pair term is the certified PRF conformity (:func:`theory.certified.conformity`, the theorem) and
    :math:`\mathbb E[b^2]` is evaluated in ball arithmetic from the exact inputs (decimal strings are
    enclosed exactly).  ``prec`` bits; the ball is valid at any precision, and narrow unless v is tiny
    (the difference :math:`\mathbb E[b^2] - e^{v^2}` is formed in ball arithmetic).

    Raises
    ------
    ImportError
        Without python-flint.
    MissingHookError
        For a coupling outside :func:`theorem_couplings`.
    """
    from . import certified
    from .kernels import coupled_pairs, check_kernel

    certified._require()
    from flint import arb

    if coupling not in theorem_couplings():
        raise MissingHookError(f"coupling must be one of {', '.join(map(repr, theorem_couplings()))} for a "
                               f"certified OPRF MSE (the theorem's couplings), got {coupling!r}")
    d = check_dimension(d, coupling)
    m = d if m is None else m
    check_kernel(kernel)
    c = 2 if kernel == "gaussian" else 1
    rho = certified.conformity(coupling, d, v, prec, 0)
    with certified._Prec(prec):
        vv, a = certified._to_arb(v, "v"), _arb_real(A)
        xn, yn = certified._to_arb(x_norm, "x_norm"), certified._to_arb(y_norm, "y_norm")
        one = arb(1)
        if not a < one / 8:
            raise ValueError(f"A must be < 1/8, got {A!r}")
        v2 = vv * vv
        # E[b^2] - e^{v^2} = e^{v^2} expm1(X) with X as in _log_excess_moment (a sum of two terms >= 0): the ball
        # stays narrow at small A (forming E[b^2] - e^{v^2} gave a width 2^-prec around a variance of 8 d A^2)
        x = arb(d) / 2 * (16 * a * a / (one - 8 * a)).log1p() + v2 / (one - 8 * a)
        var = v2.exp() * x.expm1()
        inner = var + arb(coupled_pairs(d, m)) / m * (rho - v2.exp())
        return (-c * (xn * xn + yn * yn)).exp() * inner / m


def _arb_real(value):
    from fractions import Fraction

    from flint import arb

    if isinstance(value, str):
        return arb(value.strip())
    if isinstance(value, Fraction):
        return arb(value.numerator) / value.denominator
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return arb(value)
    raise ArgumentTypeError(f"A must be a decimal string, int, float or Fraction here, got {describe(value)}")
