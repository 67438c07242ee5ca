"""One validation layer for every package of the toolkit.

:mod:`theory`, :mod:`montecarlo` (and its experiments) and the command lines
validate their arguments with these functions, so that one rule has one
wording everywhere.  Each check returns the value in canonical form or raises

* :class:`TypeError` when the value has the wrong type (a string where a
  number is expected, a float where an integer is expected, a truthy object
  where a bool is expected), and
* :class:`ValueError` when the type is right but the value is outside the
  allowed range,

with a message that names the argument and the allowed values, e.g.
``ValueError: d must be an integer >= 2 for the 'simplex' coupling, got 1 (int)``.
Nothing is coerced silently: ``64.0`` is not a dimension, ``"False"`` is not a
flag, a legacy ``numpy.random.RandomState`` is not a generator.

A wrong type raises :class:`ArgumentTypeError`, which is both a
:class:`TypeError` and a :class:`ValueError` (as numpy's ``AxisError`` is both
a ``ValueError`` and an ``IndexError``): code written against either keeps
working.  The coupling lookups raise :class:`~theory.registry.UnknownCouplingError`
and :class:`~theory.registry.MissingHookError`, subclasses of
:class:`ValueError`, from :mod:`theory.registry`.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = [
    "ArgumentTypeError",
    "check_bool",
    "check_choice",
    "check_int",
    "check_positive_float",
    "check_real",
    "check_rng",
    "describe",
    "show",
    "show_int",
]


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type (also a ValueError, for callers that catch that)."""


#: Integers of at most this many bits (78 decimal digits) are shown in full by :func:`show_int`.
SHOW_INT_MAX_BITS = 256


def show_int(n, sig=None):
    """An integer for a message: ``str(n)`` up to ``SHOW_INT_MAX_BITS`` bits (with ``sig``,
    ``f"{n:.{sig}g}"``, e.g. ``1e+12`` for a count), beyond that its size.

    ``2^14286 (an integer of 14287 bits)`` for a power of two, else e.g.
    ``about 1.23457e+4300 (an integer of 14287 bits)``.  Python refuses
    ``str()`` of an integer of more than 4300 digits (``sys.get_int_max_str_digits``),
    and a message with hundreds of digits is unreadable anyway: every message and
    label that shows a user's integer (a dimension d, a count m) formats it here.
    """
    if not _is_int(n):  # (a label formed before its argument is checked: the check names it)
        return show(n)
    n = int(n)
    a = abs(n)
    bits = a.bit_length()
    if bits <= SHOW_INT_MAX_BITS:
        return str(n) if sig is None else f"{n:.{sig}g}"
    sign = "-" if n < 0 else ""
    if a & (a - 1) == 0:
        lead = f"{sign}2^{bits - 1}"
    else:  # the leading digits from log10 (exact enough for 6 digits below 10^(10^9)); never str(a)
        lg = math.log10(a)
        k = math.floor(lg)
        mant = 10.0 ** (lg - k)
        if mant >= 9.999995:
            mant, k = 1.0, k + 1
        lead = f"about {sign}{mant:.5f}e+{k}"
    return f"{lead} (an integer of {bits} bits)"


def show(value):
    """``repr(value)`` for messages and labels, shortened to 80 characters; an integer by :func:`show_int`
    (never an int -> str conversion beyond Python's limit, which would raise in its place)."""
    if _is_int(value) and int(value).bit_length() > SHOW_INT_MAX_BITS:
        text = show_int(value)
    else:
        try:
            text = repr(value)
        except ValueError:  # an int -> str conversion beyond Python's limit inside repr (a Fraction, a list)
            text = (f"{show_int(value.numerator)} / {show_int(value.denominator)}"
                    if isinstance(value, numbers.Rational) else f"<a {type(value).__name__} too large to print>")
    return text if len(text) <= 80 else text[:77] + "..."


def describe(value):
    """``repr(value) (type)`` for error messages (:func:`show`)."""
    return f"{show(value)} ({type(value).__name__})"


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def check_int(value, name, minimum=None, context="", maximum=None):
    """``value`` as a Python int if it is an integer (not bool, not float) in [minimum, maximum].

    A float such as ``64.0`` is refused (TypeError): a dimension or a count is
    an integer, and truncating a float would answer a different question.
    """
    if type(value) is int:  # (the common case, before the message is formed: hot loops call this)
        v = value
    elif _is_int(value):
        v = int(value)
    else:
        raise ArgumentTypeError(f"{_int_what(name, minimum, maximum, context)}, got {describe(value)}")
    if (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
        raise ValueError(f"{_int_what(name, minimum, maximum, context)}, got {describe(value)}")
    return v


def _int_what(name, minimum, maximum, context):
    """The requirement that :func:`check_int` states in its errors."""
    bounds = []
    if minimum is not None:
        bounds.append(f">= {minimum}")
    if maximum is not None:
        bounds.append(f"<= {maximum}")
    suffix = f" {context}" if context else ""
    return f"{name} must be an integer {' and '.join(bounds)}{suffix}".replace("integer  ", "integer ").rstrip()


def check_real(value, name, *, minimum=None, maximum=None, strict_minimum=False, allow_str=False):
    """``value`` as a finite Python float in the given range.

    Accepts Python and numpy reals (not bools); strings only with
    ``allow_str`` (the command lines).  NaN and infinities are refused.
    """
    if isinstance(value, (bool, np.bool_)) or not (
            isinstance(value, numbers.Real) or (allow_str and isinstance(value, str))):
        raise ArgumentTypeError(f"{name} must be a real number, got {describe(value)}")
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{name} must be a real number, got {describe(value)}") from None
    if not math.isfinite(x):
        raise ValueError(f"{name} must be finite, got {describe(value)}")
    low_bad = minimum is not None and (x <= minimum if strict_minimum else x < minimum)
    if low_bad or (maximum is not None and x > maximum):
        parts = []
        if minimum is not None:
            parts.append(f"{'>' if strict_minimum else '>='} {minimum:g}")
        if maximum is not None:
            parts.append(f"<= {maximum:g}")
        raise ValueError(f"{name} must be a finite real {' and '.join(parts)}, got {describe(value)}")
    return x


def check_positive_float(value, name):
    """``value`` as a finite float > 0."""
    return check_real(value, name, minimum=0.0, strict_minimum=True)


def check_bool(value, name):
    """``value`` if it is a bool (Python or numpy); any other truthy object is refused.

    ``causal="False"`` is a non-empty string, hence truthy: accepting it would
    silently answer the opposite question.
    """
    if not isinstance(value, (bool, np.bool_)):
        raise ArgumentTypeError(f"{name} must be True or False, got {describe(value)}")
    return bool(value)


def check_choice(value, name, allowed):
    """``value`` if it is one of the strings ``allowed``."""
    if not isinstance(value, str) or value not in allowed:
        choices = ", ".join(repr(c) for c in allowed)
        kind = ValueError if isinstance(value, str) else ArgumentTypeError
        raise kind(f"{name} must be one of {choices}, got {describe(value)}")
    return value


def check_rng(rng, name="rng", extra_types=()):
    """A seed or generator: None (fresh OS entropy), an int >= 0, a ``numpy.random.Generator``
    or ``numpy.random.SeedSequence``, or an instance of one of ``extra_types``
    (the montecarlo backends add ``torch.Generator`` / cupy generators).

    A legacy ``numpy.random.RandomState`` is refused: it draws a different
    stream than ``default_rng`` would from the same seed.  Returns ``rng``.
    """
    if rng is None or isinstance(rng, (np.random.Generator, np.random.SeedSequence)):
        return rng
    if extra_types and isinstance(rng, tuple(extra_types)):
        return rng
    allowed = "None, an int >= 0, a numpy.random.Generator or numpy.random.SeedSequence"
    if extra_types:
        allowed += " or " + " or ".join(f"{t.__module__}.{t.__qualname__}" for t in extra_types)
    if _is_int(rng):
        if int(rng) < 0:
            raise ValueError(f"{name} must be {allowed}, got {describe(rng)}")
        return int(rng)
    hint = " (legacy RandomState: use numpy.random.default_rng)" if isinstance(rng, np.random.RandomState) else ""
    raise ArgumentTypeError(f"{name} must be {allowed}{hint}, got {describe(rng)}")
