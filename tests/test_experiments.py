"""Fuzz of the public API of ``montecarlo.experiments`` (numpy modules: uci, classification, gram, attention).

Each case is one call with one bad argument, as a user would make it; it must end in a ValueError or
TypeError whose message names the argument (and, for ranges and choices, the allowed values), within
``TIME_LIMIT`` seconds and below ``MEMORY_LIMIT`` bytes of traced allocations (tracemalloc sees numpy's
buffers).  ``outcome_counts()`` classifies every case; ``python tests/test_experiments.py`` prints the
counts per outcome.  The table is built from argument kinds, so a new argument of a kind gets every bad
value of that kind.
"""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pytest

import montecarlo as mc
from montecarlo.experiments import attention as at
from montecarlo.experiments import classification as cl
from _fuzz import run_limited
from montecarlo.experiments import gram, uci

#: CPU seconds of the process per case (ITIMER_PROF: a loaded machine does not trip it), and a wall-clock guard
#: against a hang that burns no CPU.
TIME_LIMIT = 10.0
WALL_LIMIT = 900.0
MEMORY_LIMIT = 64 * 2**20

_g = np.random.default_rng(0)
XTR = _g.normal(size=(30, 3))
YTR = np.arange(30) % 3
XTE = _g.normal(size=(7, 3))
W3 = mc.sample_weights("simplex", 3, 4, rng=1)
SPLIT = uci.Split("toy", XTR, YTR, XTE, np.arange(7) % 3, XTE, np.arange(7) % 3, 3)
QKV = at.synthetic_qkv(12, 4, 0)
W4 = mc.sample_weights("simplex", 4, 6, rng=2)
DS = uci.Dataset("toy", np.column_stack([np.arange(40.0), _g.normal(size=40)]), np.arange(40) % 2, ("a", "b"),
                 Path("toy"))

_masked = np.ma.masked_array(XTR, mask=np.zeros_like(XTR, dtype=bool))
BAD = {
    "int": [(-1, ValueError), (0, ValueError), (1.5, TypeError), (True, TypeError), ("3", TypeError),
            (None, TypeError), (float("nan"), TypeError)],
    "int0": [(-1, ValueError), (2.0, TypeError), (False, TypeError), ("1", TypeError)],
    # None is the default (taken from the data or a module constant): every other bad value of int / real
    "int_opt": [(-1, ValueError), (0, ValueError), (1.5, TypeError), (True, TypeError), ("3", TypeError),
                (float("nan"), TypeError)],
    "real_opt": [(0.0, ValueError), (-1.0, ValueError), (float("nan"), ValueError), (float("inf"), ValueError),
                 ("1", TypeError), (True, TypeError), (1j, TypeError)],
    "draws": [(1, ValueError), (2.5, TypeError), ("10", TypeError), (10**12, ValueError)],
    "huge_m": [(10**9, ValueError)],
    "real": [(0.0, ValueError), (-1.0, ValueError), (float("nan"), ValueError), (float("inf"), ValueError),
             ("1", TypeError), (True, TypeError), (1j, TypeError)],
    "coupling": [("gauss", ValueError), (3, TypeError), (["iid"], TypeError)],
    "couplings": [(("iid", "favor"), ValueError), (("iid", 3), TypeError), ((), ValueError)],
    "datasets": [("banknote", TypeError), ((), ValueError), (["iris"], ValueError)],
    "rng": [(-1, ValueError), (1.5, TypeError), ("seed", TypeError), (np.random.RandomState(0), TypeError),
            (object(), TypeError)],
    "bool": [("False", TypeError), (1, TypeError), (None, TypeError), (np.array([True]), TypeError)],
    "matrix": [(np.ones((30, 3), dtype=bool), TypeError), (XTR + 1j, TypeError), (_masked, TypeError),
               ([["1", "2", "3"]] * 30, TypeError), (np.full((30, 3), np.nan), ValueError),
               (np.ones(3), ValueError), (np.ones((0, 3)), ValueError), (np.array([[object()] * 3] * 30), TypeError)],
    "labels": [(YTR + 0.5, TypeError), (YTR - 1, ValueError), (np.where(YTR == 0, 10**9, YTR), ValueError),
               (YTR.astype(str), TypeError), (YTR.astype(bool), TypeError), (YTR[:5], ValueError)],
    "weights": [(np.ones((4, 2)), ValueError), (W3.astype(bool), TypeError), (np.ma.masked_array(W3), TypeError),
                (np.full((4, 3), np.inf), ValueError), (np.ones(3), ValueError)],
    "dataset": [("iris", ValueError), (3, TypeError), (None, TypeError)],
    "split": [("banknote", TypeError), (None, TypeError), (XTR, TypeError)],
    "dataset_or_split": [("iris", ValueError), (None, TypeError), (XTR, TypeError)],
    "estimates": [("12", TypeError), (5, TypeError), ([0.5], TypeError), ([], ValueError)],
    "protocol": [("authors", ValueError), (1, TypeError)],
    "split_rng": [(-1, ValueError), ([], ValueError), ([1, 1], ValueError), ("0", TypeError), (1.5, TypeError)],
    "ints": [([], ValueError), ("12", TypeError), (5, TypeError), ([0], ValueError), ([1.5], TypeError)],
    "reals": [([], ValueError), ("12", TypeError), (5, TypeError), ([0.0], ValueError), ([float("nan")], ValueError)],
    "on": [("train", ValueError), (0, TypeError)],
    "kernel": [("laplace", ValueError), (None, TypeError)],
    "qkv": [(np.ones((12, 4), dtype=bool), TypeError), (QKV[0] + 1j, TypeError), (np.full((12, 4), np.nan), ValueError),
            (np.ones(4), ValueError), (np.ma.masked_array(QKV[0]), TypeError)],
    "attn_w": [(np.ones((6, 3)), ValueError), (W4.astype(bool), TypeError), (np.ones(4), ValueError),
               (np.ones((6, 0)), ValueError)],
    "uci_dir": [(3, TypeError), ("", ValueError), ("/nonexistent/uci", FileNotFoundError)],
    "fraction": [(0.0, ValueError), (1.0, ValueError), (-0.5, ValueError), ("0.1", ValueError), (True, ValueError)],
    "fraction0": [(1.0, ValueError), (-0.5, ValueError), ("0.1", ValueError), (True, ValueError)],
    "cap": [(0, ValueError), ("paper", ValueError), (1.5, ValueError), (True, ValueError)],
    "progress": [("yes", TypeError), (1, TypeError)],
    "batch": [([2], TypeError), ((0,), ValueError), ((1.5,), TypeError)],
    "data": [((QKV[0], QKV[1]), TypeError), ("qkv", TypeError)],
    "sigmas": [(["a"], TypeError), ("12", TypeError)],
}

# function, good keyword arguments, {argument: kind}
SPECS = [
    ("uci.resolve_uci_dir", uci.resolve_uci_dir, {}, {"path": "uci_dir"}),
    ("uci.load_dataset", uci.load_dataset, {"name": "banknote"}, {"name": "dataset", "uci_dir": "uci_dir"}),
    ("uci.load_all", uci.load_all, {"names": ["banknote"]}, {"uci_dir": "uci_dir", "warn": "bool", "require": "bool"}),
    ("uci.make_split", uci.make_split, {"dataset": DS}, {"protocol": "protocol", "seed": "int0",
                                                        "validation": "bool", "sigma_search": "bool"}),
    ("uci.split_seeds", uci.split_seeds, {"protocol": "resampled"}, {"protocol": "protocol", "seeds": "split_rng"}),
    ("uci.mean_v", uci.mean_v, {"split": SPLIT, "sigma": 1.0}, {"split": "split", "sigma": "real", "block": "int"}),
    ("Dataset.split", DS.split, {}, {"rng": "rng", "test_fraction": "fraction", "validation_fraction": "fraction0",
                                     "max_train": "cap", "max_test": "cap"}),
    ("Dataset.paper_split", DS.paper_split, {}, {"seed": "int0", "validation": "bool", "sigma_search": "bool"}),
    ("Split.padded", SPLIT.padded, {}, {"width": "int"}),
    ("kernel_regression_exact", cl.kernel_regression_exact, {"X_train": XTR, "y_train": YTR, "X_test": XTE},
     {"X_train": "matrix", "y_train": "labels", "sigma": "real", "n_classes": "int"}),
    ("kernel_regression_prf", cl.kernel_regression_prf, {"X_train": XTR, "y_train": YTR, "X_test": XTE, "W": W3},
     {"X_train": "matrix", "W": "weights", "y_train": "labels", "sigma": "real", "n_classes": "int"}),
    ("exact_accuracy", cl.exact_accuracy, {"split": SPLIT, "sigma": 1.0}, {"split": "split", "sigma": "real",
                                                                            "on": "on"}),
    ("prf_accuracy", cl.prf_accuracy, {"split": SPLIT, "coupling": "simplex", "m": 3, "n_draws": 4, "sigma": 1.0},
     {"split": "split", "coupling": "coupling", "m": "int", "n_draws": "draws", "sigma": "real", "rng": "rng",
      "on": "on", "return_samples": "bool"}),
    ("prf_accuracy m", cl.prf_accuracy, {"split": SPLIT, "coupling": "iid", "m": 3, "n_draws": 4, "sigma": 1.0},
     {"m": "huge_m"}),
    ("classification_curve", cl.classification_curve, {"dataset": SPLIT, "m_multipliers": (1,), "n_draws": 2,
                                                       "sigma": 1.0},
     {"dataset": "dataset_or_split", "couplings": "couplings", "m_multipliers": "ints", "n_draws": "draws", "rng": "rng",
      "sigma": "real", "pad_pow2": "bool", "progress": "progress"}),
    ("classification_curve (name)", cl.classification_curve, {"dataset": "banknote", "m_multipliers": (1,),
                                                              "n_draws": 2},
     {"protocol": "protocol", "split_rng": "split_rng", "uci_dir": "uci_dir"}),
    ("sigma_search", cl.sigma_search, {"dataset": SPLIT, "sigmas": (0.5, 1.0), "n_draws": 2, "m_multiplier": 1},
     {"dataset": "dataset_or_split", "sigmas": "reals", "coupling": "coupling", "m_multiplier": "int", "n_draws": "draws",
      "rng": "rng", "restrict": "bool"}),
    ("sigma_search (name)", cl.sigma_search, {"dataset": "banknote", "sigmas": (1.0,), "n_draws": 2,
                                              "m_multiplier": 1},
     {"protocol": "protocol", "split_rng": "int0", "sigmas": "sigmas"}),
    ("accuracy_table", cl.accuracy_table, {"couplings": ("iid",), "n_draws": 2, "datasets": ["banknote"]},
     {"couplings": "couplings", "m_multiplier": "int", "n_draws": "draws", "rng": "rng", "pad_pow2": "bool",
      "protocol": "protocol", "split_rng": "split_rng", "datasets": "datasets", "require": "bool",
      "progress": "progress", "uci_dir": "uci_dir"}),
    ("pool_splits", cl.pool_splits, {"estimates": [mc.Estimate(0.5, 0.1, 3)]}, {"estimates": "estimates"}),
    ("paper_table", cl.paper_table, {"which": 2}, {"which": "int"}),
    ("fig7_frobenius", gram.fig7_frobenius, {"m_values": (4,), "n_draws": 2},
     {"couplings": "couplings", "m_values": "ints", "n_draws": "draws", "rng": "rng", "data_rng": "rng"}),
    ("exact_gram", gram.exact_gram, {"X": XTR}, {"X": "matrix", "kernel": "kernel"}),
    ("gram_errors", gram.gram_errors, {"X": XTR, "W": W3}, {"X": "matrix", "W": "weights", "kernel": "kernel",
                                                          "relative": "bool"}),
    ("gram_frobenius_error", gram.gram_frobenius_error, {"X": XTR, "coupling": "simplex", "m": 3, "n_draws": 2},
     {"X": "matrix", "coupling": "coupling", "m": "int", "n_draws": "draws", "rng": "rng", "kernel": "kernel",
      "relative": "bool", "return_samples": "bool"}),
    ("frobenius_curve", gram.frobenius_curve, {"X": XTR, "m_values": (3,), "n_draws": 2},
     {"X": "matrix", "couplings": "couplings", "m_values": "ints", "n_draws": "draws", "rng": "rng",
      "kernel": "kernel"}),
    ("paper_gram_data", gram.paper_gram_data, {}, {"rng": "rng", "n_points": "int", "d": "int", "scale": "real"}),
    ("softmax_attention", at.softmax_attention, {"Q": QKV[0], "K": QKV[1], "V": QKV[2]},
     {"Q": "qkv", "K": "qkv", "causal": "bool", "scale": "real", "return_matrix": "bool"}),
    ("prf_attention", at.prf_attention, {"Q": QKV[0], "K": QKV[1], "V": QKV[2], "W": W4},
     {"Q": "qkv", "V": "qkv", "W": "attn_w", "causal": "bool", "scale": "real", "chunk": "int"}),
    ("prf_attention_matrix", at.prf_attention_matrix, {"Q": QKV[0], "K": QKV[1], "W": W4},
     {"K": "qkv", "W": "attn_w", "causal": "bool", "scale": "real"}),
    ("uniform_attention", at.uniform_attention, {"V": QKV[2]}, {"V": "qkv", "causal": "bool"}),
    ("sderf_attention", at.sderf_attention, {"Q": QKV[0], "K": QKV[1], "V": QKV[2], "W": W4, "a": np.zeros(4)},
     {"Q": "qkv", "V": "qkv", "W": "attn_w", "causal": "bool", "scale": "real", "chunk": "int"}),
    ("data_parameters", at.data_parameters, {"kind": "oprf", "Q": QKV[0], "K": QKV[1]},
     {"Q": "qkv", "K": "qkv", "scale": "real"}),
    ("synthetic_qkv", at.synthetic_qkv, {"n_seq": 5, "d_head": 4},
     {"n_seq": "int", "d_head": "int", "rng": "rng", "batch": "batch", "logit_std": "real", "n_clusters": "int",
      "d_model": "int"}),
    ("attention_errors", at.attention_errors, {"seq_lens": (8,), "m_values": (4,), "n_draws": 2, "d_head": 4},
     {"couplings": "couplings", "seq_lens": "ints", "m_values": "ints", "n_draws": "draws", "rng": "rng",
      "d_head": "int_opt", "causal": "bool", "logit_std": "real_opt", "matrix_max_len": "int0", "data": "data",
      "progress": "progress", "data_rng": "rng"}),
    ("attention_scan", at.attention_scan, {"seq_lens": (8,), "logit_stds": (0.1,), "m_values": (4,),
                                           "n_draws": 2, "d_head": 4},
     {"couplings": "couplings", "seq_lens": "ints", "logit_stds": "reals", "m_values": "ints", "n_draws": "draws",
      "rng": "rng", "data_rng": "rng"}),
    ("attention_scan_plan", at.attention_scan_plan, {"seq_lens": (8,), "logit_stds": (0.1,), "m_values": (4,),
                                                     "n_draws": 2, "d_head": 4},
     {"couplings": "couplings", "seq_lens": "ints", "logit_stds": "reals", "m_values": "ints", "n_draws": "draws",
      "rng": "rng", "data_rng": "rng"}),
    ("curve_plan", cl.curve_plan, {"dataset": SPLIT, "m_multipliers": (1,), "n_draws": 2, "sigma": 1.0},
     {"dataset": "dataset_or_split", "couplings": "couplings", "m_multipliers": "ints", "n_draws": "draws", "rng": "rng",
      "sigma": "real", "pad_pow2": "bool"}),
]

_OPTIONAL_NONE_OK = {("synthetic_qkv", "rng"), ("prf_accuracy", "rng"), ("gram_frobenius_error", "rng"),
                     ("paper_gram_data", "rng"), ("classification_curve", "rng"), ("sigma_search", "rng"),
                     ("accuracy_table", "rng"), ("attention_errors", "rng"), ("attention_scan", "rng"),
                     ("attention_scan_plan", "rng"), ("curve_plan", "rng"), ("curve_plan", "sigma"),
                     ("frobenius_curve", "rng"), ("Split.padded", "width"), ("kernel_regression_exact", "n_classes"),
                     ("kernel_regression_prf", "n_classes"), ("uci.mean_v", "sigma"), ("exact_accuracy", "sigma"),
                     ("prf_accuracy", "sigma"), ("classification_curve", "sigma"), ("softmax_attention", "scale"),
                     ("prf_attention", "scale"), ("prf_attention_matrix", "scale"), ("sderf_attention", "scale"),
                     ("data_parameters", "scale")}
# arguments whose allowed minimum is not 1 (the generic int kind tests -1 and 0)
_ZERO_OK = {("Split.padded", "width"), ("uci.mean_v", "block")}


def _cases():
    out = []
    for label, fn, good, args in SPECS:
        for arg, kind in args.items():
            for value, exc in BAD[kind]:
                if value is None and (label, arg) in _OPTIONAL_NONE_OK:
                    continue
                if (label, arg) == ("Split.padded", "width") and value in (-1, 0):
                    exc = ValueError
                out.append((f"{label}({arg}={_short(value)})", fn, {**good, arg: value}, exc, arg))
    return out


def _short(value):
    """A test id that is the same in every process (no memory addresses: pytest-xdist compares ids)."""
    text = repr(value)
    if " at 0x" in text:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 30 else text[:27] + "..."


CASES = _cases()


def run_case(fn, kwargs):
    """('raised', exception, seconds, peak bytes) or ('returned', value, ...) or ('timeout', ...)."""
    return run_limited(fn, (), kwargs, cpu_seconds=TIME_LIMIT, wall_seconds=WALL_LIMIT)


def classify(case):
    """The outcome of one case: 'named ValueError', 'named TypeError', or what went wrong."""
    _, fn, kwargs, expected, arg = case
    kind, value, seconds, peak = run_case(fn, kwargs)
    if kind == "timeout":
        return "timeout"
    if peak > MEMORY_LIMIT:
        return "over the memory limit"
    if kind == "returned":
        return "returned a value"
    if isinstance(value, FileNotFoundError) and expected is FileNotFoundError:
        return "named FileNotFoundError" if arg in str(value) or "directory" in str(value) else "unnamed error"
    if not isinstance(value, (ValueError, TypeError)):
        return f"other exception ({type(value).__name__})"
    names = {arg, arg.rstrip("s"), {"path": "uci_dir", "seeds": "split_rng", "name": "dataset"}.get(arg, arg)}
    if not any(n in str(value) for n in names):
        return "unnamed error"
    return f"named {'TypeError' if isinstance(value, TypeError) else 'ValueError'}"


def outcome_counts():
    return collections.Counter(classify(c) for c in CASES)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_by_name(case):
    outcome = classify(case)
    assert outcome.startswith("named "), (case[0], outcome, run_case(case[1], case[2])[1])


def test_the_table_covers_every_public_function():
    names = {label.split(" ")[0] for label, *_ in SPECS}
    for module, prefix in ((cl, ""), (gram, ""), (at, "")):
        for fn in module.__dict__.values():
            if callable(fn) and getattr(fn, "__module__", "") == module.__name__ and not fn.__name__.startswith("_") \
                    and isinstance(fn, type(run_case)) and fn.__name__ not in ("add_table_arguments", "run_table",
                                                                              "causal_chunk", "with_effort",
                                                                              "rel_error", "scan_kinds",
                                                                              "paper_gap_attribution",  # none
                                                                              # a sweep's unit: frobenius_curve
                                                                              # checks its arguments
                                                                              "frobenius_unit"):
                assert prefix + fn.__name__ in names, fn.__name__
    assert len(CASES) > 300


if __name__ == "__main__":
    import warnings

    warnings.simplefilter("ignore")
    counts = outcome_counts()
    print(f"{len(CASES)} cases over {len(SPECS)} entry points:")
    for outcome, n in counts.most_common():
        print(f"  {n:4d}  {outcome}")
