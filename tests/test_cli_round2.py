"""Second round of command-line findings (exploration helper): z-scores of zero or round-off standard errors,
repeated couplings, ``--out`` checked before any work, strict audit JSON, SIGTERM, an empty ``--only``,
``--redraw-study`` conflicts, sigma-search progress and the help and data-error texts."""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
from fractions import Fraction
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from montecarlo.experiments import __main__ as cli
from montecarlo.experiments import classification
from montecarlo.experiments._common import Z_RTOL, distinct_couplings, format_z, z_score

ROOT = Path(__file__).resolve().parents[1]


def _strict_loads(text):
    """json.loads that refuses the non-standard NaN / Infinity tokens Python writes by default."""
    def refuse(token):
        raise ValueError(f"non-standard JSON token {token}")
    return json.loads(text, parse_constant=refuse)


# ---------------------------------------------------------------------------
# finding 1: z of a paired difference whose standard error is 0 or round-off


def test_z_score_is_na_for_zero_or_round_off_stderr():
    """Two draws whose accuracy differences are the same number (20/69 - 0/69 and 22/69 - 2/69): in exact
    rational arithmetic (fractions) their standard deviation is 0, so z is undefined; numpy's float std gives
    3.9e-17 and the plain division a z of 7.4e15 (the old output, asserted below: it fails the NaN check), and
    an exact 0 gave ZeroDivisionError."""
    n = 69
    diffs = np.array([20 / n - 0 / n, 22 / n - 2 / n])
    se = diffs.std(ddof=1) / math.sqrt(2)
    assert 0 < se < 1e-15 and abs(diffs.mean() / se) > 1e15  # the old z
    exact = [Fraction(20, n) - Fraction(0, n), Fraction(22, n) - Fraction(2, n)]  # the true differences
    assert statistics.stdev(exact) == 0
    assert math.isnan(z_score(diffs.mean(), se, 1.0))
    assert math.isnan(z_score(0.0, 0.0, 1.0)) and math.isnan(z_score(0.3, 0.0)) and math.isnan(z_score(0.3, math.nan))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy RuntimeWarning on the way
        z = z_score(np.array([0.0, 0.5, 0.2]), np.array([0.0, 0.0, 0.1]), 1.0)
    assert math.isnan(z[0]) and math.isnan(z[1])
    # a measured spread keeps its z, checked against statistics on the same per-draw values
    draws = [0.31, 0.29, 0.35, 0.30, 0.27]
    ref = statistics.mean(draws) / (statistics.stdev(draws) / math.sqrt(len(draws)))
    arr = np.array(draws)
    assert z_score(arr.mean(), arr.std(ddof=1) / math.sqrt(arr.size), 1.0) == pytest.approx(ref, rel=1e-12)
    # the threshold is relative: a standard error just above Z_RTOL of the scale counts
    assert z_score(1.0, 3 * Z_RTOL) == pytest.approx(1 / (3 * Z_RTOL))
    assert format_z(math.nan) == "n/a" and format_z(-2.04) == "-2.0" and format_z(math.inf) == "n/a"


def _est(mean, se):
    return classification.PooledEstimate(mean, se, 2, se, math.nan, 1, ())


def test_accuracy_table_format_and_versus_with_zero_stderr():
    """The table of the reproduction (orthogonal and pnc_orthogonal equal on every draw at --seed 2): before,
    ZeroDivisionError in format (paired difference and paper z) and in versus; now 'z n/a' and z NaN."""
    rows = {"banknote": {"d": 4, "m": 4, "mean_v": 2.76, "exact": 0.9855, "orthogonal": _est(0.5217, 0.0),
                         "pnc_orthogonal": _est(0.5217, 0.0),
                         "differences": {("pnc_orthogonal", "orthogonal"): _est(0.0, 0.0)}}}
    table = classification.AccuracyTable(("orthogonal", "pnc_orthogonal"), rows, [], 2,
                                         settings={"paired": True, "split_rng": (0,), "protocol": "resampled"})
    paper = {"banknote": {"orthogonal": (0.7, 0.01)}}
    text = table.format(paper)
    assert "pnc_orthogonal-orthogonal +0.0000+-0.0000 (z n/a)" in text
    assert "(paper 0.7000, z n/a)" in text and "largest |z|" not in text
    (comp,) = table.versus(paper)
    assert math.isnan(comp.z)


def test_table_command_with_equal_couplings_exits_0(capsys):
    """The reported command: rc 0 and 'z n/a', no warning line; repeated couplings are one line, status 2."""
    args = ["table", "--datasets", "banknote", "--couplings", "orthogonal", "pnc_orthogonal", "--n-draws", "2",
            "--split-seeds", "0", "--seed", "2", "--quiet"]
    assert cli.main(args) == 0
    out, err = capsys.readouterr()
    assert "(z n/a)" in out and err == ""
    assert cli.main(["table", "--datasets", "banknote", "--couplings", "iid", "iid", "--n-draws", "2",
                     "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err == f"{cli.PROG}: error: couplings must not repeat a coupling, got ['iid', 'iid'] (iid repeated)\n"


def test_repeated_couplings_are_refused_by_the_library():
    with pytest.raises(ValueError, match="couplings must not repeat a coupling"):
        distinct_couplings(("simplex", "iid", "simplex"))
    with pytest.raises(ValueError, match="couplings must not repeat a coupling"):
        classification.accuracy_table(("iid", "iid"), n_draws=2, datasets=("banknote",))
    assert distinct_couplings("iid") == ("iid",)


# ---------------------------------------------------------------------------
# finding 2 and 5: performer-train's --out and --redraw-study, checked before any training


@pytest.mark.parametrize("extra, needle", [
    (["--out", "/etc/passwd/x.json"], "--out '/etc/passwd/x.json': its folder '/etc/passwd' exists and is not a "
                                      "directory"),
    (["--out", "{tmp}"], "--out '{tmp}' is a directory"),
    (["--out", ""], "--out must be a file path, got an empty string"),
    (["--redraw-study", "--redraw-every", "5", "--arms", "prf-simplex"],
     "--redraw-every conflicts with --redraw-study"),
    (["--redraw-study", "--arms", "exact", "prf-simplex"], "--redraw-study needs feature arms"),
])
def test_performer_train_refuses_before_training(extra, needle, tmp_path, capsys, monkeypatch):
    """Before: trained (minutes at the defaults), printed, then a FileExistsError / IsADirectoryError traceback
    with status 1, or silently ignored --redraw-every and trained exact four times."""
    from montecarlo.experiments import performer_train as pt

    def never(*a, **k):
        raise AssertionError("trained before the options were checked")

    monkeypatch.setattr(pt, "train_arms", never)
    monkeypatch.setattr(pt, "redraw_study", never)
    extra = [e.replace("{tmp}", str(tmp_path)) for e in extra]
    base = ["--seeds", "1", "--epochs", "1", "--train-size", "50", "--quiet"]
    if "--arms" not in extra:
        base += ["--arms", "exact", "prf-simplex"]
    assert cli.main(["performer-train", *base, *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"{cli.PROG}: error: ")
    assert needle.replace("{tmp}", str(tmp_path)) in err
    assert pt.main([*base, *extra]) == 2  # the stand-alone command too
    assert capsys.readouterr().err.startswith(f"{pt.PROG}: error: ")


def test_redraw_study_refuses_the_exact_arm():
    from montecarlo.experiments import performer_train as pt

    with pytest.raises(ValueError, match="exact attention has no features to redraw"):
        pt.redraw_study(1, arms=("exact", "prf-simplex"))


def test_figures_reproduce_checks_out_before_computing(tmp_path, capsys, monkeypatch):
    """Before: fig10 was computed, then 'error: [Errno 2] No such file or directory: ...' without --out."""
    from figures import downstream, reproduce

    def never(*a, **k):
        raise AssertionError("computed before --out was checked")

    monkeypatch.setattr(downstream, "fig10_sigma_search", never)
    f = tmp_path / "a_file"
    f.write_text("x")
    for out in (str(f / "sub"), "/proc/xyz"):
        assert reproduce.main(["--out", out, "--no-progress", "fig10", "--draws", "2", "--n-sigmas", "2"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"{reproduce.PROG}: error: --out ")


# ---------------------------------------------------------------------------
# finding 3: strict JSON from the audit


def test_audit_json_is_strict(tmp_path, capsys):
    """Before: 'norm_norm_rho': NaN (no coupling claimed: no consecutive-norm test) and 'statistic': Infinity
    (a constant sampler), which strict parsers refuse (the parse_constant hook raises on them)."""
    from montecarlo.__main__ import main

    (tmp_path / "samplers.py").write_text("import numpy as np\n"
                                          "def iid(d, m, rng):\n    return rng.standard_normal((m, d))\n"
                                          "def ones(d, m, rng):\n    return np.ones((m, d))\n")
    spec = str(tmp_path / "samplers.py")
    assert main(["audit", f"{spec}:iid", "--d", "4", "--n", "50", "--json", "--no-progress"]) == 0
    rep = _strict_loads(capsys.readouterr().out)
    assert rep["structure"]["norm_norm_rho"] is None
    assert main(["audit", f"{spec}:ones", "--d", "4", "--n", "50", "--json", "--no-progress"]) == 1
    text = capsys.readouterr().out
    rep = _strict_loads(text)
    stats = [t["statistic"] for c in rep["checks"] for t in c["tests"]]
    assert "inf" in stats and "NaN" not in text and "Infinity" not in text


# ---------------------------------------------------------------------------
# finding 4: SIGTERM while a figure is written


def test_sigterm_during_a_figure_leaves_no_part_file(tmp_path):
    """SIGTERM is sent as soon as a temporary ``.NAME.PID.part`` file appears; the command ends with 143 and
    removes it (before: killed by the signal, status -15, the .part file left behind)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    out = tmp_path / "figs"
    out.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "figures", "--only", "fig2", "--quick", "--no-progress",
                             "--n-jobs", "1", "--out", str(out)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        seen, deadline = [], time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline and not seen:
            seen = [p for p in os.listdir(out) if p.endswith(".part")]
            if not seen:
                time.sleep(0.002)
        assert seen, "no temporary file was seen"
        proc.send_signal(signal.SIGTERM)
        text, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 143, text
    assert "terminated (SIGTERM)" in text
    assert not [p for p in os.listdir(out) if p.endswith(".part")]


# ---------------------------------------------------------------------------
# finding 7 and 8: figures' --only


@pytest.mark.parametrize("only", [",", "", " , "])
def test_empty_only_is_an_error_and_writes_nothing(only, tmp_path, capsys):
    from figures import main

    (tmp_path / "index.json").write_text('{"keep": 1}\n')
    with pytest.raises(SystemExit) as exc:
        main(["--only", only, "--out", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "error: --only: no figure named" in err and err.count("\n") == 1
    assert (tmp_path / "index.json").read_text() == '{"keep": 1}\n'


def test_only_fig9_points_to_reproduce(tmp_path, capsys):
    from figures import main

    with pytest.raises(SystemExit) as exc:
        main(["--only", "fig9", "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert "python -m figures.reproduce performer" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# finding 6 and 8: sigma progress, help texts, data errors


def test_sigma_progress_and_quiet(capsys):
    args = ["sigma", "banknote", "--n-draws", "2", "--sigmas", "0.5", "1", "--m-multiplier", "1"]
    assert cli.main(args) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "banknote sigma 0.5 (1/2): exact" in err[0] and "(2/2)" in err[1]
    assert cli.main(args + ["--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_help_texts():
    p = cli._parser()
    assert "``" not in p.description and p.description.endswith(".")
    sigma = p._subparsers._group_actions[0].choices["sigma"].format_help()
    assert "np.float64" not in sigma and "0.05, 0.062965" in sigma


def test_malformed_data_error_says_how_it_counts(tmp_path, capsys):
    (tmp_path / "banknote.txt").write_text("3.6,8.6,-2.8,-0.4,0\n4.5,abc,-2.4,-1.4,1\n")
    assert cli.main(["table", "--datasets", "banknote", "--uci-dir", str(tmp_path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "line 2, column 1: expected a number, got 'abc'; lines count from 1, columns from 0" in err


def test_gram_and_attention_z_are_na_for_zero_stderr():
    """FrobeniusCurve.z and AttentionScan.z / uniform_z (and its format) on a result whose standard errors are
    set to 0: NaN (n/a) without a numpy warning; before, the plain division gave inf or NaN with a
    RuntimeWarning, and the attention table printed '+inf'."""
    import dataclasses

    from montecarlo.experiments import attention, gram

    res = gram.fig7_frobenius(m_values=(4,), n_draws=2, rng=0, n_jobs=1)
    zero = dataclasses.replace(res, diff_stderr={k: np.zeros_like(v) for k, v in res.diff_stderr.items()})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(zero.z("orthogonal", "iid")).all()
        assert np.isfinite(res.z("orthogonal", "iid")).all()
    scan = attention.attention_scan(("iid", "simplex"), seq_lens=(8,), logit_stds=(0.5,), m_values=(4,),
                                    n_draws=2, d_head=4, n_jobs=1)
    zero = dataclasses.replace(scan, diff_stderr={k: np.zeros_like(v) for k, v in scan.diff_stderr.items()},
                               stderr={k: np.zeros_like(v) for k, v in scan.stderr.items()})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(zero.z(("prf", "simplex"), ("prf", "iid"))).all()
        assert np.isnan(zero.uniform_z("prf", "simplex")).all()
        text = zero.format()
    assert "(n/a)" in text and "inf" not in text
