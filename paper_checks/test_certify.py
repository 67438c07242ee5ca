"""Certificates over continuous domains (issue 40): the reduced domains of the suite, their replay, and power.

Each certifiable claim is certified on d <= SUITE_D (Fig. 6 at its d = 64) and its argument in (0, SUITE_V]
(paper_checks.certify), written as JSON, and replayed from the file by the independent checker
(paper_checks.replay).  The full domains (D = 1024 for the PRF claims, 256 for the RFF gap; V = 8, z up to
16) come from ``python -m paper_checks --certify`` (benchmarks/README.md has their cost).

Power (deterministic: no false alarms to state): the certifier refutes the reversed inequalities and the
printed Cor 4.4 bracket (an erratum), and cannot place z_crit's enclosure or its cells past the root; the
replay rejects a certificate with a gap in its tiling, a recorded enclosure that is not the quantity's, a
small-argument cell wider than its remainder bound allows, a wrong quantity name, and an RFF certificate
extended beyond z_crit (a false inequality).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

pytest.importorskip("flint", reason="certificates need python-flint")

from paper_checks import certify, replay  # noqa: E402
from paper_checks.registry import CLAIMS_BY_ID  # noqa: E402

#: The suite's reduced domain: d <= SUITE_D and argument <= SUITE_V.
SUITE_D = 64
SUITE_V = Fraction(8)
ROOT = Path(__file__).resolve().parents[1]


def _certify_and_replay(claim_id, tmp_path, d_max=SUITE_D, v_max=SUITE_V):
    cert = certify.certify(claim_id, d_max=d_max, v_max=v_max)
    path = certify.write(cert, tmp_path)
    summary = replay.replay_file(path)
    return cert, summary


@pytest.mark.parametrize("claim_id", [
    pytest.param("cor3.3", marks=pytest.mark.claim("cor3.3")),
    pytest.param("cor4.4", marks=pytest.mark.claim("cor4.4")),
    pytest.param("fig6.ordering", marks=pytest.mark.claim("fig6.ordering")),
    pytest.param("beyond.hyperbolic_orthogonal", marks=pytest.mark.claim("beyond.hyperbolic_orthogonal")),
    pytest.param("thm3.4", marks=pytest.mark.claim("thm3.4")),
    pytest.param("eq.binexp", marks=pytest.mark.claim("eq.binexp")),
    pytest.param("sec4.2.zcrit", marks=pytest.mark.claim("sec4.2.zcrit")),
])
def test_certificate_on_the_suite_domain_replays(claim_id, tmp_path):
    """The certificate covers every d of the reduced domain and (0, V] (z: up to z_lo), and the independent
    replay accepts it; its JSON obeys the documented format."""
    cert, summary = _certify_and_replay(claim_id, tmp_path)
    spec = certify.SPECS[claim_id]
    assert cert["claim"] == CLAIMS_BY_ID[claim_id].ref
    dom = cert["domain"]
    assert dom["d_min"] == (spec.fixed_d or 2) and dom["d_max"] == (spec.fixed_d or SUITE_D)
    assert Fraction(dom["v_max"]) == (SUITE_V if spec.s_capped else spec.s_full)
    assert summary["cells"] > 0 and summary["small_cells"] == len(cert["small_v"]["entries"])
    for c in cert["cells"]:  # exact strings, small-argument cells start at 0
        lo, hi = Fraction(c["v_lo"]), Fraction(c["v_hi"])
        assert 0 <= lo < hi
        if "method" in c:
            assert lo == 0 and c["method"] == "small_v"
        else:
            assert Fraction(c["rhs"]["mid"]) - Fraction(c["rhs"]["rad"]) > 0 and c["lhs"] == {"mid": "0", "rad": "0"}
    if claim_id == "sec4.2.zcrit":  # every d >= 3 has z_crit below 8 here: each has its root enclosure
        assert sorted(r["d"] for r in cert["root"]) == list(range(3, SUITE_D + 1))
        for r in cert["root"]:
            z_lo, z_hi = Fraction(r["z_lo"]), Fraction(r["z_hi"])
            assert 0 < z_hi - z_lo < z_lo * Fraction(1, 2 ** 20)
    if spec.all_d is not None:
        assert [e["d"] for e in cert["all_d"]["coefficients"]] == list(range(dom["d_min"], dom["d_max"] + 1))


# ----------------------------------------------------------------------------- power of the certifier


def _negated(cell):
    def wrong(lo, hi, prec):
        lhs, rhs, used = cell(lo, hi, prec)
        return lhs, (-rhs[1], -rhs[0]), used

    return wrong


@pytest.mark.claim("cor3.3", "cor4.4", "fig6.ordering", "beyond.hyperbolic_orthogonal", "thm3.4")
@pytest.mark.parametrize("quantity", sorted(certify.SERIES))
def test_certifier_refutes_the_reversed_series_inequality(quantity):
    d = 64 if quantity.startswith("mse_ratio") else 5
    ev = certify._SeriesEvaluator(certify.SERIES[quantity], d, SUITE_V)
    with pytest.raises(certify.NotCertified) as info:
        certify._tile(_negated(ev.cell), d, Fraction(1, 8), SUITE_V, quantity,
                      {"max_prec": 0, "evaluations": 0})
    assert info.value.refuted


@pytest.mark.claim("cor4.4")
def test_certifier_refutes_the_printed_cor44_bracket():
    """The printed gap of Cor 4.4 (without the 2^k of eq. orf_conformity) has x^k coefficients
    2^k/k! (1 - (d)_k/(d/2)_k) < 0: its certificate is refuted at the small-argument cell."""
    def printed(d, K):
        ratio = certify._rising_ratio(d, K)
        return [e * (2 ** k) * (1 - r) for k, (e, r) in enumerate(zip(certify._exp_series(K), ratio))]

    q = certify._SeriesQuantity("printed_cor44", Fraction(1, 2), 1, 2, 4, printed, "", "")
    for d in (2, 16, 1024):
        with pytest.raises(certify.NotCertified) as info:
            certify._SeriesEvaluator(q, d, SUITE_V).small(SUITE_V)
        assert info.value.refuted


@pytest.mark.claim("eq.binexp")
def test_certifier_refutes_the_reversed_binexp_inequality():
    ev = certify._BinexpEvaluator(3, 8)
    with pytest.raises(certify.NotCertified) as info:
        certify._tile(_negated(lambda lo, hi, prec: ev.cell(8, lo, hi, prec)), 3, Fraction(1, 4), Fraction(1),
                      "binexp", {"max_prec": 0, "evaluations": 0})
    assert info.value.refuted


@pytest.mark.claim("sec4.2.zcrit")
@pytest.mark.parametrize("d", [3, 24])
def test_certifier_cannot_shift_z_crit(d):
    """A bracket 2% above z_crit has no sign change, and cells up to it meet the negative gap."""
    z_c = certify._z_crit_guess(d)
    ev = certify._RffEvaluator(d, SUITE_V)
    z_lo, z_hi, _ = ev.root(z_c)
    with pytest.raises(certify.NotCertified):
        ev.root(z_c * 1.02)
    with pytest.raises(certify.NotCertified):
        certify._tile(ev.cell, d, Fraction(1, 2), z_hi * Fraction(51, 50), "rff", {"max_prec": 0, "evaluations": 0})


# ----------------------------------------------------------------------------- power of the replay


@pytest.fixture(scope="module")
def small_certs():
    """Certificates on d <= 6, argument <= 4 (RFF: up to z_lo) for the tampering checks."""
    return {cid: certify.certify(cid, d_max=6, v_max=4) for cid in ("cor3.3", "sec4.2.zcrit", "eq.binexp")}


def _only(cert, d):
    """A copy of ``cert`` restricted to the single dimension d."""
    out = copy.deepcopy(cert)
    out["domain"]["d_min"] = out["domain"]["d_max"] = d
    out["cells"] = [c for c in out["cells"] if c["d"] == d]
    out["small_v"]["entries"] = [e for e in out["small_v"]["entries"] if e["d"] == d]
    out["root"] = [r for r in out.get("root") or [] if r["d"] == d]
    if out.get("all_d"):
        out["all_d"]["coefficients"] = [e for e in out["all_d"]["coefficients"] if e["d"] == d]
    return out


def _fails(cert, match=None):
    with pytest.raises(replay.ReplayError, match=match):
        replay.replay(json.loads(json.dumps(cert)))


@pytest.mark.claim("cor3.3")
def test_replay_rejects_tampered_prf_certificates(small_certs):
    cert = small_certs["cor3.3"]
    replay.replay(json.loads(json.dumps(cert)))  # the untampered one passes
    cells = [i for i, c in enumerate(cert["cells"]) if c["d"] == 4 and "method" not in c]
    gap = copy.deepcopy(cert)  # a gap in the tiling
    del gap["cells"][cells[1]]
    _fails(gap, "do not tile")
    wrong = copy.deepcopy(cert)  # a positive enclosure above the quantity's range on the cell
    rhs = wrong["cells"][cells[2]]["rhs"]
    rhs["mid"], rhs["rad"] = certify.qstr(10 * (Fraction(rhs["mid"]) + Fraction(rhs["rad"]))), "0"
    _fails(wrong, "misses the recomputed")
    wide = copy.deepcopy(cert)  # the small-argument cell of d = 2 widened to v >= 1, where g_1 < R(X_0)
    new_hi = next(c["v_hi"] for c in sorted((c for c in wide["cells"] if c["d"] == 2 and "method" not in c),
                                            key=lambda c: Fraction(c["v_lo"])) if Fraction(c["v_hi"]) >= 1)
    wide["cells"] = [c for c in wide["cells"] if not (c["d"] == 2 and "method" not in c
                                                       and Fraction(c["v_hi"]) <= Fraction(new_hi))]
    for c in wide["cells"] + wide["small_v"]["entries"]:
        if c["d"] == 2 and ("method" in c or "leading" in c):
            c["v_hi"] = new_hi
    _fails(wide, "small-argument cell")
    relabel = copy.deepcopy(cert)  # another quantity's name
    relabel["inequalities"][0]["quantity"] = "hyperbolic_pair_gap_simplex_orf"
    _fails(relabel)
    missing_d = copy.deepcopy(cert)
    missing_d["cells"] = [c for c in missing_d["cells"] if c["d"] != 5]
    _fails(missing_d, "do not cover")


@pytest.mark.claim("sec4.2.zcrit")
def test_replay_rejects_an_rff_certificate_past_z_crit(small_certs):
    """The false statement 'the RFF gap is positive up to z_hi + 1/8' (its root entry dropped, the last
    cell extended): the replay's recomputed enclosure on that cell is not positive."""
    d = 5
    cert = _only(small_certs["sec4.2.zcrit"], d)
    root = cert["root"][0]
    cert["root"] = []
    end = Fraction(root["z_lo"])
    last = next(c for c in cert["cells"] if c["d"] == d and Fraction(c["v_hi"]) == end)
    last["v_hi"] = certify.qstr(Fraction(root["z_hi"]) + Fraction(1, 8))
    cert["domain"]["v_max"] = last["v_hi"]
    _fails(cert, "does not prove the inequality")
    shifted = copy.deepcopy(small_certs["sec4.2.zcrit"])  # the root bracket moved above z_crit
    r = next(r for r in shifted["root"] if r["d"] == d)
    step = Fraction(r["z_hi"]) - Fraction(r["z_lo"])
    r["z_lo"], r["z_hi"] = certify.qstr(Fraction(r["z_hi"]) + step), certify.qstr(Fraction(r["z_hi"]) + 2 * step)
    tail = next(c for c in shifted["cells"] if c["d"] == d and Fraction(c["v_hi"]) == end)
    tail["v_hi"] = r["z_lo"]
    _fails(shifted)


@pytest.mark.claim("eq.binexp")
def test_replay_rejects_a_binexp_certificate_with_a_missing_k(small_certs):
    cert = copy.deepcopy(small_certs["eq.binexp"])
    cert["cells"] = [c for c in cert["cells"] if not (c["d"] == 3 and c["k"] == 7)]
    _fails(cert, "do not cover")


# ----------------------------------------------------------------------------- the command lines


def _run(args, timeout=600):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


@pytest.mark.claim("cor4.4", "fig6.ordering")
def test_certify_and_replay_command_lines(tmp_path):
    """--certify writes one file per claim and skips a claim outside --d-max with a line; the replay passes
    it (status 0), fails a corrupted copy (status 1, a FAIL line) and refuses a folder without certificates
    (status 2)."""
    out = tmp_path / "certs"
    r = _run(["-m", "paper_checks", "--certify", "cor4.4", "fig6.ordering", "--out", str(out), "--d-max", "8",
              "--v-max", "2"])
    assert r.returncode == 0, r.stderr
    assert "fig6.ordering: skipped" in r.stdout and "cor4.4: proved on d in [2, 8]" in r.stdout
    assert sorted(p.name for p in out.iterdir()) == ["cor4.4.json"]
    r = _run(["-m", "paper_checks.replay", str(out)])
    assert r.returncode == 0 and r.stdout.startswith("PASS cor4.4.json"), r.stdout + r.stderr
    cert = json.loads((out / "cor4.4.json").read_text())
    cell = next(c for c in cert["cells"] if "rhs" in c)
    cell["rhs"]["mid"] = "-" + cell["rhs"]["mid"]
    (out / "cor4.4.json").write_text(json.dumps(cert))
    r = _run(["-m", "paper_checks.replay", str(out)])
    assert r.returncode == 1 and r.stdout.startswith("FAIL cor4.4.json"), r.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _run(["-m", "paper_checks.replay", str(empty)]).returncode == 2
    bad = _run(["-m", "paper_checks", "--certify", "no.such.claim", "--out", str(out)])
    assert bad.returncode == 2 and "certifiable" in bad.stderr


# ----------------------------------------------------------------------------- the certified quantities are the claims'


def _point(cell, s):
    """The certifier's enclosure of G at one point (a cell of width 0), as a float."""
    _, (lo, hi), _ = cell(s, s, 256)
    assert lo <= hi and (hi - lo) <= abs(lo + hi) * Fraction(1, 10 ** 20)
    return float((lo + hi) / 2)


@pytest.mark.claim("cor3.3", "cor4.4", "fig6.ordering", "beyond.hyperbolic_orthogonal", "thm3.4", "eq.binexp",
                   "sec4.2.zcrit")
def test_certified_quantities_are_the_claims_quantities(record):
    """Each certified G, at points, equals the claim's difference computed by theory (mpmath, 30 digits, other
    routes: 1F1, the Taylor route in cos theta, quadrature): a certificate of another quantity would prove
    nothing about the claim."""
    import theory
    from mpmath import mp

    worst = 0.0

    def agree(got, want):
        nonlocal worst
        rel = abs(got - float(want)) / abs(float(want))
        worst = max(worst, rel)
        assert rel < 1e-12, (got, want)

    with mp.workdps(30):
        for d, v in ((2, Fraction(1, 3)), (5, Fraction(3, 2)), (64, Fraction(5))):
            vs = str(float(v))
            s, o = theory.conformity("simplex", d, vs), theory.conformity("orthogonal", d, vs)
            ev = lambda q: certify._SeriesEvaluator(certify.SERIES[q], d, 8).cell  # noqa: E731
            agree(_point(ev("prf_gap_orf_simplex"), v), o - s)
            agree(_point(ev("prf_gap_iid_orf"), v), mp.exp(mp.mpf(vs) ** 2) - o)
            pair = theory.hyperbolic.hyperbolic_pair_term
            hyp = pair("simplex", d, vs) - pair("orthogonal", d, vs)
            agree(_point(ev("hyperbolic_pair_gap_simplex_orf"), v), hyp)
            u2 = mp.mpf(vs) ** 2
            agree(_point(ev("equal_norm_gap_orf_simplex"), v),
                  mp.hyp0f1(mp.mpf(d) / 2, u2 / 2) - mp.hyp0f1(mp.mpf(d) / 2, u2 * (d - 2) / (2 * (d - 1))))
            if d == 64:
                ratio = lambda c: theory.mse_ratio(c, "iid", d, vs)  # noqa: E731
                agree(_point(ev("mse_ratio_gap_orf_simplex"), v), ratio("orthogonal") - ratio("simplex"))
                agree(_point(ev("mse_ratio_gap_iid_orf"), v), 1 - ratio("orthogonal"))
        for d, z in ((3, Fraction(5, 2)), (8, Fraction(1, 2)), (64, Fraction(6))):
            gap = theory.rff_orthogonality_gap(d, str(float(z)), m=2) * 2  # (m-1)/m = 1/2
            agree(_point(certify._RffEvaluator(d, 8).cell, z), gap)
        for d, k, t in ((2, 3, Fraction(1, 2)), (7, 20, Fraction(9, 10))):
            c = -mp.mpf(float(t))
            integral = lambda cc: mp.quad(lambda p: mp.sin(p) ** (d - 1) * (1 + mp.sin(p) * cc) ** k,  # noqa: E731
                                          [0, mp.pi / 2, mp.pi])
            b = certify._BinexpEvaluator(d, 32)
            agree(_point(lambda lo, hi, prec: b.cell(k, lo, hi, prec), t), 1 - integral(c) / integral(0))
    record(worst, "rel (certified G vs theory at points)")
