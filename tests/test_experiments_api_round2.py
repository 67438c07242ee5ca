"""Round 2 of the experiments' Python API review: the paired IID budget, Split validation, accuracy_table's
sigmas keys, TrainConfig validation and distinct arms, NaN-safe Fig. 8 verdicts, attention_errors' record of
the caller's data.  Every test names the old behaviour it would have caught."""

import hashlib
import tracemalloc

import numpy as np
import pytest

from montecarlo._checks import MAX_ELEMENTS, AllocationError
from montecarlo.experiments import attention as at
from montecarlo.experiments import classification as cl
from montecarlo.experiments import gram, sweeps, uci

# ---------------------------------------------------------------------------
# 1. Paired IID draws: the budget is what is allocated (m < d costs O(m d), not a d x d block)


def test_paired_iid_with_m_below_d_is_not_refused_and_costs_o_m_d_memory():
    """d = 20000, m = 8, 25 draws: the old check counted n_draws * ceil(m/d) * d * d = 1e10 entries
    (> MAX_ELEMENTS = 2.7e8: AllocationError) although only (25, 8, 20000) = 4e6 numbers are drawn.  Now it
    runs; the peak traced memory is a few times the result (8 bytes * 4e6 = 32 MB), far below one d x d
    block (3.2 GB), and the IID rows keep the common random numbers: row i of a draw has the norm of
    orthogonal row i (both are nu_i times a unit vector)."""
    d, m, n = 20000, 8, 25
    assert n * 1 * d * d > MAX_ELEMENTS  # the old check's count: refused
    tracemalloc.start()
    try:
        w = sweeps.paired_weights(["iid", "orthogonal"], d, m, n, 0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert w["iid"].shape == (n, m, d)
    assert peak < 8 * 8 * n * m * d < 8 * d * d
    assert np.allclose(np.linalg.norm(w["iid"], axis=-1), np.linalg.norm(w["orthogonal"], axis=-1), rtol=1e-12)
    # the rows are not the orthogonal ones (the IID law, not a copy)
    assert not np.allclose(w["iid"][:, 1:], w["orthogonal"][:, 1:])


def test_frobenius_curve_with_paired_iid_and_m_below_d_runs():
    """The finding's second call: the same AllocationError came from gram.frobenius_curve."""
    X = np.random.default_rng(0).normal(size=(4, 20000)) * 0.005
    res = gram.frobenius_curve(X, ("iid", "simplex"), (8,), 25, n_jobs=1)
    assert res.mean["iid"].shape == (1,) and np.all(np.isfinite(res.mean["iid"]))


def test_paired_iid_budget_still_refuses_an_oversized_result_before_drawing():
    """n_draws * m * d = 2**29 > MAX_ELEMENTS: refused by name (no 4 GiB allocation)."""
    assert 1 * (1 << 14) * (1 << 15) > MAX_ELEMENTS
    with pytest.raises(AllocationError, match="IID weights"):
        sweeps.paired_weights(["iid"], 1 << 15, 1 << 14, 1, 0)


#: SHA-256 of paired_weights(['iid', 'orthogonal'], d, m, n, seed)['iid'].tobytes() computed with the code
#: before this change (loaded from git HEAD): the draws did not change.
_IID_SHA256 = {
    (6, 14, 3, 7): "0e2e67b3612751c5e584874020ebeecff4b77c3cfda38c6ade44202463320d4a",
    (8, 3, 4, 11): "fc1bf2bcf9ab5b7c28e0376b2b9e801b6c429a29740c44f4afa41b8182143620",
    (5, 10, 2, 3): "dce48553b2b060db416620885bdd45dc946a404366edebc81d659d714b407a5d",
}


@pytest.mark.parametrize("key", sorted(_IID_SHA256))
def test_paired_iid_draws_are_bit_identical_to_before(key):
    """A truncated last block, m < d and full blocks: the same bytes as before the budget fix (common random
    numbers intact).  A changed stream (e.g. another seed) gives another hash."""
    d, m, n, seed = key
    w = sweeps.paired_weights(["iid", "orthogonal"], d, m, n, seed)["iid"]
    assert hashlib.sha256(w.tobytes()).hexdigest() == _IID_SHA256[key]
    other = sweeps.paired_weights(["iid"], d, m, n, seed + 1)["iid"]
    assert hashlib.sha256(other.tobytes()).hexdigest() != _IID_SHA256[key]


# ---------------------------------------------------------------------------
# 2. A caller-built Split is validated once, on construction


def _parts():
    r = np.random.default_rng(0)
    return r.normal(size=(40, 3)), r.integers(0, 2, 40), r.normal(size=(10, 3)), r.integers(0, 2, 10)


def test_a_valid_custom_split_works_and_integer_valued_float_labels_become_int():
    Xtr, ytr, Xte, yte = _parts()
    s = uci.Split("mine", Xtr, ytr.astype(float), Xte, yte, None, None, 2)
    assert s.y_train.dtype == np.int64 and np.array_equal(s.y_train, ytr) and s.protocol == "custom"
    est = cl.prf_accuracy(s, "simplex", 3, 4, sigma=1.0, rng=0)
    assert 0.0 <= est.mean <= 1.0 and est.n == 4


@pytest.mark.parametrize("field, change, exc, match", [
    ("X_test", "nan", ValueError, r"Split\.X_test must be finite"),
    ("y_train", "label5", ValueError, r"Split\.y_train holds class index 5 >= n_classes = 2"),
    ("y_test", "half", TypeError, r"Split\.y_test must hold integer class indices"),
    ("n_classes", "str", TypeError, r"Split\.n_classes must be an integer"),
    ("y_test", "short", ValueError, r"Split\.y_test must be a 1-D array of 10 class indices"),
    ("X_test", "narrow", ValueError, r"Split\.X_test must have shape \(N, 3\)"),
    ("X_val", "val_only", ValueError, r"Split\.X_val and Split\.y_val must both be None or both be given"),
    ("protocol", "protocol", ValueError, r"Split\.protocol must be one of 'resampled', 'paper', 'custom'"),
    ("name", "name", TypeError, r"Split\.name must be a str"),
])
def test_a_bad_split_field_is_refused_naming_it(field, change, exc, match):
    """The finding's cases: before, a NaN test input gave a number, label 5 with n_classes = 2 was accepted,
    y_test + 0.5 gave accuracy 0.0 silently, n_classes='2' was accepted and a short y_test or narrow X_test
    gave raw numpy errors."""
    Xtr, ytr, Xte, yte = _parts()
    kw = dict(name="mine", X_train=Xtr, y_train=ytr, X_test=Xte, y_test=yte, X_val=None, y_val=None, n_classes=2)
    if change == "nan":
        kw["X_test"] = Xte.copy()
        kw["X_test"][1, 1] = np.nan
    elif change == "label5":
        kw["y_train"] = ytr.copy()
        kw["y_train"][3] = 5
    elif change == "half":
        kw["y_test"] = yte + 0.5
    elif change == "str":
        kw["n_classes"] = "2"
    elif change == "short":
        kw["y_test"] = yte[:5]
    elif change == "narrow":
        kw["X_test"] = Xte[:, :2]
    elif change == "val_only":
        kw["X_val"] = Xte
    elif change == "protocol":
        kw["protocol"] = "mine"
    elif change == "name":
        kw["name"] = 3
    with pytest.raises(exc, match=match):
        uci.Split(**kw)


def test_the_package_own_splits_still_build_and_pad():
    """make_split (both protocols, with validation) and padded() construct Splits through the same check."""
    s = uci.make_split("banknote", "resampled", 0, validation=True)
    assert s.y_val is not None and s.protocol == "resampled"
    p = s.padded()
    assert p.d == 4 and p.X_val.shape[1] == 4
    assert uci.make_split("banknote", "paper").protocol == "paper"


# ---------------------------------------------------------------------------
# 3. accuracy_table: a sigmas key that is not a dataset of the table


@pytest.mark.parametrize("sigmas, datasets, match", [
    ({"banknot": 0.5}, None, r"sigmas has key\(s\) 'banknot'"),
    ({"car": 0.5}, ["banknote"], r"sigmas has key\(s\) 'car' that are not datasets of the table \(its datasets: "
                                 r"banknote\)"),
    ({"banknote": -1.0}, ["banknote"], r"sigmas\['banknote'\] must be a finite real > 0"),
])
def test_accuracy_table_refuses_unknown_sigmas_keys(sigmas, datasets, match):
    """Before: the misspelt key was ignored and the row used the paper's sigma (1.06446)."""
    with pytest.raises(ValueError, match=match):
        cl.accuracy_table(sigmas=sigmas, datasets=datasets, n_draws=2)


def test_accuracy_table_uses_a_given_sigma():
    t = cl.accuracy_table(("iid",), sigmas={"banknote": 0.5}, datasets=["banknote"], n_draws=2,
                          protocol="paper", n_jobs=1)
    assert t.rows["banknote"]["sigma"] == 0.5 != uci.PAPER_SIGMAS["banknote"]


# ---------------------------------------------------------------------------
# 5. TrainConfig and the arms of performer_train

pt = pytest.importorskip("montecarlo.experiments.performer_train")
BASE = dict(train_size=40, epochs=1, n_features=8, d_model=8, layers=1)


@pytest.mark.parametrize("field, value, exc", [
    ("batch_size", 0, ValueError),      # was ZeroDivisionError in train_one
    ("batch_size", -4, ValueError),     # was UnboundLocalError 'loss'
    ("threads", 0, ValueError),         # was a torch RuntimeError
    ("epochs", 2.5, TypeError),         # was a numpy TypeError
    ("epochs", 0, ValueError),          # was an empty result and table
    ("lr", 0.0, ValueError),
    ("lr", float("nan"), ValueError),
    ("d_model", 1, ValueError),
    ("heads", 3, ValueError),           # 8 is not a multiple of 3
    ("train_size", 5, ValueError),
    ("redraw_every", "never", ValueError),
    ("redraw_every", 0, ValueError),
    ("layers", True, TypeError),
])
def test_trainconfig_refuses_bad_fields_naming_them(field, value, exc):
    with pytest.raises(exc, match=rf"TrainConfig\.{field}"):
        pt.TrainConfig(**{**BASE, field: value})


def test_trainconfig_accepts_the_cli_range_and_normalises_numpy_ints():
    c = pt.TrainConfig(**{**BASE, "epochs": np.int64(2), "redraw_every": "epoch"})
    assert type(c.epochs) is int and c.epochs == 2 and c.redraw_every == "epoch"
    assert pt.TrainConfig(redraw_every=np.int64(10)).redraw_every == 10
    assert pt.TrainConfig() == pt.TrainConfig(epochs=10, batch_size=32, lr=3e-3, d_model=32, heads=2, layers=2,
                                              n_features=32, train_size=None, redraw_every=None, threads=1)


def test_train_arms_refuses_duplicate_arms_and_a_non_config():
    """Before: ['prf-simplex', 'prf-simplex'] trained twice and collapsed into one result entry."""
    with pytest.raises(ValueError, match=r"arms must not repeat an arm.*prf-simplex repeated"):
        pt.train_arms(["prf-simplex", "prf-simplex"], 1, pt.TrainConfig(**BASE))
    with pytest.raises(TypeError, match="cfg must be a TrainConfig"):
        pt.train_arms(["prf-simplex"], 1, dict(BASE))
    with pytest.raises(TypeError, match="arms must be None or a sequence"):
        pt.train_arms("prf-simplex", 1, pt.TrainConfig(**BASE))


# ---------------------------------------------------------------------------
# 7. Fig. 8 verdicts: symmetric and NaN-safe


class _Curve:
    def __init__(self, z_iid, z_orf):
        self.z_iid, self.z_orf = np.array(z_iid, dtype=float), np.array(z_orf, dtype=float)

    def z(self, a, b):
        assert a == "simplex"
        return self.z_iid if b == "iid" else self.z_orf


def test_fig8_verdicts_do_not_depend_on_the_order_of_a_nan():
    """Before: min(5, nan) = 5 gave 'best' while min(nan, 5) = nan gave 'tied'.  A NaN resolves nothing:
    'best' needs both wins, 'behind' one resolved loss."""
    from figures.downstream import RESOLVED_Z, fig8_verdicts

    nan, z = np.nan, RESOLVED_Z
    cases = {(5.0, nan): "tied", (nan, -5.0): "behind", (nan, nan): "tied", (5.0, 5.0): "best",
             (5.0, -5.0): "behind", (z, z): "best", (-z, 0.0): "behind", (2.9, 10.0): "tied"}
    for (a, b), want in cases.items():
        got = fig8_verdicts(_Curve([a, b], [b, a]))
        assert got == [want, want], ((a, b), got)


# ---------------------------------------------------------------------------
# 8. attention_errors records no synthetic logit scale for the caller's data


def test_attention_errors_with_data_refuses_logit_std_and_records_none():
    """Before: data made with logit_std 2.0 and logit_std=0.1 passed gave r.logit_std == 0.1 and a first line
    'logit std 0.1 ...'."""
    Q, K, V = at.synthetic_qkv(32, 8, 0, logit_std=2.0)
    with pytest.raises(ValueError, match="logit_std must be None when data is given"):
        at.attention_errors(("simplex",), (32,), (8,), 3, data=(Q, K, V), logit_std=0.1)
    with pytest.raises(ValueError, match="d_head must be None or the data's width 8"):
        at.attention_errors(("simplex",), (32,), (8,), 3, data=(Q, K, V), d_head=4)
    r = at.attention_errors(("simplex",), (32,), (8,), 3, data=(Q, K, V), d_head=8)
    assert r.logit_std is None
    first = r.format().splitlines()[0]
    assert first.startswith("the caller's (Q, K, V) data") and "logit std 0.1" not in first


def test_attention_errors_synthetic_default_is_unchanged():
    """Without data the default logit scale is DEFAULT_LOGIT_STD, the same numbers as passing it."""
    a = at.attention_errors(("simplex",), (32,), (8,), 3, rng=1, d_head=8, matrix_max_len=0)
    b = at.attention_errors(("simplex",), (32,), (8,), 3, rng=1, d_head=8, matrix_max_len=0,
                            logit_std=at.DEFAULT_LOGIT_STD)
    assert a.logit_std == at.DEFAULT_LOGIT_STD and a.output_mean == b.output_mean
    assert a.format().startswith(f"logit std {at.DEFAULT_LOGIT_STD:g}")
