r"""Certified mode: rigorous enclosures with arb ball arithmetic (python-flint).

What is enclosed, how inequalities are decided, width and failure, threads: :ref:`guide-theory.certified`
(``docs/guide/theory_design.rst``).
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

try:  # optional dependency
    import flint
    from flint import arb
except ImportError:  # pragma: no cover - exercised when python-flint is absent
    flint = None
    arb = None

from ._checks import check_coupling, check_cos_theta, check_dimension, check_int, check_nonnegative, refuse_masked
from ._context import LOCK, check_time, entered, mp
from .errors import CertificationError, ConvergenceError
from .registry import get as get_coupling, hook, register
from .validation import ArgumentTypeError, describe as _describe, show, show_int

MAX_TERMS = 100_000

#: Largest ``|cos theta| x`` of the certified Taylor route (about 2.8 x that many terms).
TAYLOR_MAX = 2000


def available():
    """True when python-flint (arb) is importable."""
    return flint is not None


def _require():
    if flint is None:
        raise ImportError("theory.certified needs python-flint (arb ball arithmetic): pip install python-flint")


class _Prec:
    """Set flint's working precision (bits) for a block and restore it, under the theory lock."""

    def __init__(self, bits):
        self.bits = bits

    def __enter__(self):
        LOCK.acquire()
        self.old = flint.ctx.prec
        flint.ctx.prec = self.bits

    def __exit__(self, *exc):
        flint.ctx.prec = self.old
        LOCK.release()


def _entry(func):
    """Public entry: the theory lock, a work budget, and the private mpmath context for conversions."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        _require()
        with entered() as bits:
            if bits is not None:
                mp.prec = bits + 24
            return func(*args, **kwargs)

    return wrapper


def _digits_of(ball):
    """Correct significant digits of a ball (0 when it contains 0 or is not finite)."""
    if not ball.is_finite():
        return 0
    mid = abs(ball.mid())
    rad = ball.rad()
    if mid == 0 or rad >= mid:
        return 0
    if rad == 0:
        return 10 ** 9
    return float((mid / rad).log()) / 2.302585092994046


def _tight(compute, prec, min_digits, max_prec, what):
    """compute(bits) at bits = prec, 2 prec, ... until its ball has min_digits correct digits."""
    prec = check_int(prec, "prec", 16)
    if min_digits is None:
        min_digits = 1
    if not isinstance(min_digits, numbers.Real) or isinstance(min_digits, bool):
        raise ArgumentTypeError(f"min_digits must be a finite real number >= 0, got {_describe(min_digits)}")
    if not ((isinstance(min_digits, numbers.Integral) or math.isfinite(min_digits)) and min_digits >= 0):
        raise ValueError(f"min_digits must be a finite real number >= 0, got {_describe(min_digits)}")
    shown = show_int(min_digits) if isinstance(min_digits, numbers.Integral) else min_digits
    max_prec = 16 * prec if max_prec is None else check_int(max_prec, "max_prec", prec)
    bits = prec
    while True:
        check_time(what)
        with _Prec(bits):
            ball = compute(bits)
            if min_digits == 0 or _digits_of(ball) >= min_digits:
                return ball
            width = ball.rad().str(3, radius=False) if ball.is_finite() else "inf"
        if bits >= max_prec:
            raise CertificationError(
                f"{what}: the enclosure at {bits} bits is valid but too wide (radius {width}, fewer than "
                f"{shown} correct digits); raise max_prec (now {max_prec}) or pass min_digits=0 to accept it")
        bits = min(2 * bits, max_prec)


def _exact_decimal(text):
    """The exact value of a string that arb read (a Fraction for "p/q", else a Decimal), or None."""
    try:
        return Fraction(text) if "/" in text else Decimal(text)
    except (ValueError, ArithmeticError):
        return None


def _to_arb(value, name, nonnegative=True):
    """Enclosure of the exact value of a real input (decimal str, int, Fraction, float, numpy real, mpf).

    The domain (>= 0, or [-1, 1] for a cos_theta) is checked on the exact
    value: the mpf of :func:`theory._checks.to_mpf` is exact for ints, floats
    (numpy's longer floats too) and mpfs, and the exact Decimal or Fraction
    decides for a string or a fraction, which to_mpf rounds (so that
    ``cos_theta="1.0000000000000000000000000000000000000001"`` is refused).
    """
    x = check_nonnegative(value, name) if nonnegative else check_cos_theta(value, name)
    if isinstance(value, str):
        text = value.strip()
        try:
            ball = arb(text)
        except (ValueError, TypeError, UnicodeError) as exc:
            raise ValueError(f"{name} must be a decimal string that arb reads exactly (such as '0.1', '1e-5' or "
                             f"'1/3'), got {_describe(value)}") from exc
        exact = _exact_decimal(text)
    elif isinstance(value, numbers.Rational):  # int, numpy integer, Fraction
        exact = Fraction(int(value.numerator), int(value.denominator))
        ball = arb(exact.numerator) if exact.denominator == 1 else arb(exact.numerator) / exact.denominator
    else:  # float, numpy float, mpf: x is the exact binary value, via mantissa and exponent
        exact = None
        man, exp = x.man_exp
        ball = arb(int(man)) * arb(2) ** int(exp)
    if exact is not None:
        if nonnegative and exact < 0:
            raise ValueError(f"{name} must be >= 0, got {_describe(value)}")
        if not nonnegative and not -1 <= exact <= 1:
            raise ValueError(f"{name} must lie in [-1, 1], got {_describe(value)}")
    return ball


def _hyp1f1(x, a, b):
    """Enclosure of 1F1(a; b; x) for a > b > 0: arb's rigorous 1F1, or, where it
    gives up (nan, e.g. a = 4096, x = 200), the power series with the remainder
    bound |t_K| q/(1 - q), q = |x|(a+K)/((b+K)(K+1)) (non-increasing), added as
    a ball, at extra precision for x < 0 (alternating terms)."""
    a, b = arb(a), arb(b)
    r = x.hypgeom_1f1(a, b)
    if r.is_finite():
        return r
    prec = flint.ctx.prec
    extra = 16 + (int((abs(x) * 3).upper().floor().unique_fmpz()) if x < 0 else 0)
    with _Prec(prec + extra):
        total = arb(0)
        term = arb(1)
        what = f"certified 1F1 series at a = {a.mid().str(8, radius=False)}, b = {b.mid().str(8, radius=False)}"
        for k in range(MAX_TERMS):
            if k % 64 == 0:
                check_time(what, units=32)  # 64 ball terms
            total += term
            q = abs(x) * (a + k + 1) / ((b + k + 1) * (k + 2))
            nxt = term * x * (a + k) / ((b + k) * (k + 1))
            if q < 1 and k > 2:
                bound = abs(nxt) / (1 - q)
                if bound.upper() < total.mid().abs_lower() * arb(2) ** (-prec - 8):
                    total += arb(0, bound.upper())
                    break
            term = nxt
        else:
            raise ConvergenceError("1F1 series did not converge")
    return +total


def _sin_moment_first(d):
    h = arb(d) / 2
    half = arb(1) / 2
    return (h + half).gamma() ** 2 / (h.gamma() * (h + 1).gamma())


def _taylor_ball(d, x, c, even_only=False):
    """Sum of the Taylor expansion in c of E_phi[M(d, d/2, x(1 + c sin phi))] with a
    rigorous remainder ball.  The remainder is the term-ratio bound on the majorant
    (|c||x|)^p/p! (d)_p/(d/2)_p R_p |M(d+p, d/2+p, .)|, with M(d+p, d/2+p, |x|) for x >= 0
    and for x < 0 (RFF, even terms only) 1, or e^{x/2} for even d (the Bessel and Szego bounds in
    theory.conformities._rff_even_taylor)."""
    h = arb(d) / 2
    ax = abs(x)
    if c == 0 or x == 0:
        return _hyp1f1(x, d, h)
    size = (abs(c) * ax).upper()  # an arb: v^2/2 overflows a float beyond v ~ 1e154
    if size > TAYLOR_MAX:
        raise ConvergenceError(
            f"certified Taylor series: |cos theta| x = {size.str(5, radius=False)} needs about 2.8 times as many "
            f"terms that cancel (domain |cos theta| v^2/2 <= {TAYLOR_MAX}); use a smaller v (or z)")
    r1 = _sin_moment_first(d)
    # x < 0: |M(d+p, d/2+p, x)| <= 1, and <= e^{x/2} for even d (Szego's Laguerre bound; the proofs
    # are in theory.conformities._rff_even_taylor)
    neg_bound = (arb(x) / 2).exp() if (x < 0 and d % 2 == 0) else arb(1)
    total = arb(0)
    coef = arb(1)  # (c x)^p/p! (d)_p/(d/2)_p
    coef_abs = arb(1)  # (|c| |x|)^p/p! (d)_p/(d/2)_p
    r_prev, r_cur = arb(1), r1  # R_p, R_{p+1}
    cabs = abs(c)
    what = f"certified Taylor series at d = {show_int(d)}"
    for p in range(MAX_TERMS):
        if p % 16 == 0:
            check_time(what, units=16)  # 16 ball terms
        if not (even_only and p % 2):
            total += coef * _hyp1f1(x, d + p, h + p) * r_prev
        q = cabs * ax / (p + 1) * (arb(d + p) / (h + p))
        if q < 1 and p >= 2:
            # |M^{(p)}| <= M^{(p)}(|x|) for x >= 0; for x < 0 (RFF) <= M^{(p)}(0) = (d)_p/(d/2)_p, which
            # coef_abs already holds (theory.conformities._rff_even_taylor has the proof)
            t_major = coef_abs * (_hyp1f1(ax, d + p, h + p) if x >= 0 else neg_bound) * r_prev
            bound = t_major * q / (1 - q)
            if bound.upper() < total.mid().abs_lower() * arb(2) ** (-flint.ctx.prec) or bound.upper() < arb(2) ** (
                    -2 * flint.ctx.prec):
                return total + arb(0, bound.upper())
        coef = coef * c * x / (p + 1) * (arb(d + p) / (h + p))
        coef_abs = coef_abs * cabs * ax / (p + 1) * (arb(d + p) / (h + p))
        r_prev, r_cur = r_cur, r_prev * arb(d + p) / arb(d + p + 1)
    raise ConvergenceError("certified Taylor series did not converge; reduce v (or z)")


def _cos(coupling, d):
    c = get_coupling(coupling).cos_theta(d)
    return arb(c.numerator) / c.denominator


def _documented(summary, args):
    """numpydoc docstring of a certified function: summary, Parameters (with the shared
    precision arguments), Returns and Raises."""
    shared = """    prec : int >= 16, default 128
        Starting working precision in bits.
    min_digits : real >= 0, default 1
        Correct significant digits the ball must carry: the precision is
        doubled until it does, up to ``max_prec``, then
        :class:`~theory.errors.CertificationError`.  0 accepts any valid ball.
    max_prec : int, optional
        Largest precision tried (default 16 * prec).
"""
    return (f"{summary}\n\n    Parameters\n    ----------\n{args}{shared}\n    Returns\n    -------\n"
            "    flint.arb\n        A ball that contains the exact value.\n\n    Raises\n    ------\n"
            "    theory.errors.CertificationError\n        The ball stays wider than ``min_digits`` allow.\n"
            "    theory.errors.ConvergenceError\n        A series exceeds its term or work budget.\n    ")


@_entry
def conformity(coupling, d, v, prec=128, min_digits=1, max_prec=None):
    coupling = check_coupling(coupling, has="certified_prf_conformity")
    d = check_dimension(d, coupling)
    func = hook(coupling, "certified_prf_conformity")
    return _tight(lambda bits: func(d, _to_arb(v, "v")), prec, min_digits, max_prec,
                  f"certified.conformity({coupling!r}, {show_int(d)}, {show(v)})")


register("iid", "certified_prf_conformity", lambda d, vv: (vv * vv).exp())
register("orthogonal", "certified_prf_conformity", lambda d, vv: _hyp1f1(vv * vv / 2, d, arb(d) / 2))
register("simplex", "certified_prf_conformity", lambda d, vv: _taylor_ball(d, vv * vv / 2, _cos("simplex", d)))


@_entry
def conformity_at_angle(d, v, cos_theta, prec=128, min_digits=1, max_prec=None):
    d = check_dimension(d)

    def compute(bits):
        vv = _to_arb(v, "v")
        c = _to_arb(cos_theta, "cos_theta", nonnegative=False)
        return _taylor_ball(d, vv * vv / 2, c)

    return _tight(compute, prec, min_digits, max_prec,
                  f"certified.conformity_at_angle({show_int(d)}, {show(v)}, {show(cos_theta)})")


@_entry
def rff_conformity(coupling, d, z, prec=128, min_digits=1, max_prec=None):
    coupling = check_coupling(coupling, has="certified_rff_conformity")
    d = check_dimension(d, coupling)
    func = hook(coupling, "certified_rff_conformity")
    return _tight(lambda bits: func(d, _to_arb(z, "z")), prec, min_digits, max_prec,
                  f"certified.rff_conformity({coupling!r}, {show_int(d)}, {show(z)})")


register("iid", "certified_rff_conformity", lambda d, zz: (-zz * zz).exp())
register("orthogonal", "certified_rff_conformity", lambda d, zz: _hyp1f1(-zz * zz / 2, d, arb(d) / 2))
register("simplex", "certified_rff_conformity",
         lambda d, zz: _taylor_ball(d, -zz * zz / 2, _cos("simplex", d), even_only=True))


@_entry
def orthogonality_gap_bracket(d, v, prec=128, min_digits=1, max_prec=None):
    d = check_dimension(d)
    return _tight(lambda bits: conformity("iid", d, v, bits, 0) - conformity("orthogonal", d, v, bits, 0),
                  prec, min_digits, max_prec, f"certified.orthogonality_gap_bracket({show_int(d)}, {show(v)})")


@_entry
def rff_gap_bracket(d, z, prec=128, min_digits=1, max_prec=None):
    d = check_dimension(d)
    return _tight(lambda bits: rff_conformity("iid", d, z, bits, 0) - rff_conformity("orthogonal", d, z, bits, 0),
                  prec, min_digits, max_prec, f"certified.rff_gap_bracket({show_int(d)}, {show(z)})")


_V = ("    v : real >= 0\n        :math:`v = \\|x + y\\|`, enclosed exactly (a decimal string or Fraction exactly, a "
      "float, numpy float or mpf as its binary value).\n")
_Z = "    z : real >= 0\n        :math:`z = \\|x - y\\|`, enclosed exactly.\n"
_C = "    coupling : str\n        A coupling with a certified closed form.\n"
_D = "    d : int\n        Data dimensionality.\n"
conformity.__doc__ = _documented(
    "Rigorous enclosure of the PRF conformity of a named coupling (registry hook ``certified_prf_conformity``).",
    _C + _D + _V)
conformity_at_angle.__doc__ = _documented(
    "Rigorous enclosure of :math:`\\rho_\\theta` (eq. ``theta_conformity``) for an exact cos(theta).",
    _D + _V + "    cos_theta : real in [-1, 1]\n        Enclosed exactly (str, int, Fraction, float or mpf); "
    "the range is checked on the exact value.\n")
rff_conformity.__doc__ = _documented(
    "Rigorous enclosure of :math:`\\mathbb E[\\cos(w_i^\\top z)\\cos(w_j^\\top z)]` "
    "(registry hook ``certified_rff_conformity``).", _C + _D + _Z)
orthogonality_gap_bracket.__doc__ = _documented(
    "Enclosure of :math:`e^{v^2} - \\rho_{\\mathrm{ORF}}` (the PRF gap over :math:`e^{-2x^2-2y^2}P/m^2`, Cor 4.4).",
    _D + _V)
rff_gap_bracket.__doc__ = _documented(
    "Enclosure of :math:`e^{-z^2} - \\rho^{\\mathrm{RFF}}_{\\mathrm{ORF}}` (the RFF gap over :math:`P/m^2`, "
    "Thm 4.5); its sign is the gap's.", _D + _Z)


@dataclass(frozen=True)
class Certificate:
    """Outcome of a rigorous comparison at one grid point.

    ``certified`` is True when the statement is proved, False when its
    negation is proved, None when undecided at the largest precision tried.
    """

    d: int
    x: str
    certified: object
    prec: int
    margins: tuple

    def __repr__(self):  # (the dataclass's own would fail on a d beyond Python's int -> str limit)
        return (f"Certificate(d={show_int(self.d)}, x={self.x!r}, certified={self.certified!r}, prec={self.prec!r}, "
                f"margins={self.margins!r})")


def _decide(lhs_rhs_pairs):
    """All lhs < rhs proved -> True; any lhs > rhs proved -> False; else None."""
    verdicts = []
    for lo, hi in lhs_rhs_pairs:
        if lo < hi:
            verdicts.append(True)
        elif lo > hi:
            verdicts.append(False)
        else:
            verdicts.append(None)
    if all(v is True for v in verdicts):
        return True
    if any(v is False for v in verdicts):
        return False
    return None


def _grid(values, name):
    """``values`` as a list: a non-empty sequence or 1-D array (a string, a masked array and a scalar refused)."""
    refuse_masked(values, name)
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__") or getattr(values, "ndim", 1) != 1:
        raise ArgumentTypeError(f"{name} must be a sequence or 1-D array of values, got {_describe(values)}")
    out = list(values)
    if not out:
        raise ValueError(f"{name} must hold at least one value, got an empty {type(values).__name__}")
    return out


def _precisions(prec, max_prec):
    prec = check_int(prec, "prec", 16)
    return prec, check_int(max_prec, "max_prec", prec)


@_entry
def certify_ordering(ds, vs, prec=128, max_prec=2048):
    """Certify rho_SimRF < rho_ORF < rho_IID at every (d, v), v > 0.

    Returns a list of :class:`Certificate` (margins: the enclosures of
    rho_ORF - rho_SimRF and rho_IID - rho_ORF).  Precision doubles from ``prec``
    (int >= 16) up to ``max_prec`` (int >= prec) while undecided.  ``ds`` and
    ``vs`` are non-empty sequences or 1-D arrays (a string or a masked array is
    refused, not iterated); each v is enclosed exactly as in :func:`conformity`.
    """
    ds, vs = _grid(ds, "ds"), _grid(vs, "vs")
    prec, max_prec = _precisions(prec, max_prec)
    out = []
    for d in ds:
        for v in vs:
            bits = prec
            while True:
                check_time(f"certify_ordering at d = {show_int(d)}, v = {show(v)} ({bits} bits)")
                s, o, i = (conformity(c, d, v, bits, 0) for c in ("simplex", "orthogonal", "iid"))
                verdict = _decide([(s, o), (o, i)])
                if verdict is not None or bits >= max_prec:
                    break
                bits = min(2 * bits, max_prec)
            with _Prec(bits):
                out.append(Certificate(d, str(v), verdict, bits, (o - s, i - o)))
    return out


@_entry
def certify_rff_sign(ds, zs, coupling="simplex", baseline="orthogonal", prec=128, max_prec=2048):
    """Rigorous sign of rho^RFF_coupling - rho^RFF_baseline (the sign of the RFF MSE
    difference, Thm 3.2's analogue) at every (d, z): ``certified`` True means
    the coupling's MSE is proved smaller, False proved larger.  ``ds`` and ``zs``
    and the precisions as in :func:`certify_ordering`."""
    ds, zs = _grid(ds, "ds"), _grid(zs, "zs")
    prec, max_prec = _precisions(prec, max_prec)
    out = []
    for d in ds:
        for z in zs:
            bits = prec
            while True:
                check_time(f"certify_rff_sign at d = {show_int(d)}, z = {show(z)} ({bits} bits)")
                a = rff_conformity(coupling, d, z, bits, 0)
                b = rff_conformity(baseline, d, z, bits, 0)
                verdict = _decide([(a, b)])
                if verdict is not None or bits >= max_prec:
                    break
                bits = min(2 * bits, max_prec)
            with _Prec(bits):
                out.append(Certificate(d, str(z), verdict, bits, (b - a,)))
    return out
