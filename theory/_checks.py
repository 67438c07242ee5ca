"""Precision handling and mpmath-specific checks shared by the ``theory`` modules.

Argument checks common to every package (integers, choices, couplings,
dimensions) live in :mod:`theory.validation` and :mod:`theory.registry`;
this module adds what needs mpmath: conversion of real inputs to mpf at the
working precision, and the :func:`guarded` decorator.  Every public function
of :mod:`theory` validates its arguments at the boundary and computes at the
caller's mpmath working precision plus guard bits, rounding the result back
to the caller's precision on exit.
"""

from __future__ import annotations

import functools
import numbers

from mpmath import mp

from .registry import check_coupling, check_dimension, names
from .validation import ArgumentTypeError, check_int, describe as _describe

#: Couplings with closed forms for the PRF / RFF conformity (read from the registry).
PRF_COUPLINGS = names(has=("prf_conformity",))
RFF_COUPLINGS = names(has=("rff_conformity",))

#: Guard bits added to the caller's precision by every public function.
GUARD_BITS = 24

__all__ = ["GUARD_BITS", "PRF_COUPLINGS", "RFF_COUPLINGS", "check_coupling", "check_dimension", "check_int",
           "guarded", "to_mpf"]


def to_mpf(value, name):
    """Convert an int, float, str, mpf or numpy real to an mpf at the current precision."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str, mp.mpf)):
        raise ArgumentTypeError(
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
