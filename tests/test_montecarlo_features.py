"""Feature maps: exact identities (no sampling error) and bad input.

Unbiasedness is statistical and lives in ``test_montecarlo_estimators.py``;
here every check is an algebraic identity of eq. ``def_prf`` / ``rffdef2``
for a fixed W, compared with an independent scalar computation.
"""

import math

import numpy as np
import pytest

import montecarlo as mc


def _data(n, d, scale=0.5, seed=0):
    return np.random.default_rng(seed).standard_normal((n, d)) * scale


def test_prf_gaussian_matches_definition():
    """phi(z) = m^{-1/2} exp(-|z|^2) exp(W z), computed entrywise with math.exp (eq. def_prf)."""
    d, m = 5, 7
    w = mc.sample_weights("simplex", d, m, rng=1)
    x = _data(3, d)
    phi = mc.prf_features(x, w)
    for i in range(3):
        for j in range(m):
            ref = math.exp(-float(x[i] @ x[i]) + float(w[j] @ x[i])) / math.sqrt(m)
            assert phi[i, j] == pytest.approx(ref, rel=1e-13)
    soft = mc.prf_features(x, w, kernel="softmax")
    ratio = soft / phi
    assert np.allclose(ratio, np.exp(0.5 * np.sum(x * x, axis=1))[:, None], rtol=1e-13)


def test_rff_matches_definition_and_kernel_identity():
    """phi(x).phi(y) = mean_i cos(w_i.(x-y)) for any W (eq. rffdef2), interleaved sin/cos order."""
    d, m = 6, 9
    w = mc.sample_weights("orthogonal", d, m, rng=2)
    x = _data(4, d, 1.0)
    phi = mc.rff_features(x, w)
    assert phi.shape == (4, 2 * m)
    assert phi[0, 0] == pytest.approx(math.sin(float(w[0] @ x[0])) / math.sqrt(m), rel=1e-13)
    assert phi[0, 1] == pytest.approx(math.cos(float(w[0] @ x[0])) / math.sqrt(m), rel=1e-13)
    k = phi @ phi.T
    ref = np.mean(np.cos((x[:, None, :] - x[None, :, :]) @ w.T), axis=-1)
    assert np.max(np.abs(k - ref)) < 1e-13
    assert np.allclose(np.diag(k), 1.0)


def test_large_inputs_do_not_overflow_and_stabilised_form():
    """|x| = 1000 (d = 64): naive exp(Wx) overflows; the combined exponent does not; 'row' keeps ratios."""
    d, m = 64, 128
    w = mc.sample_weights("simplex", d, m, rng=3)
    x = _data(3, d, 1.0, seed=4)
    x *= 1000.0 / np.linalg.norm(x, axis=1, keepdims=True)
    with np.errstate(over="ignore"):
        naive = np.exp(x @ w.T)
    assert np.any(np.isinf(naive))  # the failure mode being guarded against
    with np.errstate(over="raise"):  # no overflow inside the feature map
        logphi = mc.prf_log_features(x, w)
        phi = mc.prf_features(x, w)
        phi_s, off = mc.prf_features(x, w, stabilize="row")
    assert np.all(np.isfinite(logphi)) and np.all(np.isfinite(phi))
    assert np.all(phi == 0.0)  # documented: unstabilised features underflow at this scale
    assert np.allclose(np.max(phi_s, axis=1), 1.0)
    # ratios within a row are preserved: log phi_s = log phi - offset
    mask = phi_s > 1e-300
    assert np.allclose(np.log(phi_s[mask]), (logphi - off[:, None])[mask], atol=1e-9)
    phi_soft, off_soft = mc.prf_features(x, w, kernel="softmax", stabilize="global")
    assert np.all(np.isfinite(phi_soft)) and np.max(phi_soft) == 1.0
    assert np.ndim(off_soft) == 0


def test_stabilised_attention_is_exact_and_absolute_values_are_not():
    """Normalised attention from row-stabilised queries and globally-stabilised keys equals the exact one."""
    d, m = 16, 64
    w = mc.sample_weights("orthogonal", d, m, rng=5)
    q = _data(5, d, 1.5, seed=6)
    k = _data(7, d, 1.5, seed=7)
    fq = mc.prf_features(q, w, kernel="softmax")
    fk = mc.prf_features(k, w, kernel="softmax")
    att = fq @ fk.T
    att /= att.sum(axis=1, keepdims=True)
    fq_s, oq = mc.prf_features(q, w, kernel="softmax", stabilize="row")
    fk_s, ok = mc.prf_features(k, w, kernel="softmax", stabilize="global")
    att_s = fq_s @ fk_s.T
    att_s /= att_s.sum(axis=1, keepdims=True)
    assert np.max(np.abs(att_s - att)) < 1e-12
    # absolute kernel values are scaled by exp(-o(q) - o_k) and recovered in log space
    raw = fq_s @ fk_s.T
    assert not np.allclose(raw, fq @ fk.T)
    assert np.allclose(np.log(raw) + oq[:, None] + ok, np.log(fq @ fk.T), atol=1e-10)
    # per-row offsets on keys do NOT preserve normalised attention (the documented limitation)
    fk_r, _ = mc.prf_features(k, w, kernel="softmax", stabilize="row")
    bad = fq_s @ fk_r.T
    bad /= bad.sum(axis=1, keepdims=True)
    assert np.max(np.abs(bad - att)) > 1e-3


def test_rows_near_the_largest_float_are_refused_by_every_kind():
    """Issue 38: RFF features of finite rows near 1e308 came back NaN without an error (the projections overflow
    to inf, whose sine is NaN), where the positive kinds raised a ValueError for the same rows; one rule now
    (montecarlo.features.refuse_overflowed_rows) for every kind, the plain maps and the transformers.  Power:
    rows of 1e150 (squared norm 5e300, finite) still map to finite features of every kind."""
    from montecarlo.kernel_approximation import PositiveRandomFeatures, RandomFourierFeatures

    W = np.random.default_rng(0).standard_normal((4, 5))
    calls = [lambda X, k=k: mc.random_features(X, W, kind=k) for k in ("prf", "rff", "hyperbolic")]
    calls += [lambda X: mc.rff_features(X, W), lambda X: mc.prf_features(X, W)]
    for X in (np.full((2, 5), 1e308), np.full((3, 5), 1.7e308), np.array([[1.0] * 5, [1e160] * 5])):
        for call in calls:
            with pytest.raises(ValueError, match=r"^X has rows whose squared norm overflows float64"):
                call(X)
        for cls in (RandomFourierFeatures, PositiveRandomFeatures):
            with pytest.raises(ValueError, match=r"^X has rows whose squared norm \(times 2 gamma\) overflows"):
                cls(n_components=4, random_state=0).fit_transform(X)
    ok = np.full((2, 5), 1e150)
    for call in calls:
        assert np.all(np.isfinite(call(ok)))
    assert np.all(np.isfinite(RandomFourierFeatures(n_components=4, random_state=0).fit_transform(ok)))


def test_estimator_classes():
    x = _data(10, 8)
    prf = mc.PositiveRandomFeatures(n_components=24, coupling="simplex", random_state=0)
    phi = prf.fit_transform(x)
    assert phi.shape == (10, 24)
    assert np.allclose(phi, mc.prf_features(x, mc.sample_weights("simplex", 8, 24, rng=0)))
    rff = mc.RandomFourierFeatures(n_components=5, coupling="fast_orthogonal", random_state=0).fit(x)
    assert rff.transform(x).shape == (10, 10)
    with pytest.raises(ValueError, match="not fitted"):
        mc.PositiveRandomFeatures().transform(x)
    with pytest.raises(ValueError, match="X has 7 features, but PositiveRandomFeatures is expecting 8"):
        prf.transform(_data(3, 7))


@pytest.mark.parametrize("fn", [mc.prf_features, mc.rff_features, mc.prf_log_features])
def test_feature_bad_input(fn):
    w = mc.sample_weights("iid", 4, 6, rng=0)
    with pytest.raises(ValueError, match=r"X and W disagree on the dimension d: X has 5 columns but W has 4"):
        fn(np.ones((3, 5)), w)
    with pytest.raises(ValueError, match=r"X must be a 2-D array"):
        fn(np.ones(4), w)
    bad = np.ones((3, 4))
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match="X must be finite: found 1 NaN or inf"):
        fn(bad, w)
    bad[1, 2] = np.inf
    with pytest.raises(ValueError, match="X must be finite"):
        fn(bad, w)
    with pytest.raises(ValueError, match="W must be an"):
        fn(np.ones((3, 4)), [[1.0] * 4])


def test_prf_bad_kernel_and_stabilize():
    w = mc.sample_weights("iid", 4, 6, rng=0)
    with pytest.raises(ValueError, match="kernel must be one of 'gaussian', 'softmax'"):
        mc.prf_features(np.ones((2, 4)), w, kernel="laplace")
    with pytest.raises(ValueError, match="stabilize must be None, .row. or .global."):
        mc.prf_features(np.ones((2, 4)), w, stabilize="max")


def test_row_blocks_respect_threadpool_limits(monkeypatch):
    """Issue 22: the feature maps' row blocks follow threadpoolctl's limit (OMP_NUM_THREADS, threadpool_limits):
    under threadpool_limits(1) no pool thread is used; power: with two threads allowed (and at least two cores)
    the pool is used for a large batch."""
    import os

    from threadpoolctl import threadpool_limits

    from montecarlo import features

    used = []
    real_pool = features._pool

    def spy():
        used.append(True)
        return real_pool()

    monkeypatch.setattr(features, "_pool", spy)
    X = np.random.default_rng(0).standard_normal((2048, 16)) * 0.1
    W = mc.sample_weights("orthogonal", 16, 64, rng=1)
    with threadpool_limits(1):
        assert features.thread_limit() == 1
        ref = mc.prf_features(X, W)
    assert not used
    if (os.cpu_count() or 1) >= 2:
        with threadpool_limits(2):
            out = mc.prf_features(X, W)
        assert used and np.array_equal(out, ref)
