"""scikit-learn's conventions for the transformers of montecarlo.kernel_approximation, against
sklearn.kernel_approximation.RBFSampler (issue 22): data far larger than the bandwidth (a warning that names
the scale and the remedy, with the digits numbers), sparse input equal to dense, RandomState accepted,
threads bounded by threadpoolctl / OMP_NUM_THREADS, and memory O(N d + d m + N m) (a measured peak, with
the (N, d, m) alternative failing the same bound)."""

import os
import subprocess
import sys
import textwrap
import threading
import tracemalloc
import warnings

import numpy as np
import pytest

sklearn = pytest.importorskip("sklearn")
sparse = pytest.importorskip("scipy.sparse")
threadpoolctl = pytest.importorskip("threadpoolctl")

from sklearn.base import clone  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.linear_model import RidgeClassifier  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

import montecarlo as mc  # noqa: E402
from montecarlo.kernel_approximation import (  # noqa: E402
    FeatureUnderflowWarning,
    PositiveRandomFeatures,
    RandomFourierFeatures,
)
from theory import feature_kinds  # noqa: E402

#: The positive kinds whose parameters (if any) fit chooses: every one without parameters.
KINDS = tuple(k for k in feature_kinds.names(positive=True) if not feature_kinds.get(k).parameters)


def _estimators(m=7, **kw):
    return [PositiveRandomFeatures(n_components=m, kind=k, **kw) for k in KINDS] + [
        RandomFourierFeatures(n_components=m, **kw)]


# ---------------------------------------------------------------------------
# (a) data far larger than the bandwidth


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return train_test_split(X, y, test_size=0.3, random_state=0)


def _zero_rows(F):
    return float(np.mean(~F.any(axis=1)))


def test_raw_digits_warn_with_the_scale_and_the_remedy(digits):
    """Raw digits at gamma = 0.5 (2 gamma |x|^2 has median about 3800): every feature of every row
    underflows (100% zero rows, measured) and transform says so, naming the fraction, the median scale and
    what to do; gamma='scale' and StandardScaler give no zero row and no warning (power: the warning is not
    raised on every call).  Numbers of the decision (module docstring): ridge accuracy 0.08 (chance) on the
    raw features, 0.97 with gamma='scale'."""
    Xtr, Xte, ytr, yte = digits
    est = PositiveRandomFeatures(n_components=500, random_state=0).fit(Xtr)
    with pytest.warns(FeatureUnderflowWarning) as rec:
        F = est.transform(Xte)
    msg = str(rec[0].message)
    assert _zero_rows(F) == 1.0
    assert f"{len(Xte)} of {len(Xte)} rows (100%)" in msg and "median 3" in msg
    assert "StandardScaler" in msg and "gamma='scale' would be 0.000" in msg and "log_transform" in msg
    assert rec[0].filename == __file__  # points at the caller, not into the library
    with warnings.catch_warnings():
        warnings.simplefilter("error", FeatureUnderflowWarning)
        scaled = PositiveRandomFeatures(n_components=500, gamma="scale", random_state=0).fit(Xtr)
        G = scaled.transform(Xte)
        std = make_pipeline(StandardScaler(), PositiveRandomFeatures(n_components=500, gamma=1 / 64,
                                                                     random_state=0)).fit(Xtr)
        H = std.transform(Xte)
    assert _zero_rows(G) == 0.0 and _zero_rows(H) == 0.0
    with pytest.warns(FeatureUnderflowWarning, match=f"{len(Xtr)} of {len(Xtr)} rows"):
        Ftr = est.transform(Xtr)
    acc = lambda A, B: RidgeClassifier(alpha=1e-3).fit(A, ytr).score(B, yte)  # noqa: E731
    assert acc(Ftr, F) < 0.15
    assert acc(scaled.transform(Xtr), G) > 0.95


@pytest.mark.parametrize("kind", KINDS)
def test_underflow_warning_only_for_whole_rows(kind):
    """A row with some zero features is normal (no warning); a row with every feature 0 warns, with the
    count.  log_transform never warns (its values are finite)."""
    X = np.array([[0.1, 0.2, -0.1], [40.0, 40.0, 40.0]])
    est = PositiveRandomFeatures(n_components=5, kind=kind, random_state=0).fit(X[:1])
    with warnings.catch_warnings():
        warnings.simplefilter("error", FeatureUnderflowWarning)
        assert np.all(est.transform(X[:1]) > 0)
        assert np.all(np.isfinite(est.log_transform(X)))
    with pytest.warns(FeatureUnderflowWarning, match=r"1 of 2 rows \(50%\)"):
        est.transform(X)
    with pytest.warns(FeatureUnderflowWarning, match="in float32"):
        est.transform(np.full((1, 3), 7.0, dtype=np.float32))  # 2 gamma |x|^2 = 147 > 103: float32 underflows
    assert np.all(est.transform(np.full((1, 3), 7.0)) > 0)  # ... float64 does not


# ---------------------------------------------------------------------------
# (b) sparse input


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_sparse_equals_dense(fmt):
    """CSR and CSC input give the dense results (rtol 1e-12) for every kind, for transform, log_transform
    and gamma='scale' (whose sparse variance is RBFSampler's E[x^2] - E[x]^2), and keep float32.  The two
    paths are computed differently (scipy's sparse product and X.multiply(X) against BLAS and einsum)."""
    rng = np.random.default_rng(1)
    D = rng.standard_normal((30, 9)) * (rng.random((30, 9)) < 0.3)
    D[3] = 0.0  # an empty row
    S = sparse.csr_matrix(D).asformat(fmt)
    for est in _estimators(11, gamma="scale", random_state=4):
        dense, sp = clone(est).fit(D), clone(est).fit(S)
        assert sp.gamma_ == pytest.approx(dense.gamma_, rel=1e-12)
        assert np.array_equal(sp.weights_, dense.weights_)
        out = sp.transform(S)
        assert type(out) is np.ndarray and out.shape == (30, dense._n_features_out)
        np.testing.assert_allclose(out, dense.transform(D), rtol=1e-12, atol=1e-300)
        if hasattr(est, "log_transform"):
            np.testing.assert_allclose(sp.log_transform(S), dense.log_transform(D), rtol=1e-12)
        f32 = sp.transform(S.astype(np.float32))
        assert f32.dtype == np.float32
        np.testing.assert_allclose(f32, dense.transform(D), rtol=2e-5, atol=1e-6)
    sparray = sparse.csr_array(D)  # the sparse-array interface too, and other formats via CSR
    est = PositiveRandomFeatures(n_components=5, random_state=0).fit(D)
    np.testing.assert_allclose(est.transform(sparray), est.transform(D), rtol=1e-12)
    np.testing.assert_allclose(est.transform(sparse.coo_matrix(D)), est.transform(D), rtol=1e-12)


def test_sparse_in_a_pipeline():
    X = sparse.random(80, 20, density=0.2, random_state=0, format="csr")
    y = (np.asarray(X.sum(axis=1)).ravel() > np.median(np.asarray(X.sum(axis=1)))).astype(int)
    for est in _estimators(40, random_state=0):
        model = make_pipeline(est, RidgeClassifier()).fit(X, y)
        assert model.score(X, y) > 0.6


# ---------------------------------------------------------------------------
# (c) RandomState


@pytest.mark.parametrize("cls", [PositiveRandomFeatures, RandomFourierFeatures])
def test_random_state_accepts_a_legacy_randomstate(cls):
    """A RandomState is accepted as sklearn.utils.check_random_state accepts it: fit draws one 63-bit seed
    from it (documented conversion, checked against sample_weights with that seed), so successive fits
    advance it and RandomState(7) reproduces the sequence; clone and pickle keep it.  Bad seeds are still
    refused, naming the argument and the accepted types."""
    X = np.random.default_rng(0).standard_normal((4, 5)) * 0.3
    est = cls(n_components=6, random_state=np.random.RandomState(7))
    w1, w2 = est.fit(X).weights_, est.fit(X).weights_
    assert not np.array_equal(w1, w2)  # the RandomState advanced
    ref = np.random.RandomState(7)
    for w in (w1, w2):
        seed = int(ref.randint(0, 2**63 - 1, dtype=np.int64))
        assert np.array_equal(w, mc.sample_weights(est.coupling, 5, 6, rng=np.random.default_rng(seed)))
    again = cls(n_components=6, random_state=np.random.RandomState(7)).fit(X).weights_
    assert np.array_equal(again, w1)
    c = clone(cls(n_components=6, random_state=np.random.RandomState(7)))
    assert np.array_equal(c.fit(X).weights_, w1)
    with pytest.raises(TypeError, match="'random_state' parameter of .* must be None, an int in the range "
                                        r"\[0, inf\), .*RandomState'\. Got '0'"):
        cls(random_state="0").fit(X)


# ---------------------------------------------------------------------------
# (d) threads


def _python_threads_used(func):
    """Idents of the threads that ran Python code during ``func()`` (threads started by the threading module
    get the profile hook, so a pool's workers are seen), and func's result."""
    seen = set()

    def prof(frame, event, arg):
        seen.add(threading.get_ident())

    threading.setprofile(prof)
    try:
        out = func()
    finally:
        threading.setprofile(None)
    seen.discard(threading.get_ident())
    return seen, out


def test_threadpool_limits_one_means_one_thread():
    """Under threadpool_limits(1) a large transform (N x m = 8e5 entries, above the parallel threshold) runs
    in the calling thread only (BLAS is limited by threadpoolctl itself), with the same features.  Power:
    without the limit, on a machine where threadpoolctl reports several BLAS threads, the same transform
    uses worker threads."""
    X = np.random.default_rng(0).standard_normal((4000, 16)) * 0.2
    for est in _estimators(200, random_state=0):
        est.fit(X)
        with threadpoolctl.threadpool_limits(1):
            limited, a = _python_threads_used(lambda: est.transform(X))
        assert limited == set()
        free, b = _python_threads_used(lambda: est.transform(X))
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-300)
        blas = min((p["num_threads"] for p in threadpoolctl.threadpool_info()), default=1)
        if blas > 1:
            assert len(free) >= 1


def test_omp_num_threads_is_respected():
    """In a fresh interpreter with OMP_NUM_THREADS=1 (and no other thread variable), threadpoolctl reports
    one thread per pool and a large transform starts no worker thread."""
    code = textwrap.dedent("""
        import threading
        import numpy as np
        import threadpoolctl
        from montecarlo.kernel_approximation import PositiveRandomFeatures
        X = np.random.default_rng(0).standard_normal((4000, 16)) * 0.2
        est = PositiveRandomFeatures(n_components=200, random_state=0).fit(X)
        seen = set()
        threading.setprofile(lambda *a: seen.add(threading.get_ident()))
        est.transform(X)
        threading.setprofile(None)
        seen.discard(threading.get_ident())
        print(sorted({p["num_threads"] for p in threadpoolctl.threadpool_info()}), len(seen))
    """)
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS", "GOTO_NUM_THREADS")}
    env["OMP_NUM_THREADS"] = "1"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("]")[0] + "]" == "[1]" and res.stdout.split("]")[1].strip() == "0", res.stdout


# ---------------------------------------------------------------------------
# (f) memory


def _peak(func):
    """Peak bytes newly allocated (tracemalloc: numpy reports its buffers) while ``func()`` runs."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        func()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("n, d, m", [(128, 2**13, 16), (1, 2**18, 2)])
def test_memory_is_linear_in_the_inputs_and_outputs(n, d, m):
    """fit and transform each peak below 5 (N d + d m + N w m) float64 entries (measured: at most 0.4 in
    the first geometry; 4.0 d m in the second, the simplex block's QR and sign fold in sample_weights), so
    the wide case of issue 22, (1, 2^27) with m = 2, needs O(d m), not an (N, d, m) intermediate.  Power: in
    the first geometry a map through the (N, d, m) broadcast product peaks at 14 such units and fails the
    same bound."""
    X = np.random.default_rng(0).standard_normal((n, d)) / np.sqrt(d)
    for est in _estimators(m, random_state=0):
        fit_peak = _peak(lambda: est.fit(X))
        width = est._n_features_out // m
        bound = 5 * (n * d + d * m + n * width * m) * 8
        assert fit_peak < bound, (est, fit_peak / bound)
        assert _peak(lambda: est.transform(X)) < bound
        assert _peak(lambda: est.transform(X.astype(np.float32))) < bound + X.size * 4
    if n > 1:
        W = est.weights_
        naive = _peak(lambda: np.cos((X[:, :, None] * W.T[None]).sum(axis=1)))
        assert naive > 5 * (n * d + d * m + n * 2 * m) * 8


def test_memory_error_names_the_cause(monkeypatch):
    """A MemoryError while drawing the projections (the machine's limit, below MAX_ELEMENTS) becomes one
    that names n_components, d, the bytes of weights_ and what to do."""
    import montecarlo.kernel_approximation as ka

    def fail(*args, **kwargs):
        raise MemoryError("Unable to allocate 2.00 GiB for an array with shape (1, 134217728, 2)")

    monkeypatch.setattr(ka, "sample_weights", fail)
    with pytest.raises(MemoryError, match=r"weights_, the \(n_components, d\) = \(2, 5\).*GiB.*fewer n_components"):
        PositiveRandomFeatures(n_components=2).fit(np.zeros((1, 5)))


# ---------------------------------------------------------------------------
# messages


def test_strings_in_x_name_the_cause():
    X = np.array([["a", "1.0"], ["0.5", "2"]], dtype=object)
    for est in _estimators(3):
        with pytest.raises(ValueError, match="X must hold numbers.*could not convert string to float: 'a'.*"
                                             "OneHotEncoder"):
            est.fit(X)
