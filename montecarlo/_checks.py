"""Argument validation at the boundary of :mod:`montecarlo`.

Every public function validates its arguments here and raises
:class:`ValueError` naming the argument and the allowed values; nothing is
silently coerced (a float ``64.0`` is not a dimension, a NaN is not data).
"""

from __future__ import annotations

import numbers

import numpy as np

#: The couplings, one spelling each (as everywhere in the project).
COUPLINGS = ("iid", "orthogonal", "simplex", "simplex_plus", "fast_orthogonal", "fast_simplex")
#: Couplings whose rows are exactly N(0, I_d) (unbiased kernel estimates).
EXACT_COUPLINGS = ("iid", "orthogonal", "simplex", "simplex_plus")
#: Couplings with an HD-product in place of the Haar rotation (App. B.2).
FAST_COUPLINGS = ("fast_orthogonal", "fast_simplex")
#: Couplings that need d >= 2 (a simplex in d - 1 dimensions).
SIMPLEX_COUPLINGS = ("simplex", "simplex_plus", "fast_simplex")

KERNELS = ("gaussian", "softmax", "rff")


def _describe(value):
    return f"{value!r} ({type(value).__name__})"


def check_coupling(coupling, allowed=COUPLINGS, name="coupling"):
    if not isinstance(coupling, str) or coupling not in allowed:
        choices = ", ".join(repr(c) for c in allowed)
        raise ValueError(f"{name} must be one of {choices}, got {_describe(coupling)}")
    return coupling


def check_int(value, name, minimum, context=""):
    """``value`` as an int if it is an integer (not bool, not float) >= ``minimum``."""
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if not ok or int(value) < minimum:
        suffix = f" {context}" if context else ""
        raise ValueError(f"{name} must be an integer >= {minimum}{suffix}, got {_describe(value)}")
    return int(value)


def check_dimension(d, coupling):
    """d >= 2 for the simplex couplings, d >= 1 otherwise."""
    if coupling in SIMPLEX_COUPLINGS:
        return check_int(d, "d", 2, f"for the {coupling} coupling")
    return check_int(d, "d", 1)


def check_kernel(kernel, allowed=KERNELS):
    if not isinstance(kernel, str) or kernel not in allowed:
        choices = ", ".join(repr(k) for k in allowed)
        raise ValueError(f"kernel must be one of {choices}, got {_describe(kernel)}")
    return kernel


def check_positive_float(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite real > 0, got {_describe(value)}")
    return float(value)


def check_data(X, xp, name="X", ndim=2, width=None, device=None, dtype=None):
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
        lead = "(N, " if ndim == 2 else "("
        raise ValueError(f"{name} must have shape {lead}{width}) to match d = {width}, got shape {tuple(arr.shape)}")
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
