"""Argument validation and precision handling shared by the ``theory`` modules.

Every public function of :mod:`theory` validates its arguments at the boundary
(raising :class:`ValueError` that names the argument and the allowed values)
and computes at the caller's mpmath working precision plus guard bits, rounding
the result back to the caller's precision on exit.  The global precision is
never changed: :func:`mpmath.workprec` restores it even when an exception is
raised.
"""

from __future__ import annotations

import functools
import numbers

from mpmath import mp

#: Names of the couplings understood by the closed forms (one spelling each,
#: as everywhere in the project).
PRF_COUPLINGS = ("iid", "orthogonal", "simplex")
RFF_COUPLINGS = ("iid", "orthogonal", "simplex")

#: Guard bits added to the caller's precision by every public function.
GUARD_BITS = 24


def _describe(value):
    return f"{value!r} ({type(value).__name__})"


def check_coupling(coupling, allowed=PRF_COUPLINGS, name="coupling"):
    """Return ``coupling`` if it is one of ``allowed``, else raise ValueError."""
    if not isinstance(coupling, str) or coupling not in allowed:
        choices = ", ".join(repr(c) for c in allowed)
        raise ValueError(f"{name} must be one of {choices}, got {_describe(coupling)}")
    return coupling


def check_int(value, name, minimum, context=""):
    """Return ``value`` as a Python int if it is an integer >= ``minimum``.

    Booleans and floats (even integral ones such as ``64.0``) are rejected:
    a dimension or a feature count is an integer, and silently truncating a
    float would answer a different question.
    """
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if not ok or int(value) < minimum:
        suffix = f" {context}" if context else ""
        raise ValueError(f"{name} must be an integer >= {minimum}{suffix}, got {_describe(value)}")
    return int(value)


def check_dimension(d, coupling=None, name="d"):
    """Validate the data dimensionality: >= 2 for the simplex coupling, else >= 1."""
    if coupling == "simplex":
        return check_int(d, name, 2, "for the simplex coupling")
    return check_int(d, name, 1)


def to_mpf(value, name):
    """Convert an int, float, str, mpf or numpy real to an mpf at the current precision."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str, mp.mpf)):
        raise ValueError(
            f"{name} must be a real number (int, float, str or mpmath.mpf), got {_describe(value)}"
        )
    try:
        x = mp.mpf(value) if not isinstance(value, numbers.Integral) else mp.mpf(int(value))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{name} must be a real number, got {_describe(value)}") from exc
    if not mp.isfinite(x):
        raise ValueError(f"{name} must be finite, got {_describe(value)}")
    return x


def check_nonnegative(value, name):
    """Convert ``value`` to mpf and require it to be finite and >= 0."""
    x = to_mpf(value, name)
    if x < 0:
        raise ValueError(f"{name} must be >= 0, got {_describe(value)}")
    return x


def check_cos_theta(value, name="cos_theta"):
    """Convert ``value`` to mpf and require -1 <= cos_theta <= 1."""
    x = to_mpf(value, name)
    if not -1 <= x <= 1:
        raise ValueError(f"{name} must lie in [-1, 1], got {_describe(value)}")
    return x


def check_norms_and_v(x_norm, y_norm, v):
    """Validate ||x||, ||y|| and v = ||x + y|| together (triangle inequality).

    A v outside [| ||x|| - ||y|| |, ||x|| + ||y||] describes no pair of vectors,
    so it is rejected rather than silently used (it usually means z = ||x - y||
    was passed for v).  A relative slack of 1e-9 admits inputs rounded in
    double precision.
    """
    xn = check_nonnegative(x_norm, "x_norm")
    yn = check_nonnegative(y_norm, "y_norm")
    vv = check_nonnegative(v, "v")
    slack = mp.mpf("1e-9") * (xn + yn) + mp.mpf(2) ** (-mp.prec)
    if vv > xn + yn + slack or vv < abs(xn - yn) - slack:
        raise ValueError(
            "v = ||x + y|| must lie in [|x_norm - y_norm|, x_norm + y_norm] "
            f"= [{mp.nstr(abs(xn - yn), 8)}, {mp.nstr(xn + yn, 8)}], got {_describe(v)}"
        )
    return xn, yn, vv


def round_result(value):
    """Round an mpf (or a tuple/list/dict of them) to the current precision."""
    if isinstance(value, (mp.mpf, mp.mpc)):
        return +value
    if isinstance(value, tuple):
        return tuple(round_result(v) for v in value)
    if isinstance(value, list):
        return [round_result(v) for v in value]
    if isinstance(value, dict):
        return {k: round_result(v) for k, v in value.items()}
    if isinstance(value, mp.matrix):
        out = mp.matrix(value.rows, value.cols)
        for i in range(value.rows):
            for j in range(value.cols):
                out[i, j] = +value[i, j]
        return out
    return value


def guarded(extra_bits=GUARD_BITS):
    """Decorator: evaluate at caller precision + ``extra_bits``; round on return.

    Arguments are validated inside the guarded context, so string inputs such
    as ``"0.1"`` are converted with the guard bits too.
    """

    def decorate(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with mp.workprec(mp.prec + extra_bits):
                result = func(*args, **kwargs)
            return round_result(result)

        return wrapper

    return decorate
