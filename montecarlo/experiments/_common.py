"""Shared helpers of the experiments: validation, seeding and batched features of any feature kind."""

from __future__ import annotations


import array_api_compat
import numpy as np

import montecarlo as mc
from montecarlo._backend import namespace, to_numpy
from montecarlo._checks import (  # noqa: F401  (re-exported for the experiment modules)
    MAX_ELEMENTS,
    check_bool,
    check_budget,
    check_choice,
    check_coupling,
    check_couplings,
    check_data,
    check_int,
    check_positive_float,
    check_real,
    check_rng,
)
from montecarlo.experiments.runtime import (  # noqa: F401  (re-exported for the experiment modules)
    EXIT_TERMINATED,
    Z_RTOL,
    HelpFormatter,
    Terminated,
    format_z,
    one_default_help,
    refuse_repeats,
    run_terminable,
    terminate_as_interrupt,
    z_score,
)
from theory import feature_kinds as kinds
from theory.validation import ArgumentTypeError, describe, show_int  # noqa: F401  (re-exported)

#: The array-API namespace of numpy that the feature-kind hooks take.
_NP = array_api_compat.array_namespace(np.empty(0))

#: Target number of float entries of the largest per-chunk intermediate.
CHUNK_ELEMENTS = 1 << 20


#: Largest number of classes the classifiers accept (their outputs have one column per class).
MAX_CLASSES = 1 << 16


def check_array(a, name, ndim, width=None, width_name="d"):
    """Float64 ndarray with ``ndim`` dims (last axis ``width``), non-empty and finite (montecarlo's check_data).

    Booleans, complex numbers, strings and masked arrays are refused
    (:class:`~theory.validation.ArgumentTypeError`, by ``check_data``);
    integers become float64.
    """
    arr = to_numpy(check_data(a, namespace("numpy"), name, ndim, width, dtype=np.float64, width_name=width_name))
    if 0 in arr.shape:
        raise ValueError(f"{name} must not be empty, got shape {arr.shape}")
    return arr


def check_labels(y, name, n, n_classes=None):
    """Integer class indices of length n in [0, n_classes) (n_classes <= :data:`MAX_CLASSES`).

    Integer-valued floats are accepted (exact); booleans, strings, NaN and
    fractional values are refused.  Without ``n_classes`` the largest index
    must be below :data:`MAX_CLASSES` (one typo such as ``10**9`` would
    otherwise size every output).
    """
    if isinstance(y, np.ma.MaskedArray):
        raise ArgumentTypeError(f"{name} must be a plain array of class indices, got a numpy masked array")
    try:
        arr = np.asarray(y)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a 1-D array of {n} class indices, got {describe(y)}") from exc
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{name} must be a 1-D array of {n} class indices, got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            if np.any(np.abs(arr) >= 2**53):
                raise ValueError(f"{name} holds class indices beyond 2**53 (not exact in a float)")
            arr = arr.astype(np.int64)
        else:
            raise ArgumentTypeError(f"{name} must hold integer class indices, got dtype {arr.dtype}")
    if arr.min() < 0:
        raise ValueError(f"{name} must hold class indices >= 0, got {int(arr.min())}")
    top = int(arr.max())
    if n_classes is None and top >= MAX_CLASSES:
        raise ValueError(f"{name} holds class index {top}: class indices must be < {MAX_CLASSES} "
                         "(relabel the classes 0, 1, ..., or pass n_classes)")
    if n_classes is not None and top >= n_classes:
        raise ValueError(f"{name} holds class index {top} >= n_classes = {n_classes}")
    return arr.astype(np.int64)


def seed_entropy(rng, name="rng"):
    """One 63-bit integer from ``rng`` (None, int >= 0, numpy Generator or SeedSequence)."""
    rng = check_rng(rng, name)
    if isinstance(rng, int):
        return rng
    return int(np.random.default_rng(rng).integers(0, 2**63 - 1))


def child_rng(entropy, *keys):
    """Independent generator for one cell of an experiment (stable under reordering of the cells)."""
    return np.random.default_rng([entropy, *[int(k) for k in keys]])


def coupling_key(coupling):
    return mc.COUPLINGS.index(coupling)


def mm(a, b):
    """``a @ b`` with broadcasting, routed to BLAS when one operand is 2-D.

    numpy's ``matmul`` broadcasts a 2-D operand against a stack with stride 0,
    which it cannot hand to BLAS (an order of magnitude slower); a
    ``tensordot`` over the contracted axis is one BLAS call instead.
    """
    if b.ndim == 2:
        return np.tensordot(a, b, axes=([a.ndim - 1], [0]))
    if a.ndim == 2:
        return np.moveaxis(np.tensordot(a, b, axes=([1], [b.ndim - 2])), 0, -2)
    return np.matmul(a, b)


def kind_record(kind, log_space=None):
    """The feature-kind record of ``kind`` (:mod:`theory.feature_kinds`; ValueError naming the kinds)."""
    return kinds.get(kinds.check_kind(kind, log_space=log_space))


def check_kind_params(kind, kind_params, where, log_space=None):
    """``(record, parameters)`` of a feature kind for an experiment: the record's parameters
    (e.g. OPRFs' ``A``), all given and none other (:func:`montecarlo.check_kind_params`);
    ``kind_params`` is None or a dict."""
    rec = kind_record(kind, log_space)
    return rec, mc.check_kind_params(kind, kind_params, where, name="kind_params")


def projected_features(X, W, fmap, sq=None, log=False):
    r"""Batched features of a :class:`montecarlo.FeatureMap` (no projections of its own): X (N, d),
    W (..., m, d) -> (..., N, width m), or with ``log=True`` the log-features of a kind computed in log space.

    The projections of every draw are one BLAS product X (N, d) @ (d, R m); the result is a view laid out
    (N, R, width m) in memory, so ``np.moveaxis(out, -2, 0)`` is contiguous.  ``sq``: precomputed
    :math:`\|x\|^2` (N,).
    """
    m, d = W.shape[-2], W.shape[-1]
    lead = W.shape[:-2]
    if sq is None:
        sq = np.einsum("nd,nd->n", X, X)
    rows, terms = fmap.prepared(W)
    z = (X @ rows.reshape(-1, d).T).reshape(X.shape[0], *lead, m)  # (N, ..., m)
    sqb = sq.reshape(X.shape[0], *([1] * (len(lead) + 1)))
    out = fmap.apply(z, sqb, m=m, d=d, log=log, xp=_NP, **terms)
    return np.moveaxis(out, 0, -2)


def chunks(n, size):
    for lo in range(0, n, size):
        yield slice(lo, min(n, lo + size))


def distinct_couplings(couplings, name="couplings"):
    """:func:`check_couplings`, and no coupling twice (a repeat would be compared with itself: a paired
    difference of exactly 0 with standard error 0); ValueError naming ``name`` otherwise."""
    out = check_couplings(couplings, name)
    refuse_repeats(out, name, "a coupling")
    return out
