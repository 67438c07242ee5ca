"""Feature maps: exact identities (no sampling error) and bad input.

Unbiasedness is statistical and lives in ``test_montecarlo_estimators.py``;
here every check is an algebraic identity of eq. ``def_prf`` / ``rffdef2``
for a fixed W, compared with an independent scalar computation.
"""

import math
import multiprocessing
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from _cli import ROOT

import montecarlo as mc
from montecarlo import features
from montecarlo._checks import AllocationError
from paper_checks._compare import Z_1E3
from theory import feature_kinds as fk


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


# ---------------------------------------------------------------------------
# Issue 22 (hardening), montecarlo items: non-finite input to the transforms, the SimRFs+
# tolerance's dtype, and the coupling lists of montecarlo.couplings (issue 18).


try:
    import torch
except ImportError:  # pragma: no cover - the torch extra is optional
    torch = None


def test_round_two_inputs_are_refused_by_name():
    """Found by an exploration run (each passed silently before): simplex_apply and fwht computed booleans as
    numbers, returned complex output for complex input, and met strings with numpy's own ufunc error; now an
    ArgumentTypeError naming x (integers still work: power).  Finite X whose squared norm overflows gave -inf
    log-features, NaN stabilised features, and PositiveRandomFeatures.log_transform returned -inf although
    documented finite: now a ValueError saying to scale X down; RFFs too since issue 38 (their phases w^T z are
    beyond resolution there, and at entries near 1e308 the projections overflowed to inf: NaN features)."""
    torch = pytest.importorskip("torch")
    from montecarlo._checks import ArgumentTypeError
    from montecarlo.kernel_approximation import PositiveRandomFeatures, RandomFourierFeatures

    for bad, what in ((np.array([True, False, True, False]), "booleans"), (np.array([1 + 1j, 2, 3, 4]), "complex"),
                      (np.array(["a", "b", "c", "d"]), "strings"), (torch.tensor([True, False, True, False]),
                                                                    "booleans")):
        for fn in (mc.simplex_apply, mc.fwht):
            with pytest.raises(ArgumentTypeError, match=f"x must hold real numbers.*{what}"):
                fn(bad)
    np.testing.assert_allclose(mc.fwht(np.array([1, 2])), np.array([3.0, -1.0]) / np.sqrt(2.0))
    np.testing.assert_allclose(mc.simplex_apply(np.array([1, 2, 3])), mc.simplex_apply(np.array([1.0, 2.0, 3.0])))

    W = mc.sample_weights("simplex", 8, 16, rng=0)
    huge = np.full((2, 8), 1e160)
    for call in (lambda: mc.log_features(huge, W), lambda: mc.prf_features(huge, W, stabilize="row"),
                 lambda: mc.random_features(huge, W, "hyperbolic")):
        with pytest.raises(ValueError, match="squared norm overflows float64"):
            call()
    prf = PositiveRandomFeatures(n_components=16, random_state=0).fit(huge)
    for call in (prf.log_transform, prf.transform):
        with pytest.raises(ValueError, match="squared norm .times 2 gamma. overflows float64"):
            call(huge)
    rff = RandomFourierFeatures(n_components=4, random_state=0).fit(huge)
    for call in (lambda: mc.random_features(huge, W, "rff"), lambda: rff.transform(huge)):
        with pytest.raises(ValueError, match="squared norm .*overflows float64"):
            call()
    assert np.isfinite(mc.log_features(np.full((2, 8), 1e150), W)).all()
    assert np.isfinite(mc.random_features(np.full((2, 8), 1e150), W, "rff")).all()


# ---------------------------------------------------------------------------
# Tests added against the surviving formula mutants of montecarlo (issue 22 item 5, docs/guide/mutation.rst).
#
# Each class is the addition to one target's mutation command (tests/mutation_targets.py): ``TestCouplings`` for
# montecarlo/couplings.py, ``TestEstimators`` for estimators.py, ``TestFeatures``, ``TestPnc``, ``TestNormCoupling``.
# Every test checks a documented property against an independent route (a closed form, the formula written out,
# a second sampler path, mpmath, the README's numbers); Monte Carlo comparisons are z-tests at
# paper_checks._compare.Z_CRIT = 4.5 (false alarm 6.8e-6 each, the family bound is stated per test) and show
# their power on a wrong alternative.  Seeds are fixed; no test reads the clock (the progress bar gets a fake one).


class TestFeatures:
    """montecarlo/features.py: the threaded row blocks, the RFF map on data with zero entries and its budget, the
    exact log-kernel matrix."""

    def test_threaded_row_blocks_equal_the_formula(self, monkeypatch):
        """Above 2^16 entries numpy rows are split across threads (3 here, uneven blocks): every row equals
        e^{w.x - |x|^2 - log(m)/2} written out, and the 'row' offsets are each row's maximum."""
        from montecarlo import features

        monkeypatch.setattr(features, "thread_limit", lambda: 3)
        rng = np.random.default_rng(0)
        X = rng.standard_normal((8191, 4)) * 0.5
        W = mc.sample_weights("orthogonal", 4, 16, rng=1)
        logits = X @ W.T - np.sum(X * X, axis=1)[:, None] - 0.5 * math.log(16)
        phi = mc.random_features(X, W)
        assert phi.shape == (8191, 16)
        assert np.allclose(phi, np.exp(logits), rtol=1e-12, atol=0)
        stab, off = mc.random_features(X, W, stabilize="row")
        assert np.allclose(off, logits.max(axis=1), rtol=0, atol=1e-12)
        assert np.allclose(stab, np.exp(logits - logits.max(axis=1)[:, None]), rtol=1e-12, atol=0)

    def test_rff_map_on_data_with_zero_entries(self):
        """RFFs of data with exact zeros: the interleaved (sin, cos)/sqrt(m) written out, without any warning."""
        X = np.array([[0.0, 0.5, 0.0], [0.0, 0.0, 0.0], [1.0, -0.2, 0.3]])
        W = mc.sample_weights("simplex", 3, 5, rng=2)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            phi = mc.random_features(X, W, kind="rff")
        p = X @ W.T
        ref = np.stack([np.sin(p), np.cos(p)], axis=-1).reshape(3, 10) / math.sqrt(5)
        assert np.allclose(phi, ref, rtol=1e-14, atol=1e-15)

    def test_log_kernel_matrix_against_the_pairs(self):
        """log_kernel_matrix (the one home of the exact kernels): -|x_a - y_b|^2 / 2 and x_a.y_b over every pair
        (brute force here), with Y given (N' != N) and defaulting to X, on data with exact zeros (no warning); the
        Gaussian one is <= 0 everywhere (clipped at 0 against rounding), its diagonal with Y = X 0 to rounding."""
        from montecarlo.features import log_kernel_matrix

        rng = np.random.default_rng(6)
        X = rng.standard_normal((5, 3)) * 0.7
        X[1] = 0.0
        X[3, 0] = 0.0
        Y = rng.standard_normal((4, 3)) * 0.7
        Y[2, 1:] = 0.0
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for B in (Y, X):
                diff = X[:, None, :] - B[None, :, :]
                gauss = log_kernel_matrix(X, None if B is X else B)
                assert gauss.shape == (5, B.shape[0])
                assert np.allclose(gauss, -0.5 * np.sum(diff * diff, axis=-1), rtol=1e-13, atol=1e-14)
                soft = log_kernel_matrix(X, None if B is X else B, kernel="softmax")
                assert np.allclose(soft, X @ B.T, rtol=1e-13, atol=1e-14)
        gauss = log_kernel_matrix(X)
        assert np.all(gauss <= 0) and np.max(np.abs(np.diag(gauss))) < 1e-15

    def test_rff_budget_counts_the_rows(self, monkeypatch):
        """The RFF output is (N, 2m): the budget check refuses it, by name, when 2 N m exceeds MAX_ELEMENTS
        (N = 40 rows, d = 3, m = 5: 400 entries) and lets it through at exactly 2 N m."""
        X = np.random.default_rng(0).standard_normal((40, 3)) * 0.1
        W = mc.sample_weights("orthogonal", 3, 5, rng=1)
        monkeypatch.setattr("montecarlo._checks.MAX_ELEMENTS", 2 * 40 * 5 - 1)
        with pytest.raises(AllocationError, match=r"the \(N, 2 m\) = \(40, 10\) features"):
            mc.random_features(X, W, kind="rff")
        monkeypatch.setattr("montecarlo._checks.MAX_ELEMENTS", 2 * 40 * 5)
        assert mc.random_features(X, W, kind="rff").shape == (40, 10)


# ---------------------------------------------------------------------------
# Fork safety of prf_features' thread pool (issue 12 item 1).
#
# Before the fix, ``prf_features`` on >= 65536 entries used a module-level
# ``ThreadPoolExecutor``; a process forked after the parent had used it (the
# default ``multiprocessing`` start method on Linux) inherited the executor but
# none of its worker threads and hung forever on its next large call.  The pool
# is now keyed by process id and dropped in the child by an
# ``os.register_at_fork`` handler.
#
# Every child runs under a timeout and is killed if it has not finished, so a
# regression fails the test instead of hanging the suite.


TIMEOUT = 600  # seconds: a deadlock guard for a child that takes well under one (generous: a loaded machine)


def _fork_data():
    W = mc.sample_weights("iid", 64, 512, rng=0)
    X = np.random.default_rng(0).standard_normal((1024, 64)) * 0.1  # 1024 x 512 = 524288 entries: the pool path
    return X, W


def _child(queue):
    X, W = _fork_data()
    inherited = features._POOL
    phi = mc.prf_features(X, W)
    queue.put((inherited is None, features._POOL_PID == os.getpid(), float(phi.sum())))


def _run_forked(target):
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(queue,), daemon=True)
    proc.start()
    try:
        proc.join(TIMEOUT)
        if proc.is_alive():
            pytest.fail(f"the forked child did not finish in {TIMEOUT} s (deadlock in prf_features' thread pool?)")
        assert proc.exitcode == 0
        return queue.get(timeout=60)
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        queue.close()


@pytest.mark.skipif(sys.platform == 'win32' or 'fork' not in multiprocessing.get_all_start_methods(), reason='needs the fork start method')
def test_prf_features_in_a_child_forked_after_the_parent_used_the_pool():
    X, W = _fork_data()
    if features.thread_limit() == 1:  # pragma: no cover (one core: no pool to inherit)
        pytest.skip("one CPU: prf_features does not use its thread pool")
    expected = float(mc.prf_features(X, W).sum())
    assert features._POOL is not None, "the parent must have used the pool for this test to mean anything"
    fresh, own_pool, total = _run_forked(_child)
    assert fresh, "the child inherited the parent's executor (the at-fork handler did not run)"
    assert own_pool, "the child did not build its own pool"
    assert total == pytest.approx(expected, rel=1e-12)  # same features as in the parent


@pytest.mark.skipif(sys.platform == 'win32' or 'fork' not in multiprocessing.get_all_start_methods(), reason='needs the fork start method')
def test_pool_is_rebuilt_when_the_process_id_changes(monkeypatch):
    """Second line of defence (a fork the handler did not see): a pool from another pid is replaced."""
    old = features._pool()
    monkeypatch.setattr(features, "_POOL_PID", -1)
    new = features._pool()
    assert new is not old and features._POOL_PID == os.getpid()
    old.shutdown(wait=True)


# --------------------------------------------------------------------------------------------------------------
# montecarlo.FeatureMap and montecarlo.check_kind_params (issue 39 item 1; earlier tests/test_montecarlo_feature_map.py:
# montecarlo.FeatureMap and montecarlo.check_kind_params: the one object every consumer of a feature kind goes
# through, the records' named properties, and the one check of a kind's parameters.
# 
# Statistical checks: fixed seeds, two-sided |z| <= 3.29 (false-alarm probability 1e-3 each), power on a wrong
# alternative.)


@pytest.mark.parametrize("kind", mc.KINDS)
def test_named_properties(kind):
    rec = fk.get(kind)
    assert rec.log_space == rec.has("log_features") and rec.log_space != rec.has("features")
    assert rec.positive == rec.log_space  # (the old name, read by nothing in the library)
    for kernel in fk.KERNELS:
        if kernel in rec.kernels:
            a = rec.prefactor_exponent(kernel)
            assert fk.kernel_c(kind, kernel) == -a
            if rec.log_space:  # the positive kinds carry e^{-|x|^2} (Gaussian) or e^{-|x|^2/2} (softmax)
                assert a == {"gaussian": -1.0, "softmax": -0.5}[kernel]
        else:
            with pytest.raises(ValueError, match=f"kernel must be one of .* for kind='{kind}', got '{kernel}'"):
                rec.prefactor_exponent(kernel)


def test_no_consumer_reads_the_old_flag():
    """``FeatureKind.positive`` (one flag with three meanings) is read by nothing in theory or montecarlo."""
    out = subprocess.run(["git", "grep", "-n", r"\.positive", "--", "theory", "montecarlo"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    if out.returncode not in (0, 1):
        pytest.skip("git grep unavailable")
    assert out.stdout == ""


def test_the_pair_vector_and_the_prefactor():
    x, y = np.array([0.3, -0.2, 0.1]), np.array([0.1, 0.4, 0.0])
    for kind, kernel, vec, a in (("prf", "gaussian", x + y, -1.0), ("rff", "gaussian", x - y, 0.0),
                                 ("hyperbolic", "softmax", x + y, -0.5), ("trig_softmax", "softmax", x - y, 0.5)):
        got, log_pref = mc.FeatureMap(kind, kernel=kernel).pair(x, y)
        assert np.array_equal(got, vec) and log_pref == pytest.approx(a * (x @ x + y @ y), abs=0)


@pytest.mark.parametrize("kind,kernel", [(k, kn) for k in mc.KINDS for kn in fk.get(k).kernels
                                         if not fk.get(k).parameters])
def test_call_and_apply_agree_with_random_features(kind, kernel):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(6, 4)) * 0.3
    W = mc.sample_weights("orthogonal", 4, 5, rng=1)
    fmap = mc.FeatureMap(kind, W, kernel)
    phi = mc.random_features(X, W, kind, kernel)
    assert np.array_equal(fmap(X), phi)
    sq = np.sum(X * X, axis=1)[:, None]
    assert np.allclose(fmap.apply(X @ W.T, sq, **fmap.direction_terms()), phi, rtol=1e-14, atol=0)
    if fmap.log_space:
        assert np.allclose(np.exp(fmap(X, log=True)), phi, rtol=1e-14, atol=0)


def test_kernel_estimates_of_a_log_space_kind_use_the_stable_sum_when_needed():
    """Per draw P (1/m) sum_i b_i: the direct sum and the log-sum-exp agree (b given as logarithms), and a
    statistic beyond exp's range stays finite through the log-sum-exp."""
    fmap = mc.FeatureMap("prf", kernel="gaussian")
    b = np.log(np.array([[0.5, 2.0, 1.5], [1.0, 1.0, 4.0]]))
    direct = fmap.kernel_estimates(b.copy(), -0.3, on_host=True)
    stable = fmap.kernel_estimates(b.copy(), -0.3, on_host=False)
    assert np.allclose(direct, stable, rtol=1e-15) and np.allclose(direct, np.exp(-0.3) * np.array([4 / 3, 2.0]))
    big = fmap.kernel_estimates(np.array([[800.0, 799.0]]), -799.0, on_host=True)
    assert np.allclose(big, (1 + math.exp(-1)) / 2 * math.exp(1.0))


def test_check_kind_params_is_one_rule_for_every_layer():
    assert mc.check_kind_params("oprf", {"A": -0.1}) == {"A": -0.1}
    with pytest.raises(TypeError, match="kind_params must be None or a dict of the parameters of kind='oprf'"):
        mc.check_kind_params("oprf", -0.1, name="kind_params")
    with pytest.raises(TypeError, match=r"params has 'A', which kind='prf' does not take \(its parameters: none\)"):
        mc.check_kind_params("prf", {"A": 0.1})
    with pytest.raises(ValueError, match="params has 'A'"):  # also a ValueError
        mc.check_kind_params("prf", {"A": 0.1})
    with pytest.raises(ValueError, match=r"f: kind='oprf' needs A= \(in params; a feature map of one batch"):
        mc.check_kind_params("oprf", {}, "f")
    assert mc.check_kind_params("oprf", {}, chosen="data") == {}  # oprf has a data rule (PRFAttention)
    assert mc.check_kind_params("oprf", {}, chosen="pair") == {}  # and a rule at the pair (the estimators)
    with pytest.raises(TypeError, match=r"kind_params\['A'\] must be a real number"):
        mc.check_kind_params("oprf", {"A": np.array([0.1, 0.2])}, name="kind_params", reals=True)
    assert mc.check_kind_params("oprf", {"A": np.float32(-0.25)}, reals=True) == {"A": -0.25}
    with pytest.raises(ValueError, match="A must be"):  # the kind's own rule, with d
        mc.check_kind_params("oprf", {"A": 0.2}, reals=True, d=4)


# ---------------------------------------------------------------------------
# The prepare hook (a map that transforms the directions), on a temporary kind


@pytest.fixture
def rotated_prf(monkeypatch):
    """A temporary kind: PRFs of the directions rotated by a fixed orthogonal R (rows W R), declared with a
    ``prepare`` hook (T = R) and a per-direction term (a constant 0 added to the log-features)."""
    R, _ = np.linalg.qr(np.random.default_rng(5).normal(size=(4, 4)))
    rec = fk.FeatureKind(name="rotated_prf", label="rotated", description="test", log_space=True, width=1,
                         prefactors=fk.get("prf").prefactors, argument="v", statistics=("wx", "W"),
                         closed_forms=(), maps=("prepare", "log_features", "statistic"))
    monkeypatch.setattr(fk, "RECORDS", fk.RECORDS + (rec,))
    monkeypatch.setitem(fk._BY_NAME, "rotated_prf", rec)
    prf_log, prf_stat = fk.hook("prf", "log_features"), fk.hook("prf", "statistic")

    def prepare(W, xp):
        return R, ({} if W is None else {"zero": xp.sum(W * 0.0, axis=-1)})

    monkeypatch.setitem(fk._HOOKS, ("rotated_prf", "prepare"), prepare)
    monkeypatch.setitem(fk._HOOKS, ("rotated_prf", "log_features"),
                        lambda proj, sq, m, c, xp, w_sq=None, d=None, zero=None: prf_log(proj + zero, sq, m, c, xp))
    monkeypatch.setitem(fk._HOOKS, ("rotated_prf", "statistic"),
                        lambda proj, xp, w_sq=None, d=None, zero=None: prf_stat(proj + zero, xp))
    return R


def test_prepare_transforms_the_directions(rotated_prf):
    R = rotated_prf
    X = np.random.default_rng(1).normal(size=(5, 4)) * 0.3
    W = mc.sample_weights("orthogonal", 4, 6, rng=2)
    fmap = mc.FeatureMap("rotated_prf", W, "gaussian")
    assert fmap.needs_weights()
    assert np.allclose(fmap(X), mc.random_features(X, W @ R, "prf"), rtol=1e-14, atol=0)
    assert not np.allclose(fmap(X), mc.random_features(X, W, "prf"), rtol=1e-3)  # power: R is applied
    x, y = X[0], X[1]
    est = mc.kernel_estimate("orthogonal", x, y, 4, 40_000, "gaussian", rng=3, kind="rotated_prf")
    assert abs(est.z(mc.exact_kernel(x, y))) < Z_1E3  # rows W R are Gaussian: unbiased
    assert abs(est.z(mc.exact_kernel(x, y, "softmax"))) > Z_1E3  # power
    with pytest.raises(ValueError, match="path must be 'auto' or 'full' for kind='rotated_prf'"):
        mc.kernel_estimate("orthogonal", x, y, 4, 10, kind="rotated_prf", path="fast")
    g, _ = mc.gram_estimate("orthogonal", X[:3], 4, 3000, rng=4, kind="rotated_prf")
    K = np.exp(mc.features.log_kernel_matrix(X[:3], None, "gaussian"))
    assert np.all(np.abs((g.mean - K) / g.stderr) < Z_1E3)


def test_prepare_in_the_pair_statistics(rotated_prf):
    """Rows W R of an orthogonal block are an orthogonal block: the rotated kind's conformity is the PRFs' (theory),
    and the statistic is taken on R v (power: against the i.i.d. value)."""
    import theory
    from mpmath import mp

    est = mc.empirical_conformity("orthogonal", 4, 1.0, n_draws=40_000, kind="rotated_prf", rng=6)
    with mp.workdps(20):
        orth = float(theory.mean_conformity("orthogonal", 4, 1.0))
        iid = float(theory.mean_conformity("iid", 4, 1.0))
    assert abs(est.z(orth)) < Z_1E3 and abs(est.z(iid)) > Z_1E3
