"""Argument validation at the boundary of :mod:`montecarlo`: arrays and kernels.

The scalar checks (integers, reals, flags, choices, seeds) and the coupling
checks are the shared ones of :mod:`theory.validation` and
:mod:`theory.registry`, re-exported here; this module adds what needs an array
backend.  Every public function raises :class:`ValueError` (or
:class:`~theory.validation.ArgumentTypeError`, also a :class:`TypeError`)
naming the argument and the allowed values; nothing is silently coerced (a
float ``64.0`` is not a dimension, a NaN is not data).
"""

from __future__ import annotations

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
)

#: The couplings, one spelling each, in registry order.
COUPLINGS = names()
#: Couplings whose rows are exactly N(0, I_d) (unbiased kernel estimates).
EXACT_COUPLINGS = names(exact=True)
#: Couplings with an HD-product in place of the Haar rotation (App. B.2), blocks of 2^k rows.
FAST_COUPLINGS = tuple(rec.name for rec in RECORDS if rec.block == "pow2")

KERNELS = ("gaussian", "softmax", "rff")

__all__ = ["COUPLINGS", "EXACT_COUPLINGS", "FAST_COUPLINGS", "KERNELS", "ArgumentTypeError", "check_bool",
           "check_choice", "check_coupling", "check_couplings", "check_data", "check_dimension", "check_int",
           "check_kernel", "check_positive_float", "check_real", "check_rng"]


def check_kernel(kernel, allowed=KERNELS):
    """``kernel`` if it is one of ``allowed`` (default 'gaussian', 'softmax', 'rff')."""
    return check_choice(kernel, "kernel", allowed)


def check_data(X, xp, name="X", ndim=2, width=None, device=None, dtype=None, width_name="d"):
    """Validate a data array: ``ndim`` dims, last axis ``width``, all finite.

    Returns ``X`` as an array of ``xp``: an array of that backend is kept on
    its own device, anything else is converted and placed on ``device``.  Non-float input (ints) is promoted to float64.
    """
    try:
        arr = X if _is_xp_array(X, xp) else xp.asarray(np.asarray(X, dtype=float), device=device)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a real array, got {_describe(X)}") from exc
    if arr.ndim != ndim:
        shape = "(N, d)" if ndim == 2 else "(d,)"
        raise ValueError(f"{name} must be a {ndim}-D array of shape {shape}, got shape {tuple(arr.shape)}")
    if not xp.isdtype(arr.dtype, "real floating"):
        if xp.isdtype(arr.dtype, ("integral", "bool")) and not xp.isdtype(arr.dtype, "bool"):
            arr = xp.astype(arr, xp.float64)
        else:
            raise ValueError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    if width is not None and arr.shape[-1] != width:
        lead = {1: "(", 2: "(N, "}.get(ndim, "(..., ")
        raise ValueError(f"{name} must have shape {lead}{width}) ({width} columns) to match {width_name} = {width}, "
                         f"got shape {tuple(arr.shape)}")
    if arr.shape[-1] < 1:
        raise ValueError(f"{name} must have at least one column, got shape {tuple(arr.shape)}")
    if dtype is not None and arr.dtype != dtype:
        arr = xp.astype(arr, dtype)
    bad = int(xp.sum(xp.astype(~xp.isfinite(arr), xp.int64)))
    if bad:
        raise ValueError(f"{name} must be finite: found {bad} NaN or inf entries")
    return arr


def _is_xp_array(X, xp):
    import array_api_compat

    if not array_api_compat.is_array_api_obj(X):
        return False
    try:
        return array_api_compat.array_namespace(X) is xp
    except TypeError:
        return False
