"""Fuzz suite of ``montecarlo`` (core) and ``figures`` (issue 12, "What done means").

A table of cases: every public function and class of the core, each argument
given the bad values a user would try (wrong types, out-of-range numbers,
NaN/inf, masked arrays, lists of numeric strings, bool/complex/object arrays,
truthy non-bool flags, legacy RandomState generators, sizes that would need
terabytes) next to valid edge values.  Each case must

* end in a :class:`ValueError` or :class:`TypeError` whose message names the
  argument (and, by the project's convention, the allowed values), or return
  (for the valid edge values);
* finish within :data:`CASE_SECONDS` seconds of the process's CPU time (``ITIMER_PROF``, so that a loaded
  machine does not trip it), and within :data:`CASE_WALL_SECONDS` of wall time (a generous guard against a
  hang that waits without computing: a deadlock);
* keep numpy's traced peak allocation within :data:`CASE_BYTES` (the
  arguments are small; the sizes that would need more must be refused before
  anything is allocated; the few cases whose output is big say what their
  arguments justify), in a child process limited to :data:`ADDRESS_SPACE`
  bytes of address space, so that an unbounded allocation fails as a
  MemoryError instead of swapping the machine.

The cases run in one child process (``python tests/test_montecarlo.py
OUT.json``, killed if it exceeds :data:`CHILD_SECONDS`); the tests below read
its outcomes, one parametrized test per function, and print the count of cases
per outcome.  ``tests/test_experiments.py`` covers ``montecarlo.experiments``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import traceback
from collections import Counter
from pathlib import Path

import pytest

#: Seconds one case may take.
CASE_SECONDS = 20
#: Wall-clock guard per case (a blocked hang burns no CPU time); far above any case's time on a loaded machine.
CASE_WALL_SECONDS = 900
#: numpy's traced peak allocation allowed per case (tracemalloc).
CASE_BYTES = 64 << 20
#: Address-space limit of the child process (RLIMIT_AS).
ADDRESS_SPACE = 8 << 30
#: Seconds the whole child may take.
CHILD_SECONDS = 1800

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------
# The table


def build_cases():
    """List of (id, callable, args, kwargs, expected, names): expected 'ok' or 'error'; an error message
    must contain one of ``names``."""
    import numpy as np

    import figures
    import montecarlo as mc
    from figures._context import Context
    from figures.style import label, marker_style, style
    from montecarlo import audit as au
    from montecarlo import diagnostics as dg
    from montecarlo import norm_coupling as nc
    from montecarlo import optimum as op

    cases = []

    def add(fid, func, args=(), kwargs=None, expected="ok", names=(), max_bytes=CASE_BYTES):
        cases.append((fid, func, tuple(args), dict(kwargs or {}), expected, tuple(names), max_bytes))

    masked = np.ma.masked_array([[np.nan, 1.0, 2.0, 3.0]], mask=[[True, False, False, False]])

    def array_cases(fid, func, args, kwargs, pos, name, good, ndim=2, lists_ok=True):
        """Bad data arrays at positional index ``pos`` (or keyword ``pos``) of a call; ``good`` is valid."""
        shape = np.shape(good)
        nan = np.array(good, dtype=float)
        nan.flat[0] = np.nan
        inf = np.array(good, dtype=float)
        inf.flat[-1] = -np.inf
        bad = {
            "nan": nan, "inf": inf, "masked": masked if ndim == 2 else masked[0],
            "numeric_strings": np.array(good).astype(str).tolist(), "bool": np.ones(shape, dtype=bool),
            "complex": np.array(good, dtype=complex), "object_none": np.array(good, dtype=object).tolist(),
            "wrong_ndim": np.array(good, dtype=float)[None], "str": "abc", "none": None, "dict": {"a": 1},
        }
        bad["object_none"] = [None] * shape[-1] if ndim == 1 else [[None] * shape[-1]]
        for tag, value in bad.items():
            a, k = list(args), dict(kwargs)
            if isinstance(pos, int):
                a[pos] = value
            else:
                k[pos] = value
            add(f"{fid}[{name}={tag}]", func, a, k, "error", (name,))
        for tag, value in {"list": np.array(good).tolist(), "int": np.array(good).astype(int)}.items():
            a, k = list(args), dict(kwargs)
            if isinstance(pos, int):
                a[pos] = value
            else:
                k[pos] = value
            add(f"{fid}[{name}={tag}]", func, a, k, "ok" if lists_ok else "error", (name,))

    def int_cases(fid, func, args, kwargs, key, minimum, huge="error", none_ok=False, huge_names=None, name=None):
        for tag, value, exp in (("below_min", minimum - 1, "error"), ("float", minimum + 0.5, "error"),
                                ("float_integral", float(minimum), "error"), ("str", str(minimum), "error"),
                                ("bool", True, "error"), ("nan", math.nan, "error"),
                                ("none", None, "ok" if none_ok else "error"), ("numpy_int", np.int64(minimum), "ok"),
                                ("huge", 2**70, huge)):
            a, k = list(args), dict(kwargs)
            if isinstance(key, int):
                a[key] = value
            else:
                k[key] = value
            nm = (key,) if isinstance(key, str) else name if isinstance(name, tuple) else (name,)
            add(f"{fid}[{nm[0]}={tag}]", func, a, k, exp, huge_names if tag == "huge" and huge_names else nm)

    def flag_cases(fid, func, args, kwargs, key):
        for tag, value in (("str_False", "False"), ("int", 1), ("none", None), ("array", np.array([True]))):
            add(f"{fid}[{key}={tag}]", func, args, {**kwargs, key: value}, "error", (key,))
        add(f"{fid}[{key}=numpy_bool]", func, args, {**kwargs, key: np.bool_(False)}, "ok")

    def choice_cases(fid, func, args, kwargs, key, bad=("bogus", 3, None, ["x"])):
        for value in bad:
            add(f"{fid}[{key}={value!r}]", func, args, {**kwargs, key: value}, "error", (key,))

    def rng_cases(fid, func, args, kwargs, key="rng"):
        for tag, value in (("negative", -1), ("float", 1.5), ("str", "0"), ("bool", True),
                           ("RandomState", np.random.RandomState(0)), ("object", object())):
            add(f"{fid}[{key}={tag}]", func, args, {**kwargs, key: value}, "error", (key,))
        for tag, value in (("SeedSequence", np.random.SeedSequence(1)), ("Generator", np.random.default_rng(1)),
                           ("none", None), ("big", 2**100)):
            add(f"{fid}[{key}={tag}]", func, args, {**kwargs, key: value}, "ok")

    def backend_cases(fid, func, args, kwargs):
        for key, value in (("xp", "jax"), ("xp", 3), ("device", "cuda"), ("device", 7), ("dtype", "float16"),
                           ("dtype", np.int32), ("dtype", object())):
            add(f"{fid}[{key}={value!r}]", func, args, {**kwargs, key: value}, "error", (key,))
        add(f"{fid}[xp=torch]", func, args, {**kwargs, "xp": "torch"}, "ok")
        add(f"{fid}[dtype=float32]", func, args, {**kwargs, "dtype": "float32"}, "ok")

    def coupling_cases(fid, func, args, kwargs, pos=0):
        for value in ("Simplex", "orf", None, 3, ["simplex"]):
            a = list(args)
            a[pos] = value
            add(f"{fid}[coupling={value!r}]", func, a, kwargs, "error", ("coupling",))
        for c in mc.COUPLINGS:
            a = list(args)
            a[pos] = c
            add(f"{fid}[coupling={c}]", func, a, kwargs, "ok")

    # -- couplings ------------------------------------------------------------
    sw = ("simplex", 4, 6)
    coupling_cases("sample_weights", mc.sample_weights, sw, {"rng": 0})
    int_cases("sample_weights", mc.sample_weights, sw, {"rng": 0}, 1, 2, name="d")
    int_cases("sample_weights", mc.sample_weights, sw, {"rng": 0}, 2, 1, name="m")
    int_cases("sample_weights", mc.sample_weights, sw, {"rng": 0}, "n_draws", 1, none_ok=True)
    rng_cases("sample_weights", mc.sample_weights, sw, {})
    backend_cases("sample_weights", mc.sample_weights, sw, {"rng": 0})
    choice_cases("sample_weights", mc.sample_weights, sw, {"rng": 0}, "haar_route", bad=("gram_schmidt", 3, ["qr"]))
    flag_cases("sample_weights", mc.sample_weights, sw, {"rng": 0}, "return_info")
    for c in mc.COUPLINGS:
        add(f"sample_weights[{c}, d=10**6, m=1]", mc.sample_weights, (c, 10**6, 1), {"rng": 0},
            "error" if c == "simplex_plus" else "ok", ("d",), max_bytes=16 * 2**20 * 8)  # O(d): 16 p-vectors
        add(f"sample_weights[{c}, d=10**5, m=10**5]", mc.sample_weights, (c, 10**5, 10**5), {"rng": 0}, "error",
            ("m", "d"))
        add(f"sample_weights[{c}, n_draws=10**7]", mc.sample_weights, (c, 8, 8), {"rng": 0, "n_draws": 10**7},
            "error", ("n_draws",))
        add(f"sample_weights[{c}, m < d, every route]", mc.sample_weights, (c, 7, 3), {"rng": 0, "n_draws": 2}, "ok")
    add("sample_weights[n=3 (removed name)]", mc.sample_weights, sw, {"rng": 0, "n": 3}, "error", ("n",))
    add("sample_weights[n and n_draws]", mc.sample_weights, sw, {"rng": 0, "n": 3, "n_draws": 3}, "error",
        ("n",))
    coupling_cases("sample_projection", mc.sample_projection, sw, {"rng": 0})
    int_cases("sample_projection", mc.sample_projection, sw, {"rng": 0}, 2, 1, name="m")
    rng_cases("sample_projection", mc.sample_projection, sw, {})
    proj = mc.sample_projection("orthogonal", 4, 6, rng=0)
    array_cases("RandomProjection()", proj, (np.ones((2, 4)) * 0.1,), {}, 0, "X", np.ones((2, 4)) * 0.1)
    add("RandomProjection()[X width 5]", proj, (np.ones((2, 5)),), {}, "error", ("X",))
    int_cases("haar_orthogonal", mc.haar_orthogonal, (3, 4), {"rng": 0}, 0, 1, name="n")
    int_cases("haar_orthogonal", mc.haar_orthogonal, (3, 4), {"rng": 0}, 1, 1, name="d")
    choice_cases("haar_orthogonal", mc.haar_orthogonal, (3, 4), {"rng": 0}, "route", bad=("QR", 3, ["qr"]))
    rng_cases("haar_orthogonal", mc.haar_orthogonal, (3, 4), {})
    int_cases("simplex_matrix", mc.simplex_matrix, (4,), {}, 0, 2, name="d")
    backend_cases("simplex_matrix", mc.simplex_matrix, (4,), {})
    for tag, value, exp in (("list", [1.0, 2.0], "error"), ("length1", np.ones(1), "error"),
                            ("str", "abc", "error"), ("matrix", np.ones((3, 4)), "ok")):
        add(f"simplex_apply[x={tag}]", mc.simplex_apply, (value,), {}, exp, ("x",))
    for tag, value, exp in (("odd", np.ones(6), "error"), ("list", [1.0, 1.0], "error"), ("p=1", np.ones(1), "ok"),
                            ("empty", np.ones(0), "error")):
        add(f"fwht[x={tag}]", mc.fwht, (value,), {}, exp, ("x",))
    int_cases("next_power_of_two", mc.next_power_of_two, (5,), {}, 0, 1, huge="ok", name="d")
    norms = np.abs(np.random.default_rng(0).standard_normal((3, 4))) + 0.5
    array_cases("simplex_plus_vectors", mc.simplex_plus_vectors, (norms,), {}, 0, "norms", norms, lists_ok=False)
    for tag, value in (("negative", -norms), ("zero", np.zeros((2, 3))), ("d=1", np.ones((2, 1))),
                       ("1-D", np.ones(3))):
        add(f"simplex_plus_vectors[norms={tag}]", mc.simplex_plus_vectors, (value,), {}, "error", ("norms",))
    for tag, value in (("zero", 0.0), ("negative", -1e-3), ("nan", math.nan), ("str", "1e-8"),
                       ("below_float64_resolution", 1e-17)):
        add(f"simplex_plus_vectors[tol={tag}]", mc.simplex_plus_vectors, (norms,), {"tol": value}, "error", ("tol",))
    add("simplex_plus_vectors[float32, default tol]", mc.simplex_plus_vectors, (norms.astype(np.float32),), {}, "ok")
    add("simplex_plus_vectors[float32, tol 1e-10]", mc.simplex_plus_vectors, (norms.astype(np.float32),),
        {"tol": 1e-10}, "error", ("tol",))
    int_cases("simplex_plus_vectors", mc.simplex_plus_vectors, (norms,), {}, "max_passes", 1)
    choice_cases("simplex_plus_vectors", mc.simplex_plus_vectors, (norms,), {}, "on_unconverged")
    add("simplex_plus_vectors[n=10**5, d=10**3]", mc.simplex_plus_vectors, (np.ones((10**3, 10**3))[:1],), {}, "ok")

    # -- features ---------------------------------------------------------------
    W = mc.sample_weights("simplex", 4, 6, rng=0)
    X = np.random.default_rng(1).standard_normal((3, 4)) * 0.3
    for fname, func in (("prf_features", mc.prf_features), ("prf_log_features", mc.prf_log_features),
                        ("rff_features", mc.rff_features), ("random_features", mc.random_features),
                        ("log_features", mc.log_features)):
        array_cases(fname, func, (X, W), {}, 0, "X", X)
        wn = W.copy()
        wn[0, 0] = np.nan
        for tag, value in (("nan", wn), ("inf", W * np.inf), ("masked", np.ma.masked_array(W)),
                           ("int", W.astype(int)), ("bool", W > 0), ("complex", W.astype(complex)),
                           ("list", W.tolist()), ("1-D", W[0]), ("empty", np.ones((0, 4))), ("none", None),
                           ("width_5", np.ones((6, 5)))):
            add(f"{fname}[W={tag}]", func, (X, value), {}, "error", ("W",))
        add(f"{fname}[W=float32]", func, (X, W.astype(np.float32)), {}, "ok")
        add(f"{fname}[W=RandomProjection]", func, (X, mc.sample_projection("fast_simplex", 4, 6, rng=0)), {}, "ok")
        add(f"{fname}[huge N x m]", func, (np.zeros((2**16, 4)), np.ones((2**13, 4))), {}, "error", ("N", "m"))
    for fname, func in (("prf_features", mc.prf_features), ("prf_log_features", mc.prf_log_features)):
        choice_cases(fname, func, (X, W), {}, "kernel", bad=("rff", "Gaussian", None, 3))
    choice_cases("prf_features", mc.prf_features, (X, W), {}, "stabilize", bad=("max", "", 1, True))
    add("prf_features[stabilize=row]", mc.prf_features, (X, W), {"stabilize": "row"}, "ok")
    for fname, func in (("random_features", mc.random_features), ("log_features", mc.log_features)):
        for bad in ("favor", None, 3, "PRF"):
            add(f"{fname}[kind={bad!r}]", func, (X, W), {"kind": bad}, "error", ("kind",))
        add(f"{fname}[kind=oprf, no A]", func, (X, W), {"kind": "oprf"}, "error", ("A",))
        add(f"{fname}[kind=oprf, A=0.2]", func, (X, W), {"kind": "oprf", "A": 0.2}, "error", ("A",))
        add(f"{fname}[kind=oprf, A=nan]", func, (X, W), {"kind": "oprf", "A": float("nan")}, "error", ("A",))
        add(f"{fname}[kind=prf, A=-0.1]", func, (X, W), {"kind": "prf", "A": -0.1}, "error", ("A",))
        add(f"{fname}[kind=hyperbolic]", func, (X, W), {"kind": "hyperbolic"}, "ok")
        add(f"{fname}[kind=oprf, A=-0.1]", func, (X, W), {"kind": "oprf", "A": -0.1}, "ok")
    add("log_features[kind=rff]", mc.log_features, (X, W), {"kind": "rff"}, "error", ("kind",))
    add("random_features[kind=trig_softmax, gaussian]", mc.random_features, (X, W), {"kind": "trig_softmax"}, "error",
        ("kernel", "trig_softmax"))
    add("check_kind_params[oprf, A=-0.1]", mc.check_kind_params, ("oprf", {"A": -0.1}), {}, "ok")
    for tag, args, kw, names in (("kind=favor", ("favor", {}), {}, ("kind",)), ("params=3", ("oprf", 3), {}, ("params",)),
                                 ("prf, A", ("prf", {"A": 0.1}), {}, ("A",)), ("oprf, no A", ("oprf", {}), {}, ("A",)),
                                 ("reals, A array", ("oprf", {"A": np.ones(2)}), {"reals": True}, ("A",)),
                                 ("reals, A nan", ("oprf", {"A": math.nan}), {"reals": True}, ("A",))):
        add(f"check_kind_params[{tag}]", mc.check_kind_params, args, kw, "error", names)
    add("random_features[kind=rff, stabilize=row]", mc.random_features, (X, W), {"kind": "rff", "stabilize": "row"},
        "error", ("stabilize",))

    # -- estimators -------------------------------------------------------------
    x, y = np.full(4, 0.2), np.full(4, -0.1)
    for fname, func in (("kernel_estimate", mc.kernel_estimate), ("empirical_mse", mc.empirical_mse)):
        base = ("simplex", x, y, 4, 50)
        coupling_cases(fname, func, base, {"rng": 0})
        array_cases(fname, func, base, {"rng": 0}, 1, "x", x, ndim=1)
        add(f"{fname}[y width 3]", func, ("simplex", x, y[:3], 4, 50), {"rng": 0}, "error", ("y",))
        int_cases(fname, func, base, {"rng": 0}, 3, 1, name="m")
        int_cases(fname, func, base, {"rng": 0}, 4, 2, huge="skip", name="n_draws")
        rng_cases(fname, func, base, {})
        choice_cases(fname, func, base, {"rng": 0}, "kernel")
        choice_cases(fname, func, base, {"rng": 0}, "path")
        for tag, value in (("str_False", "False"), ("int", 1), ("none", None)):
            add(f"{fname}[progress={tag}]", func, base, {"rng": 0, "progress": value}, "error", ("progress",))
        add(f"{fname}[progress=callable]", func, base, {"rng": 0, "progress": lambda i, n: None}, "ok")
        add(f"{fname}[chunk=0]", func, base, {"rng": 0, "chunk": 0}, "error", ("chunk",))
        add(f"{fname}[d=10**6, m=10**6]", func, ("simplex", np.zeros(10**3), np.zeros(10**3), 10**9, 10),
            {"rng": 0}, "error", ("m",))
    for fname, func in (("empirical_conformity", mc.empirical_conformity),
                        ("empirical_pair_moments", mc.empirical_pair_moments)):
        base = ("orthogonal", 4, 0.5)
        coupling_cases(fname, func, base, {"n_draws": 20, "rng": 0})
        int_cases(fname, func, base, {"n_draws": 20, "rng": 0}, 1, 2, name=("d", "m"))  # d = 1: m = d = 1, no pair
        int_cases(fname, func, base, {"n_draws": 20, "rng": 0}, "m", 2, none_ok=True)
        for tag, value in (("negative", -0.5), ("nan", math.nan), ("str", "0.5"), ("bool", True),
                           ("wrong_length", np.ones(3))):
            add(f"{fname}[v={tag}]", func, ("orthogonal", 4, value), {"n_draws": 20, "rng": 0}, "error", ("v",))
        choice_cases(fname, func, base, {"n_draws": 20, "rng": 0}, "kind")
    add("empirical_pair_moments[m=10**5]", mc.empirical_pair_moments, ("iid", 4, 0.5), {"m": 10**5, "n_draws": 2},
        "error", ("m",))
    gX = np.random.default_rng(2).standard_normal((5, 3)) * 0.3
    array_cases("gram_estimate", mc.gram_estimate, ("simplex", gX, 3, 4), {"rng": 0}, 1, "X", gX)
    add("gram_estimate[Y width 2]", mc.gram_estimate, ("simplex", gX, 3, 4), {"rng": 0, "Y": np.ones((2, 2))},
        "error", ("Y",))
    add("gram_estimate[N=10**5]", mc.gram_estimate, ("iid", np.zeros((10**5, 2)), 2, 2), {"rng": 0}, "error",
        ("N",))
    int_cases("gram_estimate", mc.gram_estimate, ("simplex", gX, 3, 4), {"rng": 0}, 2, 1, name="m")
    array_cases("exact_kernel", mc.exact_kernel, (x, y), {}, 0, "x", x, ndim=1)
    choice_cases("exact_kernel", mc.exact_kernel, (x, y), {}, "kernel")
    base = ("simplex", x, 4, 10)
    array_cases("pair_projections", mc.pair_projections, base, {"rng": 0}, 1, "v", x, ndim=1)
    add("pair_projections[v=norm without d]", mc.pair_projections, ("simplex", 1.0, 4, 10), {"rng": 0}, "error",
        ("d",))
    add("pair_projections[v=norm with d]", mc.pair_projections, ("simplex", 1.0, 4, 10), {"rng": 0, "d": 4}, "ok")
    add("pair_projections[v=-1 with d]", mc.pair_projections, ("simplex", -1.0, 4, 10), {"rng": 0, "d": 4},
        "error", ("v",))
    int_cases("pair_projections", mc.pair_projections, base, {"rng": 0}, 3, 1, name="n_draws")
    add("pair_projections[n=5 (removed name)]", mc.pair_projections, ("simplex", x, 4), {"n": 5, "rng": 0}, "error",
        ("n",))

    # -- diagnostics --------------------------------------------------------------
    int_cases("standard_directions", dg.standard_directions, (4,), {}, 0, 1, name="d")
    coupling_cases("ks_marginals", dg.ks_marginals, ("simplex", 4, 20), {"rng": 0})
    int_cases("ks_marginals", dg.ks_marginals, ("simplex", 4, 20), {"rng": 0}, 2, 2, name="n")
    for tag, value in (("out_of_range", [0, 9]), ("str", "0"), ("empty", []), ("float", [0.5])):
        add(f"ks_marginals[rows={tag}]", dg.ks_marginals, ("simplex", 4, 20), {"rng": 0, "rows": value}, "error",
            ("rows",))
    for tag, value in (("not_unit", {"a": np.ones(4)}), ("wrong_length", {"a": np.ones(3) / 3**0.5}),
                       ("list", [np.ones(4) / 2]), ("empty", {})):
        add(f"ks_marginals[directions={tag}]", dg.ks_marginals, ("simplex", 4, 20), {"rng": 0, "directions": value},
            "error", ("directions",))
    add("ks_marginals[weights=nan]", dg.ks_marginals, (None, 4, 0), {"weights": np.full((5, 4, 4), np.nan)},
        "error", ("weights",))
    add("ks_marginals[weights]", dg.ks_marginals, (None, 4, 0),
        {"weights": mc.sample_weights("orthogonal", 4, 4, rng=0, n_draws=20)}, "ok")
    for tag, value in (("str", "100"), ("small", [1]), ("none", None)):
        add(f"ks_distance_curve[sizes={tag}]", dg.ks_distance_curve, ("iid", 3), {"sizes": value}, "error",
            ("sizes",))
    add("ks_distance_curve[rng=Generator]", dg.ks_distance_curve, ("iid", 3), {"sizes": (20,),
                                                                               "rng": np.random.default_rng(0)},
        "error", ("rng",))
    add("kernel_bias[kernel=bogus]", dg.kernel_bias, ("simplex", x, y, 4, 10), {"kernel": "bogus"}, "error",
        ("kernel",))

    # -- audit -------------------------------------------------------------------
    good = lambda d, m, rng: mc.sample_weights("orthogonal", d, m, rng=rng)  # noqa: E731
    abase = (good, 4)
    akw = {"n_draws": 50, "rng": 0}
    add("audit[ok]", au.audit, abase, akw, "ok")
    add("audit[sampler=not callable]", au.audit, ("f", 4), akw, "error", ("sampler",))
    int_cases("audit", au.audit, abase, akw, 1, 2, name="d")
    int_cases("audit", au.audit, abase, akw, "n_draws", 50)
    int_cases("audit", au.audit, abase, akw, "m", 1, none_ok=True)
    rng_cases("audit", au.audit, abase, {"n_draws": 50})
    for key, values in (("alpha", (0.0, 1.0, math.nan, "0.01")), ("v", (0.0, -1.0, math.inf)), ("z", (0.0, "1")),
                        ("time_budget", (0.0, -1.0)), ("call", ("d,m,rng,rng", "x", 3)),
                        ("coupling", ("simplex_plus", "bogus", 3))):
        for value in values:
            add(f"audit[{key}={value!r}]", au.audit, abase, {**akw, key: value}, "error", (key,))
    for tag, sampler in (("returns_none", lambda d, m, rng: None), ("transposed", lambda d, m, rng: np.ones((d, m + 1))),
                         ("nan", lambda d, m, rng: np.full((m, d), np.nan)),
                         ("ints", lambda d, m, rng: np.ones((m, d), dtype=int))):
        add(f"audit[sampler {tag}]", au.audit, (sampler, 4), akw, "error", ("sampler",))
    for value in ("nocolon", "x:", "no_such_module_xyz:f", "montecarlo.audit:no_such_function", 3):
        add(f"load_sampler[{value!r}]", au.load_sampler, (value,), {}, "error", ("spec",))
    int_cases("audit_directions", au.audit_directions, (4,), {}, 0, 1, name="d")

    # -- optimum, norm_coupling -------------------------------------------------------
    for tag, value in (("short", [1.0]), ("negative", [1.0, -1.0]), ("nan", [1.0, math.nan]), ("str", ["1", "2"]),
                       ("masked", np.ma.masked_array([1.0, 2.0])), ("2-D", np.ones((2, 2)))):
        add(f"optimise_directions[norms={tag}]", op.optimise_directions, (value, 1.0), {}, "error", ("norms",))
    for tag, value in (("negative", -1.0), ("nan", math.nan), ("str", "1")):
        add(f"optimise_directions[v={tag}]", op.optimise_directions, ([1.0, 2.0], value), {}, "error", ("v",))
    add("optimise_directions[starts=array]", op.optimise_directions, ([1.0, 2.0], 1.0), {"starts": np.ones((2, 2))},
        "error", ("starts",))
    add("optimise_directions[m=10**4]", op.optimise_directions, (np.ones(10**4), 1.0), {}, "error", ("m",))
    add("optimise_directions[ok]", op.optimise_directions, ([1.0, 2.0, 1.5], 1.0), {"n_random": 1, "rng": 0}, "ok")
    int_cases("optimality_gaps", op.optimality_gaps, (3, 0.5), {"n_draws": 2, "n_random": 0, "rng": 0}, 0, 2,
              name="d")
    for key, value in (("ds", "3"), ("ds", [1]), ("ds", []), ("vs", [-1.0]), ("vs", 0.5)):
        add(f"optimality_gap_table[{key}={value!r}]", op.optimality_gap_table, (), {key: value, "n_draws": 2},
            "error", (key,))
    add("objective[1 row]", op.objective, (np.ones((1, 3)), 1.0), {}, "error", ("vectors",))
    for tag, call in (("kind", lambda: nc.coupled_norms(4, 3, "bogus")), ("n_blocks", lambda: nc.coupled_norms(4, 0, "iid")),
                      ("huge", lambda: nc.coupled_norms(10**5, 10**5, "iid")),
                      ("rng", lambda: nc.coupled_norms(4, 3, "iid", rng=np.random.RandomState(0))),
                      ("v", lambda: nc.conformity(4, -1.0, "equal")), ("d", lambda: nc.conformity(1, 1.0, "equal")),
                      ("m", lambda: nc.sample_norm_coupled_weights(4, 0, "iid")),
                      ("n_draws", lambda: nc.sample_norm_coupled_weights(64, 64, "iid", n_draws=10**6)),
                      ("ds", lambda: nc.norm_coupling_table(ds="4"))):
        add(f"norm_coupling[{tag}]", call, (), {}, "error", ({"huge": "n_blocks"}.get(tag, tag),))
    add("norm_coupling[ok]", nc.sample_norm_coupled_weights, (4, 6, "stratified"), {"rng": 0}, "ok")

    # -- figures -------------------------------------------------------------------
    for key, value in (("seed", -1), ("seed", 1.5), ("dps", 5), ("dps", 10**6), ("backend", "jax"),
                       ("quick", "False"), ("progress", 1), ("out", ""), ("uci_dir", "/nonexistent/uci"),
                       ("uci_dir", 3)):
        add(f"figures.Context[{key}={value!r}]", Context, (), {key: value, "progress": False} if key != "progress"
            else {key: value}, "error", (key,))
    add("figures.Context[ok]", Context, (), {"progress": False}, "ok")
    for value in ("fig99", "", 3, None, "new", ["fig3"]):
        add(f"figures.lookup[{value!r}]", figures.lookup, (value,), {}, "error", ("figure",))
    for func in (style, marker_style, label):
        add(f"figures.{func.__name__}[orf]", func, ("orf",), {}, "error", ("coupling",))
    # montecarlo.budget: the time budget of the Monte Carlo calls (a context manager)
    def enter_budget(seconds):
        with mc.budget(seconds):
            pass

    add("budget[ok]", enter_budget, (5.0,))
    add("budget[None]", enter_budget, (None,))
    add("budget[-1]", enter_budget, (-1.0,), expected="error", names=("seconds",))
    add("budget[str]", enter_budget, ("5",), expected="error", names=("seconds",))
    add("budget[nan]", enter_budget, (float("nan"),), expected="error", names=("seconds",))
    return cases


# ---------------------------------------------------------------------------
# The child: runs every case with a time limit and a traced-memory peak


def run_cases(out_path):
    import resource
    import warnings

    from _fuzz import run_limited

    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    warnings.simplefilter("ignore")
    results = []
    for fid, func, args, kwargs, expected, names, max_bytes in build_cases():
        if expected == "skip":
            continue
        kind, exc, seconds, peak = run_limited(func, args, kwargs, cpu_seconds=CASE_SECONDS,
                                               wall_seconds=CASE_WALL_SECONDS)
        error, message = None, ""
        if kind == "timeout":
            error = "timeout"
        elif kind == "raised" and isinstance(exc, MemoryError):
            error = "AllocationError" if isinstance(exc, ValueError) else "MemoryError"
            message = str(exc)
        elif kind == "raised" and isinstance(exc, (ValueError, TypeError)):
            error = "ValueError/TypeError"
            message = str(exc)
        elif kind == "raised":  # anything else is a finding
            error = f"other:{type(exc).__name__}"
            message = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        results.append({"id": fid, "expected": expected, "names": names, "error": error, "message": message[:300],
                        "seconds": round(seconds, 3), "peak": peak,
                        "outcome": _outcome(expected, names, error, message, peak, max_bytes)})
    with open(out_path, "w") as fh:
        json.dump(results, fh, indent=1)


def _outcome(expected, names, error, message, peak, max_bytes):
    """'ok', 'refused' (the expected error naming the argument) or the finding."""
    if error == "timeout":
        return "FINDING: timeout"
    if error == "MemoryError":
        return "FINDING: unbounded allocation"
    if peak > max_bytes:
        return "FINDING: memory beyond the arguments"
    if expected == "ok":
        return "ok" if error is None else f"FINDING: refused a valid input ({error})"
    if error is None:
        return "FINDING: accepted a bad input"
    if error.startswith("other:"):
        return f"FINDING: {error[6:]} instead of ValueError/TypeError"
    if not any(n in message for n in names):
        return "FINDING: message does not name the argument"
    return "refused (AllocationError)" if error == "AllocationError" else "refused"


# ---------------------------------------------------------------------------
# The tests


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    out = tmp_path_factory.mktemp("fuzz") / "outcomes.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("SIMPLEX_RF_UCI_DIR", None)
    proc = subprocess.run([sys.executable, __file__, str(out)], cwd=str(out.parent), env=env, capture_output=True,
                          text=True, timeout=CHILD_SECONDS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())
    counts = Counter(r["outcome"] for r in results)
    print(f"\nfuzz montecarlo/figures: {len(results)} cases: " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    return results


def _function(case_id):
    return case_id.split("[", 1)[0]


FUNCTIONS = sorted({_function(c[0]) for c in build_cases()})


def test_table_covers_the_public_api():
    import montecarlo as mc

    covered = set(FUNCTIONS)
    for name in mc.__all__:
        obj = getattr(mc, name)
        if callable(obj) and not isinstance(obj, type) and name not in ("main",):
            assert name in covered or name in ("simplex_plus_tolerance",), f"montecarlo.{name} has no fuzz case"
    assert len(build_cases()) > 500


@pytest.mark.parametrize("function", FUNCTIONS)
def test_bad_inputs_are_refused_naming_the_argument(outcomes, function):
    rows = [r for r in outcomes if _function(r["id"]) == function]
    assert rows
    findings = [f"{r['id']}: {r['outcome']} ({r['error']}: {r['message'][:160]}; {r['seconds']} s, peak "
                f"{r['peak'] / 2**20:.1f} MiB)" for r in rows if r["outcome"].startswith("FINDING")]
    assert not findings, "\n".join(findings)


if __name__ == "__main__":  # the child process
    sys.path.insert(0, str(ROOT))
    run_cases(sys.argv[1])


# ---------------------------------------------------------------------------
# Property-based: NaN/inf anywhere in X or W, any dtype kind, any backend width mismatch


def test_non_finite_entries_anywhere_are_refused():
    """Hypothesis: a NaN or inf at any position of X (N, d) or W (m, d) raises a ValueError naming that
    argument; the same arrays without it give finite features (the check has power)."""
    hypothesis = pytest.importorskip("hypothesis")
    import numpy as np
    from hypothesis import given, settings, strategies as st

    import montecarlo as mc

    @settings(max_examples=60, deadline=None, derandomize=True)
    @given(n=st.integers(1, 6), m=st.integers(1, 7), d=st.integers(1, 5), which=st.sampled_from(["X", "W"]),
           bad=st.sampled_from([np.nan, np.inf, -np.inf]), pos=st.integers(0, 10**6),
           func=st.sampled_from(["prf_features", "rff_features", "prf_log_features"]))
    def check(n, m, d, which, bad, pos, func):
        rng = np.random.default_rng(pos)
        X, W = rng.standard_normal((n, d)) * 0.3, rng.standard_normal((m, d))
        f = getattr(mc, func)
        assert np.all(np.isfinite(f(X, W)))
        arr = X if which == "X" else W
        arr.flat[pos % arr.size] = bad
        with pytest.raises(ValueError, match=f"{which} must be finite: found 1 NaN or inf entries"):
            f(X, W)

    check()
    assert hypothesis.__version__
