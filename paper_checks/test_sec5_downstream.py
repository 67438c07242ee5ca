"""Sec. 5.3-5.4 and App. B.2/C.1: downstream claims on the paper's UCI data and the
attention mechanism, with montecarlo.experiments (different seeds from
tests/test_experiments_*.py, so these are extra evidence, not repeats).

The classification checks run under the paper's protocol (the authors' split, seed 42;
montecarlo.experiments.uci).  One-sided orderings use z > 4.5 (false alarm 3.4e-6 each);
equivalence ("marginal", "close") uses the TOST statistic (delta - |a - b|) / se > 4.5;
agreement with a printed value uses |z| < 4.5 with z = (reproduced - printed) / reproduced
s.e., with power: the printed value moved by 0.025 is rejected.  The data are the copy shipped
with the package (or $SIMPLEX_RF_UCI_DIR)."""

import math

import numpy as np
import pytest

from paper_checks._compare import Z_CRIT

experiments = pytest.importorskip("montecarlo.experiments")
from montecarlo.experiments import attention as at  # noqa: E402
from montecarlo.experiments import classification as cl  # noqa: E402
from montecarlo.experiments import uci  # noqa: E402

UCI_DIR = uci.resolve_uci_dir()
pytestmark = [pytest.mark.filterwarnings("ignore:SimRFs\\+ update"),
              pytest.mark.filterwarnings("ignore::UserWarning")]
#: A printed value moved by this much must be rejected (power of the agreement checks).
POWER_SHIFT = 0.025


def better(hi, lo):
    return (hi.mean - lo.mean) / math.hypot(hi.stderr, lo.stderr)


def within(a, b, delta):
    return (delta - abs(a.mean - b.mean)) / math.hypot(a.stderr, b.stderr)


@pytest.fixture(scope="module")
def accuracies():
    out = {}
    for name in ("banknote", "wifi"):
        raw = uci.make_split(name, "paper", uci_dir=UCI_DIR)
        out[name] = {c: cl.prf_accuracy(raw, c, raw.d, 3000, rng=70 + i)
                     for i, c in enumerate(("iid", "orthogonal", "simplex", "simplex_plus"))}
        pad = raw.padded()
        out[name, "fast"] = {c: cl.prf_accuracy(pad, c, pad.d, 3000, rng=80 + i)
                             for i, c in enumerate(("orthogonal", "fast_orthogonal", "simplex", "fast_simplex"))}
        out[name, "split"] = raw
    return out


@pytest.mark.claim("fig8.classification")
@pytest.mark.parametrize("name", ["banknote", "wifi"])
def test_fig8_simrf_best(accuracies, name, record):
    acc = accuracies[name]
    for lo in ("iid", "orthogonal"):
        z = better(acc["simplex"], acc[lo])
        record(z, "separation sigma", worst="low")
        assert z > Z_CRIT
    assert better(acc["iid"], acc["orthogonal"]) < Z_CRIT  # ORFs are not significantly worse than IIDRFs
    assert not better(acc["orthogonal"], acc["simplex"]) > Z_CRIT  # power: the reverse claim fails


@pytest.mark.claim("fig8.classification")
@pytest.mark.parametrize("name, mults, n_draws", [("wifi", (1, 2, 4, 10), 400), ("nursery", (1, 2), 150)])
def test_fig8_simrf_best_with_common_random_numbers(name, mults, n_draws, record):
    """Fig. 8 as the main job draws it (the authors' split, common random numbers across couplings):
    SimRF - IID and SimRF - ORF are positive with paired z > 4.5 at every m/d checked (wifi up to 10 d;
    nursery at d and 2 d: its larger cells cost 5 times more and are scored in the claim's notes, where
    SimRF - ORF needs more draws).
    Power: the reversed ordering is not resolved, and the paired z is computed from per-draw
    differences of draws that share their norms and Gaussian blocks (the unpaired formula is the
    larger standard error)."""
    r = cl.classification_curve(name, m_multipliers=mults, n_draws=n_draws, rng=np.random.SeedSequence(400),
                                protocol="paper", paired=True, uci_dir=UCI_DIR)
    assert r.paired and r.protocol == "paper"
    for other in ("iid", "orthogonal"):
        z = r.z("simplex", other)
        for zj in z:
            record(zj, "separation sigma (paired)", worst="low")
        assert np.all(z > Z_CRIT), (other, z)
        assert not np.any(r.z(other, "simplex") > Z_CRIT)  # power: the reverse claim fails


@pytest.mark.claim("fig8.classification")
def test_fig8_tends_to_exact_kernel(accuracies, record):
    """'In the limit of large m performance tends towards the exact kernel result':
    the gap to the exact accuracy shrinks from m = d to m = 10 d (banknote, SimRF)."""
    split = accuracies["banknote", "split"]
    exact = cl.exact_accuracy(split)
    m1 = cl.prf_accuracy(split, "simplex", split.d, 400, rng=90)
    m10 = cl.prf_accuracy(split, "simplex", 10 * split.d, 400, rng=91)
    z = ((exact - m1.mean) - (exact - m10.mean)) / math.hypot(m1.stderr, m10.stderr)
    record(z, "separation sigma", worst="low")
    assert z > Z_CRIT and exact - m10.mean < exact - m1.mean


@pytest.mark.claim("tab2.splus")
@pytest.mark.parametrize("name", ["banknote", "wifi"])
def test_table2_simplex_plus_marginal(accuracies, name, record):
    acc = accuracies[name]
    z = within(acc["simplex_plus"], acc["simplex"], 0.05)
    record(z, "equivalence sigma", worst="low")
    assert z > Z_CRIT
    for c in ("simplex", "simplex_plus"):
        assert better(acc[c], acc["orthogonal"]) > Z_CRIT
    assert not within(acc["simplex"], acc["orthogonal"], 0.05) > Z_CRIT  # power


@pytest.mark.claim("tab3.fast")
@pytest.mark.parametrize("name", ["banknote", "wifi"])
def test_table3_fast_variants_close(accuracies, name, record):
    fast = accuracies[name, "fast"]
    for c in ("orthogonal", "simplex"):
        z = within(fast["fast_" + c], fast[c], 0.035)
        record(z, "equivalence sigma", worst="low")
        assert z > Z_CRIT
    assert better(fast["fast_simplex"], fast["fast_orthogonal"]) > Z_CRIT
    assert not within(fast["fast_simplex"], fast["fast_orthogonal"], 0.035) > Z_CRIT  # power


def _agree(est, printed, record):
    """|z| < Z_CRIT against the printed value, and power: the value moved by POWER_SHIFT is rejected."""
    z = (est.mean - printed) / est.stderr
    record(abs(z), "|z| vs printed", worst="high")
    assert abs(z) < Z_CRIT, (est, printed, z)
    for wrong in (printed - POWER_SHIFT, printed + POWER_SHIFT):
        assert abs((est.mean - wrong) / est.stderr) > Z_CRIT


# Draws per dataset: enough that POWER_SHIFT is > 4.5 s.e. (per-draw s.d. about 0.12 on banknote,
# 0.04 on car and yeast) within the CI budget.
REPRODUCED = {"banknote": 4000, "car": 1500, "yeast": 2000}


@pytest.mark.claim("tab2.values")
@pytest.mark.parametrize("name", list(REPRODUCED))
def test_table2_values_under_the_paper_protocol(name, record):
    """Table 2 (m = d) as printed, on the authors' split: SimRF and SimRF+ within |z| < 4.5 of the
    printed accuracies (banknote, car, yeast; the other datasets are in the claim's notes)."""
    split = uci.make_split(name, "paper", uci_dir=UCI_DIR)
    for i, c in enumerate(("simplex", "simplex_plus")):
        est = cl.prf_accuracy(split, c, split.d, REPRODUCED[name], rng=np.random.SeedSequence([200, i]))
        _agree(est, cl.PAPER_TABLE2[name][i][0], record)


@pytest.mark.claim("tab2.values")
def test_table2_wifi_does_not_reproduce(record):
    """Said with the number, not tuned away: on the authors' split wifi's SimRF accuracy is about
    0.59, the printed 0.6314 is more than 4.5 s.e. above it (1000 draws, s.e. about 0.006)."""
    split = uci.make_split("wifi", "paper", uci_dir=UCI_DIR)
    est = cl.prf_accuracy(split, "simplex", split.d, 1000, rng=210)
    z = (est.mean - cl.PAPER_TABLE2["wifi"][0][0]) / est.stderr
    record(abs(z), "|z| vs printed (wifi, not reproduced)", worst="high")
    assert z < -Z_CRIT and 0.56 < est.mean < 0.62


@pytest.mark.claim("tab3.values")
@pytest.mark.parametrize("name", ["banknote", "yeast"])
def test_table3_values_under_the_paper_protocol(name, record):
    """Table 3 (zero-padded to a power of two, m = p) as printed, on the authors' split: all five
    columns within |z| < 4.5 (banknote p = 4, yeast p = 8)."""
    split = uci.make_split(name, "paper", uci_dir=UCI_DIR).padded()
    for i, c in enumerate(cl.TABLE3_COUPLINGS):
        est = cl.prf_accuracy(split, c, split.d, REPRODUCED[name], rng=np.random.SeedSequence([300, i]))
        _agree(est, cl.PAPER_TABLE3[name][c][0], record)


@pytest.mark.claim("fig10.sigma")
def test_fig10_sigma_search(record):
    """App. C.1 on wifi (validation split, m = 10 d): the IID PRF optimum lies below
    the exact kernel's, where PRFs beat their own accuracy at the exact optimum."""
    res = cl.sigma_search("wifi", sigmas=(0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0), n_draws=20, rng=5, uci_dir=UCI_DIR)
    i, j = int(np.argmax(res.mean)), int(np.argmax(res.exact))
    z = (res.mean[i] - res.mean[j]) / math.hypot(res.stderr[i], res.stderr[j])
    record(z, "separation sigma", worst="low")
    assert res.best_sigma < res.best_exact_sigma and z > Z_CRIT


@pytest.mark.claim("sec5.4.attention")
def test_attention_mechanism(record):
    """SimRF < ORF < IID relative error of the PRF attention output (d = 64, L = 256,
    logit std 0.1) at m = 64 and the paper's m = 130."""
    res = at.attention_errors(("iid", "orthogonal", "simplex"), (256,), (64, 130), 100, rng=11, matrix_max_len=0,
                              logit_std=0.1, data_rng=12)
    for m in (64, 130):
        for lo, hi in (("simplex", "orthogonal"), ("orthogonal", "iid")):
            z = (res.output_mean[hi, 256, m] - res.output_mean[lo, 256, m]) / math.hypot(
                res.output_se[hi, 256, m], res.output_se[lo, 256, m])
            record(z, "separation sigma", worst="low")
            assert z > Z_CRIT
