"""Argument validation at the boundary of :mod:`montecarlo`: arrays, kernels and memory budgets.

The scalar checks (integers, reals, flags, choices, seeds) and the coupling
checks are the shared ones of :mod:`theory.validation` and
:mod:`theory.registry`, re-exported here; this module adds what needs an array
backend.  Every public function raises :class:`ValueError` (or
:class:`~theory.validation.ArgumentTypeError`, also a :class:`TypeError`)
naming the argument and the allowed values; nothing is silently coerced (a
float ``64.0`` is not a dimension, a NaN is not data, a masked array does not
hide its masked entries, ``["1", "2"]`` is not a vector of numbers).

Memory: every array whose size an argument sets (a count of draws, of
features, a dimension) is checked by :func:`check_budget` before it is
allocated: at most ``MAX_ELEMENTS`` entries per array, so that a typo
(``m=10**9``) is a one-line :class:`AllocationError` naming the arguments
instead of a swap storm or the kernel's OOM killer.
"""

from __future__ import annotations

import contextlib
import threading
import time

import numpy as np

from theory.registry import RECORDS, check_coupling, check_couplings, check_dimension, names
from theory.validation import (
    ArgumentTypeError,
    check_bool,
    check_choice,
    check_int,
    check_positive_float,
    check_real,
    check_rng,
    describe as _describe,
    show_int,
)
from theory.feature_kinds import KERNELS, check_kernel, check_kind

#: The couplings, one spelling each, in registry order.
COUPLINGS = names()
#: Couplings whose rows are exactly N(0, I_d) (unbiased kernel estimates).
EXACT_COUPLINGS = names(exact=True)
#: Couplings with an HD-product in place of the Haar rotation (App. B.2), blocks of 2^k rows.
FAST_COUPLINGS = tuple(rec.name for rec in RECORDS if rec.block == "pow2")


#: Largest work of one Monte Carlo call, in entries of intermediates processed (n_draws times the entries
#: of one draw): 2^40, roughly an hour of one core.  Raise it for a longer run (read at call time), or bound
#: the time instead with :func:`budget`.
MAX_WORK = 1 << 40

#: Largest number of entries of one array that an argument (a count, a dimension) may size:
#: 2^28 (2 GiB of float64).  Change it for a bigger machine; the checks read it at call time.
MAX_ELEMENTS = 1 << 28

__all__ = ["COUPLINGS", "EXACT_COUPLINGS", "FAST_COUPLINGS", "KERNELS", "MAX_ELEMENTS", "MAX_WORK", "AllocationError",
           "BudgetExceededError", "WorkLimitError", "budget", "check_deadline", "check_work",
           "ArgumentTypeError", "check_bool", "check_budget", "check_choice", "check_coupling", "check_couplings",
           "check_data", "check_dimension", "check_int", "check_kernel", "check_kind", "check_positive_float", "check_progress",
           "check_real", "check_rng", "check_sequence", "check_weights"]


class WorkLimitError(ValueError):
    """A Monte Carlo call whose estimated work exceeds :data:`MAX_WORK` (the message names the arguments)."""


class BudgetExceededError(TimeoutError):
    """A Monte Carlo call ran past the time budget of :func:`budget` (checked between chunks of draws)."""


_DEADLINE = threading.local()


@contextlib.contextmanager
def budget(seconds):
    """Bound the wall time of the Monte Carlo calls in this block (this thread only).

    The estimators check the deadline before each chunk of draws (a chunk is at
    most :data:`~montecarlo.estimators.CHUNK_ELEMENTS` entries, milliseconds) and
    raise :class:`BudgetExceededError` past it.  ``None`` lifts the bound (the
    default: Monte Carlo runs as long as its :data:`MAX_WORK` allows).  Nested
    budgets keep the earlier deadline.
    """
    if seconds is not None:
        seconds = check_positive_float(seconds, "seconds")
    old = getattr(_DEADLINE, "t", None)
    new = None if seconds is None else time.monotonic() + seconds
    _DEADLINE.t = new if old is None else (old if new is None else min(old, new))
    try:
        yield
    finally:
        _DEADLINE.t = old


def check_deadline(what):
    """Raise :class:`BudgetExceededError` if this thread's :func:`budget` has run out."""
    t = getattr(_DEADLINE, "t", None)
    if t is not None and time.monotonic() > t:
        raise BudgetExceededError(f"{what} ran past the montecarlo.budget() time budget; raise the budget or "
                                  "reduce n_draws")


def check_work(work, what, hint):
    """Refuse ``work`` entries of computation above :data:`MAX_WORK` with a :class:`WorkLimitError`."""
    work = int(work)
    if work > MAX_WORK:
        raise WorkLimitError(f"{what} would process {show_int(work, 3)} entries, more than "
                             "montecarlo._checks.MAX_WORK = "
                             f"{MAX_WORK:.3g} (about an hour of one core); {hint}, or raise MAX_WORK for a longer run")
    return work


class AllocationError(ValueError, MemoryError):
    """An argument asks for an array larger than ``MAX_ELEMENTS`` entries.

    A :class:`ValueError` (the arguments are at fault, and the message names
    them) and a :class:`MemoryError` (for callers that catch that).
    """


def check_budget(n_elements, what, hint):
    """Refuse an array of ``n_elements`` entries above ``MAX_ELEMENTS``.

    Parameters
    ----------
    n_elements : int
        Entries of the array about to be allocated (exact Python integer: no overflow).
    what : str
        What the array is, with the arguments that size it (``"the (m, d) = (1, 10**6) weights"``).
    hint : str
        Which arguments to reduce, and how.

    Returns
    -------
    int
        ``n_elements``.

    Raises
    ------
    AllocationError
        A ValueError (and MemoryError) naming ``what`` and ``hint``.
    """
    n_elements = int(n_elements)
    if n_elements > MAX_ELEMENTS:
        raise AllocationError(f"{what} would need {show_int(n_elements, 3)} entries ({_gib(n_elements * 8)} in "
                              f"float64), more than montecarlo._checks.MAX_ELEMENTS = {MAX_ELEMENTS:.3g} "
                              f"({_gib(MAX_ELEMENTS * 8)}) for one array; {hint}")
    return n_elements


def _gib(n_bytes):
    if n_bytes.bit_length() > 1000:  # (beyond a float)
        return f"{show_int(n_bytes >> 60)} EiB"
    for unit, size in (("EiB", 2**60), ("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if n_bytes >= size:
            return f"{n_bytes / size:.3g} {unit}"
    return f"{n_bytes} bytes"


def check_sequence(values, name, check, what):
    """A non-empty list of items, each validated by ``check(item, f"{name}[i]")``.

    ``what`` describes the items for the message (``"integers >= 2"``).
    """
    if isinstance(values, (str, bytes)):
        raise ArgumentTypeError(f"{name} must be a sequence of {what}, got {_describe(values)}")
    try:
        items = list(values)
    except TypeError:
        raise ArgumentTypeError(f"{name} must be a sequence of {what}, got {_describe(values)}") from None
    if not items:
        raise ValueError(f"{name} must hold at least one of {what}, got an empty sequence")
    return [check(x, f"{name}[{i}]") for i, x in enumerate(items)]


def check_progress(progress, name="progress"):
    """``progress`` if it is a bool or a callable ``f(done, total)`` (a truthy string is refused)."""
    if callable(progress) and not isinstance(progress, (bool, np.bool_)):
        return progress
    if not isinstance(progress, (bool, np.bool_)):
        raise ArgumentTypeError(f"{name} must be True, False or a callable f(done, total), got {_describe(progress)}")
    return bool(progress)


#: numpy dtype kinds that are not real numbers, and how to say so.
_NOT_REAL = {"b": "booleans", "c": "complex numbers", "U": "strings", "S": "bytes", "O": "Python objects",
             "V": "structured records", "M": "datetimes", "m": "timedeltas"}


def _refuse_kind(X, name):
    """ArgumentTypeError for containers that would be coerced silently (masked arrays, strings, ...)."""
    if isinstance(X, np.ma.MaskedArray):
        raise ArgumentTypeError(f"{name} must be a plain array of real numbers, got a numpy masked array (its masked "
                                "entries would still be computed with: fill or drop them first)")
    if isinstance(X, (str, bytes)):
        raise ArgumentTypeError(f"{name} must be an array of real numbers, got {_describe(X)}")


def _kind_error(name, dtype):
    kind = getattr(dtype, "kind", None)
    if kind in _NOT_REAL:
        what = _NOT_REAL[kind]
    else:
        text = str(dtype)
        what = "booleans" if "bool" in text else "complex numbers" if "complex" in text else f"dtype {text}"
    return ArgumentTypeError(f"{name} must hold real numbers (a float or integer array), got {what}")


def check_data(X, xp, name="X", ndim=2, width=None, device=None, dtype=None, width_name="d"):
    """Validate a data array: ``ndim`` dims, last axis ``width``, real and finite.

    Returns ``X`` as an array of ``xp``: an array of that backend is kept on
    its own device, anything else is converted and placed on ``device``.
    Integer input is promoted to float64 (then to ``dtype`` if given).

    Raises
    ------
    ArgumentTypeError
        (a TypeError and a ValueError) for masked arrays, strings (also lists
        of numeric strings: they are not parsed), booleans, complex numbers
        and Python objects.
    ValueError
        Wrong number of dimensions or columns, no column, NaN or inf entries.
    """
    _refuse_kind(X, name)
    if _is_xp_array(X, xp):
        arr = np.asarray(X) if isinstance(X, np.ndarray) and type(X) is not np.ndarray else X  # np.matrix -> ndarray
    else:
        try:
            raw = np.asarray(X)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name} must be a real array, got {_describe(X)}") from exc
        if raw.dtype.kind not in "fiu":
            raise _kind_error(name, raw.dtype)
        try:
            arr = xp.asarray(raw, device=device)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"{name} must be a real array, got {_describe(X)}") from exc
    if arr.ndim != ndim:
        shape = "(N, d)" if ndim == 2 else "(d,)"
        raise ValueError(f"{name} must be a {ndim}-D array of shape {shape}, got shape {tuple(arr.shape)}")
    if not xp.isdtype(arr.dtype, "real floating"):
        if xp.isdtype(arr.dtype, "integral") and not xp.isdtype(arr.dtype, "bool"):
            arr = xp.astype(arr, xp.float64)
        else:
            raise _kind_error(name, arr.dtype)
    if width is not None and arr.shape[-1] != width:
        lead = {1: "(", 2: "(N, "}.get(ndim, "(..., ")
        raise ValueError(f"{name} must have shape {lead}{width}) ({width} columns) to match {width_name} = {width}, "
                         f"got shape {tuple(arr.shape)}")
    if arr.shape[-1] < 1:
        raise ValueError(f"{name} must have at least one column, got shape {tuple(arr.shape)}")
    if dtype is not None and arr.dtype != dtype:
        arr = xp.astype(arr, dtype)
    _check_finite(arr, xp, name)
    return arr


def check_weights(W, name="W", shape="(m, d)", projection=True, min_cols=1):
    """Validate a real floating 2-D array of any backend (projection weights, norms): finite, non-empty.

    Parameters
    ----------
    W : array
    name : str
        The argument's name in messages.
    shape : str
        How the shape is described in messages (``"(m, d)"``, ``"(n, d)"``).
    projection : bool
        Whether a :class:`~montecarlo.RandomProjection` is also accepted
        (only for the message: the caller handles it).
    min_cols : int
        Smallest number of columns.

    Returns
    -------
    module
        The array namespace of ``W``.
    """
    import array_api_compat

    _refuse_kind(W, name)
    alt = " or a RandomProjection" if projection else ""
    if not array_api_compat.is_array_api_obj(W):
        raise ArgumentTypeError(f"{name} must be an {shape} array (numpy, torch or cupy){alt}, got {_describe(W)}")
    xp = array_api_compat.array_namespace(W)
    if W.ndim != 2 or W.shape[0] < 1 or W.shape[1] < min_cols:
        raise ValueError(f"{name} must be an {shape} array with at least one row and {min_cols} column"
                         f"{'s' if min_cols > 1 else ''}{alt}, got shape {tuple(W.shape)}")
    if not xp.isdtype(W.dtype, "real floating"):
        raise ArgumentTypeError(f"{name} must hold real floating-point numbers (float32 or float64), got dtype "
                                f"{W.dtype}")
    _check_finite(W, xp, name)
    return xp


def _check_finite(arr, xp, name):
    bad = int(xp.sum(xp.astype(~xp.isfinite(arr), xp.int64)))
    if bad:
        raise ValueError(f"{name} must be finite: found {bad} NaN or inf entries")


def _is_xp_array(X, xp):
    import array_api_compat

    if not array_api_compat.is_array_api_obj(X):
        return False
    try:
        return array_api_compat.array_namespace(X) is xp
    except TypeError:
        return False
