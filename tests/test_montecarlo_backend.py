"""The torch backend (CPU here; CUDA too when a GPU is present): same results in distribution as numpy.

Skipped cleanly when torch is not installed.  Statistical checks follow the
conventions of ``test_montecarlo_estimators.py`` (fixed seeds, Bonferroni,
family-wise false alarm 1e-4 per test function, with power checks).
"""

import math
import warnings

import numpy as np
import pytest
from mpmath import mp
from scipy import stats

import montecarlo as mc
import theory
from montecarlo._backend import Random, namespace
from montecarlo.diagnostics import ks_marginals
from paper_checks._compare import FAMILY_ALPHA, z_limit

torch = pytest.importorskip("torch")

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("coupling", mc.COUPLINGS)
def test_torch_samples_on_device_with_exact_geometry(device, coupling):
    w = mc.sample_weights(coupling, 6, 14, rng=0, xp="torch", device=device)
    assert isinstance(w, torch.Tensor) and w.device.type == device and w.dtype == torch.float64
    assert tuple(w.shape) == (14, 6)
    blk = mc.sample_weights(coupling, 6, 6, rng=1, xp=torch, device=device, n_draws=4)
    u = blk / torch.linalg.vector_norm(blk, dim=-1, keepdim=True)
    g = u @ u.mT
    off = ~torch.eye(6, dtype=torch.bool, device=device)
    if coupling == "simplex":
        assert float(torch.max(torch.abs(g[:, off] + 1 / 5))) < 1e-12
    if coupling == "orthogonal":
        assert float(torch.max(torch.abs(g[:, off]))) < 1e-12


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("route", mc.HAAR_ROUTES)
def test_torch_haar_routes(device, route):
    q = mc.haar_orthogonal(3, 7, rng=0, xp="torch", device=device, route=route)
    assert q.device.type == device
    assert float(torch.max(torch.abs(q @ q.mT - torch.eye(7, dtype=q.dtype, device=device)))) < 1e-12


MARGINAL_CASES = [(c, r) for c in ("orthogonal", "simplex") for r in mc.HAAR_ROUTES] + [("simplex_plus", "qr")]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("coupling,route", MARGINAL_CASES)
def test_torch_marginals(device, coupling, route):
    """KS of rows {0, 1, 7} on 4 directions, d = 8; 7 cases x 12 tests, family 1e-4 (per device)."""
    res = ks_marginals(coupling, 8, 3000, rows=[0, 1, 7], rng=21, xp="torch", device=device, haar_route=route)
    assert min(r[3] for r in res) > FAMILY_ALPHA / (12 * len(MARGINAL_CASES))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("df", [1, 3, 64])
def test_torch_chi_sampler(device, df):
    """Marsaglia-Tsang chi norms drawn with the torch generator; power: chi_{df+1} rejected."""
    dev = torch.device(device)
    rnd = Random(3, namespace("torch"), dev, torch.float64)
    x = rnd.chi(df, (20000,)).cpu().numpy()
    assert stats.kstest(x, stats.chi(df).cdf).pvalue > FAMILY_ALPHA / 6
    assert stats.kstest(x, stats.chi(df + 1).cdf).pvalue < FAMILY_ALPHA / 6


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("coupling", mc.COUPLINGS)
def test_torch_and_numpy_agree_in_distribution(device, coupling):
    """Two-sample KS of (w_0 + w_1).v, torch vs numpy, d = 5 (6 couplings, family 1e-4);
    power: torch simplex vs numpy orthogonal is rejected."""
    v = np.array([0.5, -0.2, 0.1, 0.3, 0.0])
    a = mc.pair_projections(coupling, v, 5, 6000, rng=1, xp="torch", device=device).cpu().numpy()
    b = mc.pair_projections(coupling, v, 5, 6000, rng=2)
    assert stats.ks_2samp(a[:, 0] + a[:, 1], b[:, 0] + b[:, 1]).pvalue > FAMILY_ALPHA / len(mc.COUPLINGS)
    if coupling == "simplex":  # KS distance between the two pair laws ~ 0.045; critical value 0.024
        a = mc.pair_projections(coupling, v, 5, 20000, rng=4, xp="torch", device=device).cpu().numpy()
        c = mc.pair_projections("orthogonal", v, 5, 20000, rng=3)
        assert stats.ks_2samp(a[:, 0] + a[:, 1], c[:, 0] + c[:, 1]).pvalue < FAMILY_ALPHA / len(mc.COUPLINGS)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("path", ["fast", "full"])
def test_torch_conformity_matches_theory(device, path):
    """Simplex conformity on torch vs theory (d = 16, v = 0.8); power: rejects the ORF form. 4 z-tests."""
    n = 100_000 if path == "fast" else 10_000
    est = mc.empirical_conformity("simplex", 16, 0.8, n_draws=n, rng=5, xp="torch", device=device, path=path)
    with mp.workdps(20):
        rho = float(theory.conformity("simplex", 16, 0.8))
        rho_orf = float(theory.conformity("orthogonal", 16, 0.8))
    assert isinstance(est.mean, float)
    assert abs(est.z(rho)) < z_limit(4)
    assert abs(est.z(rho_orf)) > z_limit(4)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_mse_matches_theory(device):
    d, v = 16, 0.6
    x = np.zeros(d)
    y = np.zeros(d)
    x[0], y[0], x[1], y[1] = v / 2, v / 2, 0.3, -0.3
    est = mc.empirical_mse("orthogonal", x, y, d, 200_000, rng=8, xp="torch", device=device)
    with mp.workdps(20):
        expected = float(theory.prf_mse("orthogonal", d, v, x_norm=np.linalg.norm(x), y_norm=np.linalg.norm(y)))
    assert abs(est.z(expected)) < z_limit(1)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_features_equal_numpy_for_the_same_weights(device):
    w = mc.sample_weights("simplex", 8, 16, rng=0)
    x = np.random.default_rng(1).standard_normal((5, 8))
    wt = torch.asarray(w, device=device)
    xt = torch.asarray(x, device=device)
    for kernel in ("gaussian", "softmax"):
        a = mc.prf_features(xt, wt, kernel=kernel)
        assert a.device.type == device
        assert np.allclose(a.cpu().numpy(), mc.prf_features(x, w, kernel=kernel), rtol=1e-12)
        a, off = mc.prf_features(xt, wt, kernel=kernel, stabilize="row")
        b, offn = mc.prf_features(x, w, kernel=kernel, stabilize="row")
        assert np.allclose(a.cpu().numpy(), b, rtol=1e-12) and np.allclose(off.cpu().numpy(), offn)
    assert np.allclose(mc.rff_features(xt, wt).cpu().numpy(), mc.rff_features(x, w), atol=1e-13)
    # numpy input is placed on the weights' device
    assert mc.prf_features(x, wt).device.type == device
    proj = mc.sample_projection("fast_simplex", 8, 16, rng=2, xp="torch", device=device)
    dense = proj.weights
    assert float(torch.max(torch.abs(proj(xt) - xt @ dense.mT))) < 1e-12


@pytest.mark.parametrize("device", DEVICES)
def test_torch_reproducible_and_generators(device):
    a = mc.sample_weights("simplex_plus", 5, 9, rng=11, xp="torch", device=device)
    b = mc.sample_weights("simplex_plus", 5, 9, rng=11, xp="torch", device=device)
    assert torch.equal(a, b)
    g = torch.Generator(device=device).manual_seed(3)
    c = mc.sample_weights("orthogonal", 5, 5, rng=g, xp="torch", device=device)
    d = mc.sample_weights("orthogonal", 5, 5, rng=g, xp="torch", device=device)
    assert not torch.equal(c, d)
    e = mc.sample_weights("orthogonal", 5, 5, rng=np.random.default_rng(0), xp="torch", device=device)
    f = mc.sample_weights("orthogonal", 5, 5, rng=np.random.default_rng(0), xp="torch", device=device)
    assert torch.equal(e, f)
    est, frob = mc.gram_estimate("simplex", np.eye(3) * 0.3, 3, 50, rng=1, xp="torch", device=device)
    assert isinstance(est.mean, torch.Tensor) and est.mean.device.type == device
    assert isinstance(frob.mean, float)


def test_torch_bad_input():
    with pytest.raises(ValueError, match="device must be a torch device"):
        mc.sample_weights("iid", 3, 3, xp="torch", device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            mc.sample_weights("iid", 3, 3, xp="torch", device="cuda")
    w = mc.sample_weights("iid", 3, 4, rng=0, xp="torch")
    bad = torch.ones(2, 3, dtype=torch.float64)
    bad[0, 0] = math.inf
    with pytest.raises(ValueError, match="X must be finite"):
        mc.prf_features(bad, w)
    with pytest.raises(ValueError, match=r"X has 4 columns but W has 3"):
        mc.rff_features(torch.ones(2, 4, dtype=torch.float64), w)


# ---------------------------------------------------------------------------
# SimRFs+ outside float64 (issue 12 item 4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("d", [3, 8, 64])
def test_torch_float32_simplex_plus(device, d):
    """SimRFs+ in torch float32: the default tolerance follows the dtype (64 eps = 7.6e-6), blocks converge
    in a few passes (was: tol 1e-10 below float32 resolution, 1000 passes per block and a warning about the
    wrong cause), the result is the update's fixed point, and rows are N(0, I_d).

    Fixed point: every vector points away from the resultant of the others (eq. opp_dir_appendix_2), cosine
    -1 to float32 accuracy.  Power: the unconverged simplex start (SimRFs) fails the same check for d = 3, 8."""
    n = 400
    norms = Random(5, namespace("torch"), torch.device(device), torch.float32).chi(d, (n, d))
    assert mc.simplex_plus_tolerance(torch.float32) == pytest.approx(64 * 2.0**-23)
    vec, passes, converged = mc.simplex_plus_vectors(norms, on_unconverged="ignore")
    assert vec.dtype == torch.float32 and vec.device.type == device
    ref = mc.simplex_plus_vectors(norms.double(), on_unconverged="ignore")[2].cpu().numpy()
    conv = converged.cpu().numpy()
    assert conv[ref].mean() > 0.99  # float32 converges wherever float64 does (up to a few polygon cases)
    assert float(torch.median(passes.double())) <= 10

    def away_cosines(v):
        r = v.sum(dim=1, keepdim=True) - v
        return (v * r).sum(-1) / (torch.linalg.vector_norm(v, dim=-1) * torch.linalg.vector_norm(r, dim=-1))

    ok = converged & (torch.linalg.vector_norm(vec.sum(dim=1) - vec[:, 0], dim=-1) > 1e-3)
    cos = away_cosines(vec[ok].double())
    assert float(torch.max(torch.abs(cos + 1))) < 1e-3
    if d <= 8:
        start = mc.simplex_plus_vectors(norms, max_passes=1, on_unconverged="ignore")[0]  # one pass only
        simplex_start = mc.simplex_matrix(d, xp="torch", device=device, dtype="float32")[None] * norms[:, :, None]
        assert float(torch.max(torch.abs(away_cosines(simplex_start.double()) + 1))) > 1e-2
        assert start.shape == vec.shape  # max_passes=1 on torch: no aliasing error at the last pass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # d = 3: a few polygon-edge blocks need > 1000 passes
        w, info = mc.sample_weights("simplex_plus", d, d, rng=2, xp="torch", device=device, dtype="float32",
                                    n_draws=2000, return_info=True)
    assert w.dtype == torch.float32 and bool(info["converged"].float().mean() > 0.99)
    proj = (w[:, 0].double() @ torch.ones(d, dtype=torch.float64, device=device) / math.sqrt(d)).cpu().numpy()
    assert stats.kstest(proj, "norm").pvalue > 1e-4  # row 0 of 2000 independent draws
    assert stats.kstest(1.2 * proj, "norm").pvalue < 1e-4  # power: a 20% scale error is seen


def test_simplex_plus_tolerance_below_the_dtype_resolution_is_refused():
    norms32 = torch.ones((2, 4), dtype=torch.float32) + torch.rand((2, 4), generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"tol must be >= 1.91e-06 \(16 machine epsilons\) for torch.float32"):
        mc.simplex_plus_vectors(norms32, tol=1e-10)
    mc.simplex_plus_vectors(norms32, tol=2e-6)  # just above the floor: fine
    mc.simplex_plus_vectors(norms32.double(), tol=1e-13)  # float64 resolves it
