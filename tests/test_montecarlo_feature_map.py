"""montecarlo.FeatureMap and montecarlo.check_kind_params: the one object every consumer of a feature kind goes
through, the records' named properties, and the one check of a kind's parameters.

Statistical checks: fixed seeds, two-sided |z| <= 3.29 (false-alarm probability 1e-3 each), power on a wrong
alternative."""

import math
import subprocess
from pathlib import Path

import numpy as np
import pytest

import montecarlo as mc
from theory import feature_kinds as fk

ROOT = Path(__file__).resolve().parents[1]
Z_CRIT = 3.29


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
    assert abs(est.z(mc.exact_kernel(x, y))) < Z_CRIT  # rows W R are Gaussian: unbiased
    assert abs(est.z(mc.exact_kernel(x, y, "softmax"))) > Z_CRIT  # power
    with pytest.raises(ValueError, match="path must be 'auto' or 'full' for kind='rotated_prf'"):
        mc.kernel_estimate("orthogonal", x, y, 4, 10, kind="rotated_prf", path="fast")
    g, _ = mc.gram_estimate("orthogonal", X[:3], 4, 3000, rng=4, kind="rotated_prf")
    K = np.exp(mc.features.log_kernel_matrix(X[:3], None, "gaussian"))
    assert np.all(np.abs((g.mean - K) / g.stderr) < Z_CRIT)


def test_prepare_in_the_pair_statistics(rotated_prf):
    """Rows W R of an orthogonal block are an orthogonal block: the rotated kind's conformity is the PRFs' (theory),
    and the statistic is taken on R v (power: against the i.i.d. value)."""
    import theory
    from mpmath import mp

    est = mc.empirical_conformity("orthogonal", 4, 1.0, n_draws=40_000, kind="rotated_prf", rng=6)
    with mp.workdps(20):
        orth = float(theory.mean_conformity("orthogonal", 4, 1.0))
        iid = float(theory.mean_conformity("iid", 4, 1.0))
    assert abs(est.z(orth)) < Z_CRIT and abs(est.z(iid)) > Z_CRIT
