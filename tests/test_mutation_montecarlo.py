"""Tests added against the surviving formula mutants of montecarlo (issue 22 item 5, docs/guide/mutation.rst).

Each class is the addition to one target's mutation command (tests/mutation_targets.py): ``TestCouplings`` for
montecarlo/couplings.py, ``TestEstimators`` for estimators.py, ``TestFeatures``, ``TestPnc``, ``TestNormCoupling``.
Every test checks a documented property against an independent route (a closed form, the formula written out,
a second sampler path, mpmath, the README's numbers); Monte Carlo comparisons are z-tests at
paper_checks._compare.Z_CRIT = 4.5 (false alarm 6.8e-6 each, the family bound is stated per test) and show
their power on a wrong alternative.  Seeds are fixed; no test reads the clock (the progress bar gets a fake one).
"""

import math
import warnings

import numpy as np
import pytest
from mpmath import mp
from scipy import stats

import montecarlo as mc
from montecarlo import norm_coupling as nc
from montecarlo._checks import AllocationError
from theory import feature_kinds as fk
from paper_checks._compare import Z_CRIT


def _cos_rows(w):
    u = w / np.linalg.norm(w, axis=-1, keepdims=True)
    return u @ np.swapaxes(u, -1, -2)


class TestCouplings:
    """montecarlo/couplings.py: the SimRFs+ pass count, sample_projection = sample_weights, the torch paths, the
    Householder route's law, the SimRFs+ norms' domain."""

    def test_simplex_plus_start_is_the_fixed_point_in_one_pass(self):
        """The simplex start is already a fixed point of the update when d = 2 (two antiparallel vectors, any
        norms) or when the norms are equal (the regular simplex closes): exactly one pass moves nothing, so every
        block reports passes = 1 and converges even with max_passes = 1; the rows keep the simplex geometry."""
        rng = np.random.default_rng(0)
        two = np.sqrt(rng.chisquare(2, (6, 2)))
        equal = np.full((3, 5), 1.7)
        for norms in (two, equal):
            d = norms.shape[1]
            vec, passes, conv = mc.simplex_plus_vectors(norms, max_passes=1, on_unconverged="raise")
            assert np.all(passes == 1) and np.all(conv)
            assert np.allclose(np.linalg.norm(vec, axis=-1), norms, rtol=1e-14)
            off = ~np.eye(d, dtype=bool)
            assert np.allclose(_cos_rows(vec)[:, off], -1 / (d - 1), atol=1e-14)

    def test_simplex_plus_passes_never_exceed_max_passes(self):
        """Blocks are independent: a run capped at M passes converges exactly the blocks whose uncapped run needed
        <= M passes, with the same pass counts and vectors, and no block reports more than M passes.  M is chosen
        (fixed seed) so that some blocks need exactly M and some M + 1 passes."""
        norms = np.sqrt(np.random.default_rng(7).chisquare(3, (60, 3)))
        free, p_free, c_free = mc.simplex_plus_vectors(norms, tol=1e-12, max_passes=5000)
        assert np.all(c_free)
        cap = 11
        assert np.any(p_free == cap) and np.any(p_free == cap + 1)
        vec, passes, conv = mc.simplex_plus_vectors(norms, tol=1e-12, max_passes=cap, on_unconverged="ignore")
        assert np.all(passes <= cap)
        assert np.array_equal(conv, p_free <= cap)
        assert np.array_equal(passes[conv], p_free[conv]) and np.all(passes[~conv] == cap)
        assert np.array_equal(vec[conv], free[conv])

    @pytest.mark.filterwarnings("ignore::montecarlo.FastCouplingBiasWarning")
    @pytest.mark.parametrize("coupling", mc.COUPLINGS)
    def test_sample_projection_is_the_draw_of_sample_weights(self, coupling):
        """sample_projection wraps sample_weights (the fast couplings draw the same stream): for one seed its dense
        weights are the same rows, and projecting a batch equals multiplying by them (m > d: a truncated block)."""
        d, m = 5, 13
        proj = mc.sample_projection(coupling, d, m, rng=21)
        w = mc.sample_weights(coupling, d, m, rng=21)
        assert np.array_equal(proj.weights, w)
        x = np.random.default_rng(1).standard_normal((4, d))
        assert np.allclose(proj(x), x @ w.T, rtol=1e-12, atol=1e-12)
        assert not np.allclose(mc.sample_weights(coupling, d, m, rng=22), w)  # power: another seed differs

    @pytest.mark.filterwarnings("ignore::montecarlo.FastCouplingBiasWarning")
    def test_torch_fast_projection_and_simplex_plus_info(self):
        """On torch: the fast couplings' HD-product projection of a batch equals the product with the dense rows
        built by the other route (rows of D S R~), and SimRFs+ with a truncated last block reports one pass count
        per block."""
        torch = pytest.importorskip("torch")
        x = torch.tensor(np.random.default_rng(3).standard_normal((4, 5)))
        for coupling in mc.FAST_COUPLINGS:
            proj = mc.sample_projection(coupling, 5, 11, rng=4, xp="torch")
            y = proj(x)
            assert y.shape == (4, 11)
            assert torch.allclose(y, x @ proj.weights.T, rtol=1e-12, atol=1e-12)
        w, info = mc.sample_weights("simplex_plus", 4, 6, rng=5, xp="torch", return_info=True)
        assert tuple(w.shape) == (6, 4)
        assert tuple(info["passes"].shape) == (2,) and bool(info["converged"].all())

    @pytest.mark.parametrize("cols", [None, 2])
    def test_householder_route_has_the_haar_law(self, cols):
        """route='householder' (d - 1 reflections, or the first cols of them): every entry of a Haar matrix (or of
        its first columns) has E[Q_ij^2] = 1/d.  d = 4, 20000 matrices, 16 (or 8) z-tests at Z_CRIT (family
        1.1e-4).  The route's geometry tests hold for any product of reflections; this is its law.  Power: one
        uniformly random reflection I - 2uu^T (orthogonal, not Haar: E[H_11^2] = 1/2) is rejected."""
        d, n = 4, 20_000
        q = mc.haar_orthogonal(n, d, rng=3, route="householder", cols=cols)
        assert q.shape == (n, d, d if cols is None else cols)
        sq = q * q
        z = (sq.mean(axis=0) - 1 / d) / (sq.std(axis=0, ddof=1) / math.sqrt(n))
        assert np.max(np.abs(z)) < Z_CRIT, z
        u = np.random.default_rng(4).standard_normal((n, d))
        u /= np.linalg.norm(u, axis=1, keepdims=True)
        h = np.eye(d) - 2 * u[:, :, None] * u[:, None, :]
        hs = h[:, :, :q.shape[2]] ** 2
        zh = (hs.mean(axis=0) - 1 / d) / (hs.std(axis=0, ddof=1) / math.sqrt(n))
        assert np.max(np.abs(zh)) > Z_CRIT

    def test_simplex_plus_refuses_a_zero_norm(self):
        """Documented: norms are an (n, d) array with entries > 0.  A zero or a negative norm is refused by name;
        the smallest positive double is accepted."""
        for bad in (0.0, -1.0):
            with pytest.raises(ValueError, match="norms must be > 0"):
                mc.simplex_plus_vectors(np.array([[1.0, bad, 2.0]]))
        vec, passes, conv = mc.simplex_plus_vectors(np.array([[1.0, 5e-324, 1.5]]), on_unconverged="ignore")
        assert vec.shape == (1, 3, 3)


class TestEstimators:
    """montecarlo/estimators.py: boundaries of n_draws, the Gram estimator of every kind, the SimRFs+ fast path,
    the Gram budget, the progress bar's redraw rate, the iid fast path's row norms, the default n_draws."""

    def test_pair_projections_single_draw_and_two_draw_estimates(self):
        """n_draws >= 1 for projections, >= 2 for an estimate (documented): one draw of m projections has shape
        (1, m); two draws give an Estimate with a finite, positive standard error; one draw is refused."""
        p = mc.pair_projections("orthogonal", 0.7, 6, 1, rng=0, d=6)
        assert p.shape == (1, 6) and np.all(np.isfinite(p))
        x, y = np.full(4, 0.2), np.full(4, -0.1)
        est = mc.kernel_estimate("iid", x, y, 4, 2, rng=1)
        assert est.n == 2 and math.isfinite(est.mean) and est.stderr > 0
        with pytest.raises(ValueError, match="n_draws must be an integer >= 2"):
            mc.kernel_estimate("iid", x, y, 4, 1, rng=1)

    @pytest.mark.filterwarnings("ignore:SimRFs\\+ update")
    def test_simplex_plus_fast_path_agrees_with_full_path(self):
        """SimRFs+ projections on the fast path (|v| D S' u) and the full path (dense blocks) have one law, for
        m = 6 > d = 4 (a truncated block): two-sample KS of w_0.v and of (w_0 + w_1).v, two-sample z of the MSE and
        of the pair product E[(w_0.v)(w_1.v)] at |v| = 2; 4 comparisons at family 1e-4 (KS) and 1.4e-5 (z).
        Power: the orthogonal coupling's pair product (angle pi/2, about 0 instead of about -1.2) is rejected."""
        m, n = 6, 4000
        v = np.array([0.5, -0.3, 0.2, 0.4])  # d = 4
        fast = mc.pair_projections("simplex_plus", v, m, n, rng=1, path="fast")
        full = mc.pair_projections("simplex_plus", v, m, n, rng=2, path="full")
        assert fast.shape == (n, m)
        alpha = 1e-4 / 2
        assert stats.ks_2samp(fast[:, 0], full[:, 0]).pvalue > alpha
        assert stats.ks_2samp(fast[:, 0] + fast[:, 1], full[:, 0] + full[:, 1]).pvalue > alpha
        x, y = v / 2 + 0.1, v / 2 - 0.1
        a = mc.empirical_mse("simplex_plus", x, y, m, 4 * n, rng=3, path="fast")
        b = mc.empirical_mse("simplex_plus", x, y, m, n, rng=4, path="full")
        assert abs(a.mean - b.mean) / math.hypot(a.stderr, b.stderr) < Z_CRIT

        def pair_product(coupling, path, seed):
            p = mc.pair_projections(coupling, np.array([2.0, 0.0, 0.0, 0.0]), m, n, rng=seed, path=path)
            q = p[:, 0] * p[:, 1]
            return q.mean(), q.std(ddof=1) / math.sqrt(n)

        (f, sf), (g, sg), (o, so) = (pair_product("simplex_plus", "fast", 5), pair_product("simplex_plus", "full", 6),
                                     pair_product("orthogonal", "fast", 7))
        assert abs(f - g) / math.hypot(sf, sg) < Z_CRIT
        assert abs(o - g) / math.hypot(so, sg) > Z_CRIT

    @pytest.mark.filterwarnings("ignore:SimRFs\\+ update")
    @pytest.mark.parametrize("kind", fk.names(kernel="gaussian"))  # (its exact Gram is the Gaussian one)
    def test_gram_estimate_of_every_kind(self, kind):
        """gram_estimate is elementwise unbiased for every kind (m = 7 > d = 3 and m = d = 3, OPRFs at FAVOR++'s
        data A), 2 x 9 z-tests per kind; power: the softmax Gram is rejected.  Its relative Frobenius error agrees
        with an independent estimate built from sample_weights and random_features (two-sample z); power: the
        independent estimate at 3m features is rejected.  Family: 20 comparisons per kind, 1.4e-4."""
        X = np.random.default_rng(0).standard_normal((3, 3)) * 0.3
        params = ({"A": mc.oprf.data_optimal_a(X)} if kind == "oprf" else
                  dict(zip("aQ", mc.sderf.sderf_parameters(X))) if kind == "sderf" else {})
        exact = np.exp(-0.5 * np.sum((X[:, None] - X[None]) ** 2, axis=-1))
        for m in (7, 3):
            est, frob = mc.gram_estimate("simplex", X, m, 3000, kind=kind, rng=5, **params)
            assert est.mean.shape == (3, 3)
            # (RFF diagonal entries are exactly 1 in every draw: a standard error of rounding, hence the 1e-12)
            assert np.all(np.abs(est.mean - exact) <= Z_CRIT * est.stderr + 1e-12), (kind, m)
        assert np.max(np.abs((est.mean - np.exp(X @ X.T)) / est.stderr)) > Z_CRIT

        def independent(m, n, seed):
            errs = []
            for w in mc.sample_weights("simplex", 3, m, rng=seed, n_draws=n):
                f = mc.random_features(X, w, kind=kind, **params)
                errs.append(np.linalg.norm(f @ f.T - exact) / np.linalg.norm(exact))
            return np.mean(errs), np.std(errs, ddof=1) / math.sqrt(n)

        mean, se = independent(3, 1500, 9)
        assert abs(frob.mean - mean) / math.hypot(frob.stderr, se) < Z_CRIT
        mean3, se3 = independent(9, 1500, 10)
        assert abs(frob.mean - mean3) / math.hypot(frob.stderr, se3) > Z_CRIT

    def test_gram_budget_names_the_gram_matrix(self, monkeypatch):
        """The (N, N') Gram matrix is the array the first budget check guards: with MAX_ELEMENTS one entry below
        N N' (N = 40, N' = 30, d = 3) the refusal names it; with N N' allowed, that check passes (the call then
        fails on the per-draw check, which names the draw)."""
        X = np.random.default_rng(0).standard_normal((40, 3)) * 0.1
        Y = X[:30]
        monkeypatch.setattr("montecarlo._checks.MAX_ELEMENTS", 40 * 30 - 1)
        with pytest.raises(AllocationError, match=r"\(N, N'\) = \(40, 30\) Gram matrix would need 1\.2e\+03"):
            mc.gram_estimate("iid", X, 2, 10, Y=Y, rng=0)
        monkeypatch.setattr("montecarlo._checks.MAX_ELEMENTS", 40 * 30)
        with pytest.raises(AllocationError, match="one draw of the Gram estimate"):
            mc.gram_estimate("iid", X, 2, 10, Y=Y, rng=0)

    def test_progress_bar_redraws_at_most_twice_a_second(self, monkeypatch, capsys):
        """The text bar on stderr redraws when at least 0.5 s passed since the last redraw, and always at the end
        (a fake clock: no wall time is read)."""
        import types

        from montecarlo import estimators

        clock = iter([0.0, 0.3, 0.6, 0.9, 1.2, 1.3])
        monkeypatch.setattr(estimators, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
        bar = estimators._Progress(True, 5, "demo")  # reads t0 = 0.0
        for done in (1, 2, 3, 4, 5):  # at 0.3 (skip), 0.6 (draw), 0.9 (skip), 1.2 (draw), 1.3 (the end: draw)
            bar.update(done)
        err = capsys.readouterr().err
        assert [s.split("]")[1].split()[0] for s in err.split("\r")[1:]] == ["2/5", "4/5", "5/5"]
        assert err.endswith("\n")

    @pytest.mark.parametrize("d", [2, 3])
    def test_iid_fast_path_row_norms_for_oprfs(self, d):
        """The iid fast path draws |v| g and |w|^2 = g^2 + chi^2_{d-1} (its docstring); OPRFs need |w|^2.  Their
        kernel estimate on that path is unbiased for e^{-|x-y|^2/2} at d = 2 and 3, A = -0.2 (z-test at Z_CRIT);
        power: at d = 2, |w|^2 = g^2 alone (no chi^2_1 part) would multiply the mean by E[e^{2A chi^2_1}]^{-1} =
        sqrt(1 - 4A) = 1.34; that value is rejected at both d."""
        rng = np.random.default_rng(d)
        x, y = rng.standard_normal(d) * 0.3, rng.standard_normal(d) * 0.3
        exact = math.exp(-0.5 * float(np.sum((x - y) ** 2)))
        a = -0.2
        est = mc.kernel_estimate("iid", x, y, 4, 20_000, kind="oprf", A=a, rng=1, path="fast")
        assert abs(est.mean - exact) < Z_CRIT * est.stderr, (est, exact)
        assert abs(est.mean - exact * math.sqrt(1 - 4 * a)) > Z_CRIT * est.stderr

    def test_pair_term_default_n_draws(self):
        """empirical_conformity and empirical_pair_moments draw n_draws = 10_000 by default (the signature):
        the estimate without n_draws has n = 10_000 and is the estimate with n_draws=10_000 for the same seed (the
        pair moments: a (3, 3) matrix)."""
        for f in (mc.empirical_conformity, mc.empirical_pair_moments):
            got = f("orthogonal", 3, 0.5, rng=0)
            same = f("orthogonal", 3, 0.5, n_draws=10_000, rng=0)
            assert got.n == 10_000
            assert np.array_equal(got.mean, same.mean) and np.array_equal(got.stderr, same.stderr)


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


class TestPnc:
    """montecarlo/pnc.py: the antithetic partner F^{-1}(1 - F(w)) keeps its accuracy in both tails."""

    @pytest.mark.parametrize("d", [2, 5, 16])
    def test_antithetic_partner_in_both_tails(self, d):
        """F(w') = 1 - F(w) for chi_d norms at tail probabilities 1e-30 ... 0.5, against mpmath (the regularised
        incomplete gamma at 30 digits): relative error < 1e-9 both ways.  Near F = 1 the lower probability rounds to
        1 in double precision, so the upper tail must go through the survival function."""
        with mp.workdps(30):
            half = mp.mpf(d) / 2

            def lower(w):  # F(w) = P(d/2, w^2/2)
                return mp.gammainc(half, 0, mp.mpf(w) ** 2 / 2, regularized=True)

            def upper(w):
                return mp.gammainc(half, mp.mpf(w) ** 2 / 2, mp.inf, regularized=True)

            for p in ("1e-30", "1e-12", "0.01", "0.3"):
                w_low = float(stats.chi.ppf(float(p), d))
                w_high = float(stats.chi.isf(float(p), d))
                # reference partners from mpmath: F(w') = 1 - F(w) means upper(w') = lower(w) and vice versa
                target_high, target_low = lower(w_low), upper(w_high)
                got_high = mc.pnc.antithetic_partner(np.array([w_low]), d)[0]
                got_low = mc.pnc.antithetic_partner(np.array([w_high]), d)[0]
                assert abs(upper(got_high) / target_high - 1) < 1e-9, (d, p, got_high)
                assert abs(lower(got_low) / target_low - 1) < 1e-9, (d, p, got_low)
                assert got_low > 0 and got_high > got_low


class TestNormCoupling:
    """montecarlo/norm_coupling.py: the default grid of the table and of the command line holds the README's
    quoted points, and the values there are the README's; antithetic couples and their conformity at small d."""

    def test_default_grid_holds_the_readme_points(self, monkeypatch):
        """README: "equal norms give 0.28 x SimRF's MSE at d = 4, v = 0.25 yet 4.4 x at d = 64, v = 0.5;
        stratified norms give 0.95 x at d = 64, v = 0.5 and 1.14 x at d = 4, v = 0.25".  The default table
        (function and command line) covers both points; the d = 4 values are checked to the quoted digits (the
        quadrature against the README's numbers; power: the other kind's number is rejected)."""
        assert round(nc.mse_ratio_to_simplex(4, 0.25, "equal"), 2) == 0.28
        assert round(nc.mse_ratio_to_simplex(4, 0.25, "stratified"), 2) == 1.14
        assert round(nc.mse_ratio_to_simplex(4, 0.25, "antithetic"), 2) != 1.14
        seen = []
        monkeypatch.setattr(nc, "mse_ratio_to_simplex", lambda d, v, kind: seen.append((d, v)) or 1.0)
        table = nc.norm_coupling_table()
        assert {(4, 0.25), (64, 0.5)} <= {(d, v) for d, v, _ in table}
        grid = sorted(set(seen))
        seen.clear()
        assert nc.main(["--no-progress"]) == 0
        assert sorted(set(seen)) == grid  # the command line's default grid is the function's

    @pytest.mark.parametrize("d", [2, 5, 6])
    def test_antithetic_norms_are_couples(self, d):
        """Antithetic norms: rows (0, 1), (2, 3), ... are couples F(w_{2k}) + F(w_{2k+1}) = 1 for every even d
        (d = 2 and 6 are 2 mod 4); an odd d's last norm is independent of the others (no couple: its F is not
        1 - F of any other norm)."""
        w = nc.coupled_norms(d, 500, "antithetic", rng=8)
        u = stats.chi.cdf(w, d)
        half = d // 2
        assert np.allclose(u[:, 0:2 * half:2] + u[:, 1:2 * half:2], 1, rtol=0, atol=1e-12)
        if d % 2:
            assert np.all(np.abs(u[:, -1:] + u[:, :-1] - 1) > 1e-9)

    def test_antithetic_conformity_at_small_d(self):
        """conformity(d, v, 'antithetic') mixes the antithetic couples (2 floor(d/2) of the d(d-1) ordered pairs)
        with independent pairs: against Monte Carlo over the sampler's simplex blocks (the pair statistic of
        test_norm_coupling) at d = 2 (every pair a couple), v = 1 and d = 3 (one couple, one independent norm),
        v = 1.5, 200000 blocks, z at Z_CRIT (family 1.4e-5); power at d = 2: the iid value (1.256 against 1.563)
        is rejected."""
        for d, v, seed in ((2, 1.0, 3), (3, 1.5, 4)):
            W = nc.sample_norm_coupled_weights(d, d, "antithetic", rng=seed, n_draws=200_000)
            b = np.exp(v * W[..., 0])
            s = b.sum(axis=1)
            per = (s * s - np.sum(b * b, axis=1)) / (d * (d - 1))
            se = per.std(ddof=1) / math.sqrt(per.size)
            assert abs(per.mean() - nc.conformity(d, v, "antithetic")) < Z_CRIT * se, (d, v)
            if d == 2:
                assert abs(per.mean() - nc.conformity(d, v, "iid")) > Z_CRIT * se
