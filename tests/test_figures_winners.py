"""The who-wins-where map (figures.winners): its JSON against closed forms assembled here from their parts.

The figure evaluates every contestant through theory.kernel_mse at |x| = |y| = v/2; these tests rebuild
the scaled MSE m e^{2(|x|^2+|y|^2)} MSE from the per-direction variances and pair terms (the PRF
conformity, the hyperbolic pair term, the OPRF second moment with the pair-term theorem) at other norms,
pick the winner directly, and check the figure's bounds, its m = 4d statement and its Monte Carlo entry.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from mpmath import mp

import theory
from figures import main, winners
from figures.reproduce import main as reproduce_main
from paper_checks._compare import Z_CRIT

KEYS = {"name", "paper_label", "caption", "ds", "vs", "vs_text", "m_over_d", "contestants", "baseline", "quantity",
        "winner", "decided", "ratio", "ratio_bounds", "runner_up", "margin", "A_star", "scaled_mse_lower",
        "scaled_mse_upper", "status", "m_check_max_rel", "full", "simplex_plus_monte_carlo", "resolved_z",
        "profiles", "source", "settings", "cell_text", "not_evaluated"}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("winners")
    assert main(["--quick", "--only", "new_winners_map", "--out", str(out), "--no-progress"]) == 0
    for ext in ("png", "pdf"):
        assert (out / f"new_winners_map.{ext}").stat().st_size > 5000
    return json.loads((out / "new_winners_map.json").read_text())


def _assembled(kind, coupling, d, v):
    """m e^{2(|x|^2+|y|^2)} MSE at m = d from the parts (theorem couplings, and pnc for prf/hyperbolic)."""
    v = mp.mpf(v)
    e = mp.exp(v * v)
    if coupling == "pnc_orthogonal":  # d/2 norm-coupled pairs (one per feature) and d - 2 ORF pairs per feature
        pairs = [(1, theory.conformity("pnc_orthogonal", d, v)), (d - 2, theory.conformity("orthogonal", d, v))]
    elif kind == "hyperbolic":
        pairs = [(d - 1, theory.hyperbolic.hyperbolic_pair_term(coupling, d, v))]
    else:  # the OPRF pair term is the PRF conformity for iid / orthogonal / simplex (theory.oprf's theorem)
        pairs = [(d - 1, theory.conformity(coupling, d, v))]
    if kind == "prf":
        var = e * (e - 1)
    elif kind == "hyperbolic":
        var = (e - 1) ** 2 / 2
    else:
        var = theory.oprf.second_moment(d, v, theory.oprf.optimal_a(v * v / d)) - e
    return var + mp.fsum(w * (p - e) for w, p in pairs)


def test_json_has_the_expected_keys(data):
    assert set(data) == KEYS
    assert data["ds"] == [2, 8, 64] and data["vs_text"] == ["0.1", "1", "3"] and data["m_over_d"] == [1, 4]
    assert set(data["contestants"]) == {f"{k}/{c}" for k in winners.KINDS for c in winners.COUPLINGS}
    assert data["baseline"] == "prf/simplex" and data["resolved_z"] == Z_CRIT
    assert all(all(row) for row in data["decided"])
    assert data["m_check_max_rel"] < 1e-12


@pytest.mark.parametrize("d, v", [(8, "1"), (64, "0.1"), (2, "3")])
def test_winner_matches_a_direct_comparison(data, d, v):
    """Every contestant rebuilt from its parts (20 digits); the smallest is the figure's winner, its ratio to
    SimRF-PRF lies in the figure's bounds, and the bounds of the figure hold the rebuilt values."""
    i, j = data["ds"].index(d), data["vs_text"].index(v)
    with mp.workdps(20):
        values = {f"{k}/{c}": _assembled(k, c, d, v) for k in winners.KINDS for c in winners.CHEAP}
        values.update({f"{k}/pnc_orthogonal": _assembled(k, "pnc_orthogonal", d, v) for k in ("prf", "hyperbolic")})
    best = min(values, key=values.get)
    assert data["winner"][i][j] == best
    ratio = float(values[best] / values["prf/simplex"])
    lo, hi = data["ratio_bounds"][i][j]
    assert lo * (1 - 1e-12) <= ratio <= hi * (1 + 1e-12)
    for name, x in values.items():
        lo, hi = data["scaled_mse_lower"][name][i][j], data["scaled_mse_upper"][name][i][j]
        assert lo * (1 - 1e-12) <= float(x) <= hi * (1 + 1e-12), name
        if data["status"][name][i][j] == "exact":
            assert abs(hi / float(x) - 1) < 1e-12, name
    # power: the runner-up the figure names is not the winner, and is beaten
    assert data["runner_up"][i][j] != best and data["margin"][i][j] > 0


def test_scaled_mse_does_not_depend_on_the_norms():
    """kernel_mse at x = y (|x| = |y| = v/2) times m e^{v^2} equals theory.mse._kind_inner (no prefactor),
    and kernel_mse at other norms with the same v times m e^{2(|x|^2+|y|^2)}: for every positive kind."""
    from theory.mse import _kind_inner

    d, v, xn, yn = 8, mp.mpf("1.5"), mp.mpf("0.4"), mp.mpf("1.3")
    with mp.workdps(20):
        for kind in winners.KINDS:
            for c in winners.CHEAP:
                a = winners.scaled_mse(kind, c, d, v, d)
                params = {"A": theory.oprf.optimal_a(v * v / d)} if kind == "oprf" else {}
                b = _kind_inner(kind, c, d, d, v, params)
                other = d * mp.exp(2 * (xn ** 2 + yn ** 2)) * theory.kernel_mse(c, d, v, kind=kind, x_norm=xn,
                                                                                 y_norm=yn)
                assert abs(a / b - 1) < 1e-14 and abs(other / b - 1) < 1e-14


def test_pnc_bracket_holds_and_is_not_trivial():
    """The convex-order / Jensen bracket of the pnc contestants contains the quadrature value and its lower
    end is within 10% of it; power: another contestant of the kind (SimRF) falls outside the bracket."""
    d, v = 8, "1"
    with mp.workdps(20):
        for kind in ("prf", "hyperbolic"):
            exact = winners.scaled_mse(kind, "pnc_orthogonal", d, v, d)
            lo, hi = winners.pnc_bracket(winners.scaled_mse(kind, "orthogonal", d, v, d), d, v, d)
            assert lo < exact < hi
            assert (exact - lo) / exact < 0.1
            other = winners.scaled_mse(kind, "simplex", d, v, d)
            assert not lo <= other <= hi


def test_m_equal_4d_gives_the_same_map_for_pnc():
    """kernel_mse at m = 4d (four blocks) times 4d e^{v^2} equals the m = d scaled MSE for a norm-coupled
    contestant (the figure checks the theorem couplings); power: m = d + 1 (a partial block) differs."""
    d, v = 8, "0.5"
    with mp.workdps(20):
        one = winners.scaled_mse("hyperbolic", "pnc_orthogonal", d, v, d)
        four = winners.scaled_mse("hyperbolic", "pnc_orthogonal", d, v, 4 * d)
        partial = winners.scaled_mse("hyperbolic", "pnc_orthogonal", d, v, d + 1)
    assert abs(four / one - 1) < 1e-15
    assert abs(partial / one - 1) > 1e-3
    assert winners.pnc_weight(d, 4 * d) == winners.pnc_weight(d, d) == 1


def test_simplex_plus_entry(data):
    """The Monte Carlo entry: the point (8, 1) is won by OPRF-SimRF; its z-scores are (estimate - bound) / s.e.
    and SimRF+ with OPRFs is resolved worse there (z > 4.5 with 4000 draws)."""
    (p,) = data["simplex_plus_monte_carlo"]
    assert (p["d"], p["v"], p["kind"], p["winner"]) == (8, 1.0, "oprf", "oprf/simplex")
    lo, hi = p["winner_mse_bounds"]
    assert lo == hi == pytest.approx(data["scaled_mse_upper"]["oprf/simplex"][1][1] * math.exp(-1) / 8, rel=1e-12)
    assert p["z_upper"] == pytest.approx((p["mse"] - hi) / p["stderr"])
    assert p["resolved"] and not p["simplex_plus_wins"] and p["z_upper"] > Z_CRIT


def test_bad_effort_is_refused(tmp_path):
    from figures._context import Context

    ctx = Context(out=str(tmp_path), quick=True, progress=False)
    with pytest.raises(ValueError, match="effort keys must be among"):
        winners.new_winners_map(ctx, {"grid": 3})


def test_reproduce_command(tmp_path, capsys):
    """figures.reproduce winners on a one-cell grid writes the figure; a bad --ds is a one-line error."""
    args = ["--out", str(tmp_path), "--no-progress", "winners", "--ds", "4", "--vs", "0.5"]
    assert reproduce_main(args) == 0
    out = json.loads((tmp_path / "new_winners_map.json").read_text())
    assert out["ds"] == [4] and out["winner"] == [["hyperbolic/pnc_orthogonal"]]
    assert np.isclose(out["vs"][0], 0.5)
    with pytest.raises(SystemExit) as exc:
        reproduce_main(["--out", str(tmp_path), "winners", "--ds", "1"])
    assert exc.value.code == 2


def test_cell_without_the_orthogonal_value_leaves_pnc_out(monkeypatch):
    """A cell whose kind/orthogonal closed form did not converge read ``upper['prf/orthogonal']`` for the
    pnc_orthogonal bracket: KeyError 'prf/orthogonal' (a traceback from ``reproduce winners``).  Now the bracket
    is 'not evaluated' with the reason, the other contestants decide, and the cell is otherwise whole; without
    the baseline the cell raises ConvergenceError naming d and v (one line, status 1, on the command line)."""
    real = winners.scaled_mse

    def failing(failed):
        def f(kind, coupling, d, v, m, **params):
            if f"{kind}/{coupling}" in failed:
                raise theory.errors.ConvergenceError("made to fail")
            return real(kind, coupling, d, v, m, **params)
        return f

    monkeypatch.setattr(winners, "scaled_mse", failing({"prf/orthogonal", "hyperbolic/orthogonal"}))
    c = winners.cell(4, 1.0, 4)
    for kind in ("prf", "hyperbolic"):
        assert c["status"][f"{kind}/pnc_orthogonal"].startswith("not evaluated (its bracket needs")
        assert c["upper"][f"{kind}/pnc_orthogonal"] is None and c["status"][f"{kind}/orthogonal"].startswith("failed")
    assert c["winner"] in winners.CONTESTANTS and c["upper"][c["winner"]] is not None
    monkeypatch.setattr(winners, "scaled_mse", failing({winners.BASELINE}))
    with pytest.raises(theory.errors.ConvergenceError, match=r"no cell at d = 4, v = 1.0: the baseline prf/simplex"):
        winners.cell(4, 1.0, 4)


def test_reproduce_winners_refuses_v_beyond_the_map(tmp_path, capsys):
    """``--vs 1e308`` (beyond the closed forms' reach, 1e300) gave ``KeyError: 'prf/orthogonal'`` after every
    contestant failed; v = 20 at d = 2 a RuntimeError from the m = 4d check (the float64 values were inf).  Now
    argparse refuses --vs above 1e300, and a v whose scaled MSEs exceed float64 is a one-line error (status 2)."""
    with pytest.raises(SystemExit) as exc:
        reproduce_main(["--out", str(tmp_path), "--no-progress", "winners", "--vs", "1e308", "--ds", "2"])
    assert exc.value.code == 2 and "<= 1e+300" in capsys.readouterr().err
    assert reproduce_main(["--out", str(tmp_path), "--no-progress", "winners", "--vs", "20", "--ds", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "v = 20.0 is too large for the winners' map at d = 2" in err
    assert not any(p.suffix in (".png", ".pdf", ".json") for p in tmp_path.rglob("*"))


# ---------------------------------------------------------------------------
# Issue 42's command-line findings, each reproduced first: help that states each default once, ``winners
# --draws`` that was silently ignored, ``table --protocol paper`` and ``split-spread`` that did not say where the
# gaps come from or how many draws resolve them, the README's Dask recipe that failed as a script, and progress
# inside long work (Fig. 8 by blocks of draws, the attention scan by cells, the performer experiment by steps).


def test_winners_draws_without_a_point_in_the_grid_is_an_error(tmp_path, capsys):
    """``winners --ds 4 --vs 0.5 --draws 500``: no simplex_plus point lies in that grid, and the draws were
    silently ignored (status 0).  Now a parser error (status 2, nothing written); a point given as ``1.0`` is the
    point ``1`` of the main job's list (it was missed by string comparison)."""
    from figures import winners
    from figures.reproduce import main

    with pytest.raises(SystemExit) as exc:
        main(["--out", str(tmp_path), "--no-progress", "winners", "--ds", "4", "--vs", "0.5", "--draws", "500"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--draws 500: no simplex_plus Monte Carlo point" in err and err.count("\n") == 1
    assert not list(tmp_path.iterdir())
    assert winners.mc_points_in(winners.EFFORT["mc_points"], (8,), ("1.0",)) == [(8, "1.0")]
    assert winners.mc_points_in(winners.EFFORT["mc_points"], (8,), ("0.9",)) == []
