"""Precision handling and mpmath-specific checks shared by the ``theory`` modules.

Argument checks common to every package (integers, choices, couplings,
dimensions) live in :mod:`theory.validation` and :mod:`theory.registry`;
this module adds what needs mpmath: conversion of real inputs to mpf at the
working precision and the :func:`guarded` decorator that every public
function of :mod:`theory` wears.

:func:`guarded` reads the caller's precision once, computes in the private
context of :mod:`theory._context` at that precision plus guard bits (under
the theory lock, with a work budget), turns mpmath's own failures into
:class:`~theory.errors.ConvergenceError`, maps the function over grids of its
real arguments (lists, tuples, numpy arrays) and returns ``mpmath.mp`` numbers
rounded to the caller's precision.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import numbers

import mpmath
from mpmath.ctx_mp_python import _mpf

from ._context import (
    check_grid_time,
    entered,
    grid_call,
    legacy,
    mp,
    precision,
    round_here,
    to_caller,
    uses_global_mp,
    caller_prec,
)
from .errors import ConvergenceError
from .registry import check_coupling, check_dimension, hook, names
from .validation import ArgumentTypeError, check_int, describe as _describe

#: Couplings with closed forms for the PRF / RFF conformity (read from the registry).
PRF_COUPLINGS = names(has=("prf_conformity",))
RFF_COUPLINGS = names(has=("rff_conformity",))

#: Guard bits added to the caller's precision by every public function.
GUARD_BITS = 24

__all__ = ["GUARD_BITS", "PRF_COUPLINGS", "RFF_COUPLINGS", "call_hook", "check_coupling", "check_dimension",
           "check_int", "guarded", "mp", "rational", "refuse_masked", "to_mpf"]


#: Largest magnitude (log2|x|, bits) up to which a decimal string or fraction gets the extra
#: 2 log2|x| bits (x^2 then known in absolute terms); beyond it (|x| > 2^16384, far outside every closed
#: form's reach) the extra bits stop growing, so that "1e100000000" converts in microseconds.
_EXTRA_MAG = 16384


def _is_masked(value):
    np = _np()
    return np is not None and isinstance(value, np.ma.MaskedArray)


def refuse_masked(value, name):
    """ArgumentTypeError naming ``name`` for a numpy masked array (its masked entries would be used)."""
    if _is_masked(value):
        raise ArgumentTypeError(f"{name} must not be a numpy masked array (its masked entries would still be "
                                "computed with: fill or drop them first, e.g. with .filled() or .compressed())")


def _rounded(convert):
    """``convert()`` at the working precision, with 2 log2|x| more bits when |x| > 1 (at most 2 _EXTRA_MAG)."""
    x = convert()
    if mp.isfinite(x) and x and mp.mag(x) > 0:
        with mp.workprec(mp.prec + 2 * min(int(mp.mag(x)), _EXTRA_MAG) + 8):
            x = convert()
    return x


def rational(q):
    """A rational number (``fractions.Fraction``, int) as an mpf of the private context, correctly rounded at the
    working precision (one rounding, not one for the numerator and one for the division)."""
    return mp.make_mpf(mpmath.libmp.from_rational(int(q.numerator), int(q.denominator), mp.prec,
                                                  mpmath.libmp.round_nearest))


def to_mpf(value, name):
    """Convert an int, float, str, fraction, mpf or numpy real to an mpf of the private context.

    Ints, floats (numpy's longer floats too) and mpfs are converted exactly
    (their binary value); a decimal string or a fraction (any
    ``numbers.Rational``) is rounded at the working precision, with
    :math:`2\\log_2|x|` more bits when :math:`|x| > 1`, so that :math:`x^2`
    (which the closed forms exponentiate) is known to the working precision in
    absolute terms.  Booleans (numpy's too) and arrays are refused.
    """
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str, _mpf)):
        raise ArgumentTypeError(
            f"{name} must be a real number (int, float, str or mpmath.mpf), got {_describe(value)}"
        )
    try:
        if isinstance(value, str):
            x = _rounded(lambda: mp.mpf(value))
        elif isinstance(value, _mpf):
            x = mp.make_mpf(value._mpf_)
        elif isinstance(value, numbers.Integral):
            x = mp.make_mpf(mpmath.libmp.from_int(int(value)))
        elif isinstance(value, numbers.Rational):  # a Fraction: correctly rounded, not through a double
            x = _rounded(lambda: rational(value))
        elif isinstance(value, float) or not hasattr(value, "as_integer_ratio"):
            x = mp.make_mpf(mpmath.libmp.from_float(float(value)))
        else:  # numpy's float128 / longdouble (and float16/32): exact, not rounded to a double
            try:
                p, q = value.as_integer_ratio()
            except (OverflowError, ValueError):  # inf, nan: reported as not finite below
                x = mp.make_mpf(mpmath.libmp.from_float(float(value)))
            else:
                x = mp.make_mpf(mpmath.libmp.from_man_exp(int(p), 1 - int(q).bit_length()))
    except (ValueError, TypeError, OverflowError) as exc:
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


def check_norms_and_v(x_norm, y_norm, v, name="v"):
    """Validate ||x||, ||y|| and v = ||x + y|| (or, ``name="z"``, z = ||x - y||) together (triangle inequality).

    A v outside [| ||x|| - ||y|| |, ||x|| + ||y||] describes no pair of vectors,
    so it is rejected rather than silently used (it usually means z = ||x - y||
    was passed for v).  A relative slack of 1e-9 of ||x|| + ||y|| admits inputs
    rounded in double precision; it is relative only (an absolute slack of
    2^-prec admitted norms of 2.5e-31 with v = 1e-30, twice their sum, at 15
    digits: issue 38), so the check reads the same at every scale and precision.
    """
    xn = check_nonnegative(x_norm, "x_norm")
    yn = check_nonnegative(y_norm, "y_norm")
    vv = check_nonnegative(v, name)
    slack = mp.mpf("1e-9") * (xn + yn)
    if vv > xn + yn + slack or vv < abs(xn - yn) - slack:
        raise ValueError(
            f"{name} = ||x {'-' if name == 'z' else '+'} y|| must lie in [|x_norm - y_norm|, x_norm + y_norm] "
            f"= [{mp.nstr(abs(xn - yn), 8)}, {mp.nstr(xn + yn, 8)}], got {_describe(v)}"
        )
    return xn, yn, vv


def square(x):
    """x**2 exactly (no rounding), for arguments of exponentials and hypergeometric functions."""
    return mp.make_mpf(mpmath.libmp.mpf_mul(x._mpf_, x._mpf_, 0))


def half_square(x):
    """x**2 / 2 exactly (no rounding)."""
    return mp.make_mpf(mpmath.libmp.mpf_shift(mpmath.libmp.mpf_mul(x._mpf_, x._mpf_, 0), -1))


# ---------------------------------------------------------------------------
# the decorator


def _mpmath_failure(exc):
    """mpmath's own non-convergence (hypsum's ValueError, a bare NoConvergence) as ConvergenceError."""
    text = str(exc)
    if isinstance(exc, ConvergenceError):
        return None
    if isinstance(exc, mpmath.libmp.NoConvergence) or (isinstance(exc, ValueError) and "hypsum" in text):
        return ConvergenceError(
            f"mpmath could not reach the requested accuracy ({text.splitlines()[0] if text else type(exc).__name__}); "
            "lower the working precision or use a smaller argument")
    return None


def _call(func, args, kwargs):
    try:
        return func(*args, **kwargs)
    except (ValueError, mpmath.libmp.NoConvergence) as exc:
        conv = _mpmath_failure(exc)
        if conv is not None:
            raise conv from exc
        raise


def _is_grid(value):
    if isinstance(value, (list, tuple)):
        return True
    np = _np()
    return np is not None and isinstance(value, np.ndarray) and value.ndim > 0


def _np():
    try:
        import numpy
    except ImportError:  # pragma: no cover
        return None
    return numpy


def _scalar(value):
    """A 0-d numpy array as its element (scalars stay scalars)."""
    np = _np()
    if np is not None and isinstance(value, np.ndarray) and value.ndim == 0:
        return value[()]
    return value


def _rectangular(value, name):
    """``value`` (a sequence or numpy array) as a numpy array whose elements are scalars.

    ``np.asarray(..., dtype=object)`` turns a ragged sequence such as ``[[1, 2], [3]]`` or
    ``[4, [5, 6]]`` into an array whose elements are lists; they would be mapped as grids of their
    own (a result of nested arrays).  Such an element is refused, naming the argument; a 0-d numpy
    array element is taken as its scalar.
    """
    np = _np()
    message = f"{name} must be a real number or a rectangular sequence/array of them"
    try:
        arr = value if isinstance(value, np.ndarray) else np.asarray(value, dtype=object)
    except ValueError as exc:  # numpy's own refusal of some ragged nestings
        raise ValueError(f"{message}, got {_describe(value)}") from exc
    if arr.dtype == object:
        arr = arr.copy() if arr is value else arr
        for idx in np.ndindex(arr.shape):
            element = arr[idx]
            if _is_grid(element):
                raise ValueError(f"{message}: the element at index {idx} is itself a sequence or array "
                                 f"({_describe(element)}; a ragged nesting), got {_describe(value)}")
            arr[idx] = _scalar(element)
    return arr


def _map_grid(scalar_call, bound, grid_names):
    """Evaluate ``scalar_call`` at every point of the broadcast grid arguments; numpy object array."""
    np = _np()
    if np is None:  # pragma: no cover
        raise ArgumentTypeError("grids of arguments need numpy")
    arrays = {name: _rectangular(bound.arguments[name], name) for name in grid_names}
    try:
        shape = np.broadcast_shapes(*(a.shape for a in arrays.values()))
    except ValueError:
        shapes = ", ".join(f"{k}: {a.shape}" for k, a in arrays.items())
        raise ValueError(f"grid arguments must broadcast to one shape, got {shapes}") from None
    empty = [k for k, a in arrays.items() if a.size == 0]
    if empty:  # (no point would be computed, so no other argument would be checked either: refused, as certified's)
        raise ValueError(f"{empty[0]} must hold at least one value (an empty grid computes nothing, and the other "
                         f"arguments would go unchecked), got {_describe(bound.arguments[empty[0]])}")
    out = np.empty(shape, dtype=object)
    views = {k: np.broadcast_to(a, shape) for k, a in arrays.items()}
    what = f"grid of {out.size} points ({', '.join(f'{k}: {a.shape}' for k, a in arrays.items())})"
    # one precision and (under an explicit theory.budget) one deadline for the whole grid
    with precision(prec=caller_prec()), grid_call():
        for idx in np.ndindex(shape):
            check_grid_time(what)
            args = dict(bound.arguments)
            for k, view in views.items():
                args[k] = view[idx]
            out[idx] = scalar_call(args)
    return out


def guarded(extra_bits=GUARD_BITS, grid=()):
    """Decorator of the public theory functions.

    Parameters
    ----------
    extra_bits : int
        Guard bits added to the caller's precision.
    grid : tuple of str
        Arguments that may be a sequence or numpy array: the function is then
        evaluated at every point of their broadcast shape and returns a numpy
        object array of mpf of that shape (scalars stay scalars).  A ragged
        sequence (``[[1, 2], [3]]``, ``[4, [5, 6]]``) and an empty one are
        refused (ValueError naming the argument: an empty grid would check none
        of the other arguments), and so is a numpy masked array
        (ArgumentTypeError naming the argument): its masked entries would be
        computed with.  Under
        an explicit :func:`theory.budget` the whole grid is one call with one
        deadline; under the default budget each point gets its own (see
        :func:`theory._context.grid_call`).

    Notes
    -----
    The caller's precision is read once at entry (see
    :func:`theory._context.caller_prec`); arguments are validated inside the
    private context, so decimal strings such as ``"0.1"`` are converted with
    the guard bits too.  Nested calls (one theory function calling another)
    compute at the enclosing precision plus ``extra_bits`` and return private
    numbers rounded to the enclosing precision.
    """

    def decorate(func):
        use_global = uses_global_mp(func)
        sig = inspect.signature(func) if grid else None

        def run(args, kwargs):
            with entered() as bits:
                if bits is None:  # nested
                    with mp.workprec(mp.prec + extra_bits), (legacy() if use_global else contextlib.nullcontext()):
                        result = _call(func, args, kwargs)
                    return round_here(result)
                mp.prec = bits + extra_bits
                with legacy() if use_global else contextlib.nullcontext():
                    result = _call(func, args, kwargs)
            return to_caller(result, bits)

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            if grid:
                try:
                    bound = sig.bind(*args, **kwargs)
                except TypeError:
                    return run(args, kwargs)  # let the function report the bad call
                for n in grid:
                    if n in bound.arguments:
                        refuse_masked(bound.arguments[n], n)
                        bound.arguments[n] = _scalar(bound.arguments[n])
                names_ = [n for n in grid if n in bound.arguments and _is_grid(bound.arguments[n])]
                if names_:
                    return _map_grid(lambda a: run(*_split(sig, a)), bound, names_)
                return run(bound.args, bound.kwargs)
            return run(args, kwargs)

        wrapper.grid_arguments = tuple(grid)
        return wrapper

    return decorate


def _split(sig, arguments):
    b = inspect.BoundArguments(sig, dict(arguments))
    return b.args, b.kwargs


def call_hook(coupling, hook_name, *args):
    """Call a registered theory hook inside a theory call, mirroring the precision into the
    global context when the hook was written against ``mpmath.mp`` (see :mod:`theory._context`)."""
    func = hook(coupling, hook_name)
    if uses_global_mp(func):
        with legacy():
            return func(*args)
    return func(*args)
