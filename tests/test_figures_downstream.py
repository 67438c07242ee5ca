"""Figs. 8 and 10 with exposed protocol and effort (``python -m figures.reproduce``), and the new attention
figure (``new_attention_scan``): what their JSON states, and that the plotted numbers are the experiments'.
"""

import json

import numpy as np

from figures import lookup, reproduce
from figures.downstream import FIG8_EFFORT, FIG8_QUICK
from montecarlo.experiments import attention as at, classification as cl


def _json(path):
    with open(path) as fh:
        return json.load(fh)


def test_fig8_from_the_command_line_states_protocol_and_effort(tmp_path, capsys):
    assert reproduce.main(["--out", str(tmp_path), "--no-progress", "--seed", "3", "fig8", "--protocol", "resampled",
                           "--splits", "2", "--draws", "3", "--m-multipliers", "1", "2",
                           "--datasets", "banknote", "wifi"]) == 0
    assert capsys.readouterr().out.strip().startswith("fig8_nonparametric -> ")
    data = _json(tmp_path / "fig8_nonparametric.json")
    assert data["protocol"] == "resampled" and data["split_seeds"] == [0, 1] and data["n_draws"] == 3
    assert data["m_multipliers"] == [1, 2] and set(data["results"]) == {"banknote", "wifi"}
    assert "over draws and the splits" in data["error_bar"]
    r = data["results"]["banknote"]
    assert r["split_seeds"] == [0, 1] and len(r["exact_per_split"]) == 2
    # the plotted numbers are classification_curve's (same seed stream as the figure)
    from figures._context import Context

    ctx = Context(out=str(tmp_path), seed=3, progress=False)
    ref = cl.classification_curve("banknote", m_multipliers=(1, 2), n_draws=3, rng=ctx.rng("fig8/banknote"),
                                  protocol="resampled", split_rng=(0, 1))
    assert np.allclose(r["mean"]["simplex"], ref.mean["simplex"], rtol=0, atol=0)
    assert np.allclose(r["stderr"]["iid"], ref.stderr["iid"], rtol=1e-15)


def test_main_job_effort_is_the_paper_protocol_paired_and_sized():
    """The main job's Fig. 8: the authors' split and m/d grid, common random numbers, 150 draws per cell
    (chess 16: its draws cost 5 times nursery's); the quick run is smaller."""
    assert FIG8_EFFORT.protocol == "paper" and FIG8_EFFORT.split_seeds is None and FIG8_EFFORT.paired
    assert FIG8_EFFORT.m_multipliers == (1, 2, 4, 10) and FIG8_QUICK.n_draws < FIG8_EFFORT.n_draws
    assert FIG8_EFFORT.draws_for("nursery") == FIG8_EFFORT.draws_for("wifi") == 150
    assert FIG8_EFFORT.draws_for("chess") == 16
    assert lookup("new_attention_scan").paper_label is None


def test_fig8_json_holds_the_paired_differences_and_the_verdicts(tmp_path):
    """The JSON's paired differences are classification_curve's (same seed stream) with z = mean / se;
    each verdict follows from the two SimRF z-scores at RESOLVED_Z; --draws N sets the same draws on
    every dataset (no chess exception) and --independent switches the pairing off."""
    from figures._context import Context
    from figures.downstream import FIG8_PAIRS, RESOLVED_Z

    from figures.downstream import with_effort

    assert reproduce.main(["--out", str(tmp_path), "--no-progress", "--n-jobs", "2", "fig8", "--draws", "30",
                           "--datasets", "wifi", "banknote", "--m-multipliers", "1", "4"]) == 0
    data = _json(tmp_path / "fig8_nonparametric.json")
    assert data["paired"] is True and data["n_draws_per_dataset"] == {"banknote": 30, "wifi": 30}
    assert with_effort(FIG8_EFFORT, n_draws=30, draws=()).draws_for("chess") == 30  # what --draws N passes
    assert data["resolved_z"] == RESOLVED_Z and "common random numbers" in data["caption"]
    ctx = Context(out=str(tmp_path), seed=0, progress=False)
    ref = cl.classification_curve("wifi", m_multipliers=(1, 4), n_draws=30, rng=ctx.rng("fig8/wifi"),
                                  protocol="paper", paired=True, n_jobs=1)
    r = data["results"]["wifi"]
    for a, b in FIG8_PAIRS:
        cell = r["differences"][f"{a} - {b}"]
        assert cell["mean"] == ref.diff_mean[a, b].tolist() and cell["stderr"] == ref.diff_stderr[a, b].tolist()
        assert np.allclose(cell["z"], np.array(cell["mean"]) / np.array(cell["stderr"]), rtol=1e-14)
    z_iid, z_orf = r["differences"]["simplex - iid"]["z"], r["differences"]["simplex - orthogonal"]["z"]
    for v, a, b in zip(r["verdict"], z_iid, z_orf):
        assert v == ("best" if min(a, b) >= RESOLVED_Z else "behind" if min(a, b) <= -RESOLVED_Z else "tied")
    assert reproduce.main(["--out", str(tmp_path), "--no-progress", "fig8", "--draws", "3", "--datasets", "wifi",
                           "--m-multipliers", "1", "--independent"]) == 0
    data = _json(tmp_path / "fig8_nonparametric.json")
    assert data["paired"] is False and "independent draws per coupling" in data["caption"]


def test_attention_scan_figure_numbers_and_where_couplings_separate(tmp_path):
    """The reproduce command writes the scan it was asked for; its paired z are the differences over their
    standard errors, and each difference is the difference of the two cells' means (the draws are paired);
    at a small logit scale the couplings separate (SimRF < ORF, z < -3.09 over 30 draws at m = 130, L = 64,
    logit std 0.05) and at a large one they do not (|z| < 3.09 at logit std 2)."""
    assert reproduce.main(["--out", str(tmp_path), "--no-progress", "attention", "--seq-lens", "16", "32",
                           "--logit-stds", "0.1", "1", "--draws", "3"]) == 0
    data = _json(tmp_path / "new_attention_scan.json")
    assert data["seq_lens"] == [16, 32] and data["logit_stds"] == [0.1, 1.0] and data["n_draws"] == 3
    assert data["default_logit_std"] == at.DEFAULT_LOGIT_STD and 130 in data["m_values"]
    for key, z in data["paired_z"].items():
        a, b = key.split(" - ")
        diff, se = np.array(data["paired_diff_mean"][key]), np.array(data["paired_diff_stderr"][key])
        assert np.allclose(z, diff / se, rtol=1e-12)
        assert np.allclose(diff, np.array(data["mean"][a]) - np.array(data["mean"][b]), rtol=1e-9, atol=1e-12)
    scan = at.attention_scan(seq_lens=(64,), logit_stds=(0.05, 2.0), m_values=(130,), n_draws=30, rng=8,
                             data_rng=2)
    z = np.asarray(scan.z(("prf", "simplex"), ("prf", "orthogonal")))
    assert z.shape[0] == 2 and z[0].max() < -3.09 and np.all(np.abs(z[1]) < 3.09)


# ---------------------------------------------------------------------------
# Round 2 of the experiments' Python API review: the paired IID budget, Split validation, accuracy_table's
# sigmas keys, TrainConfig validation and distinct arms, NaN-safe Fig. 8 verdicts, attention_errors' record of
# the caller's data.  Every test names the old behaviour it would have caught.


class _Curve:
    def __init__(self, z_iid, z_orf):
        self.z_iid, self.z_orf = np.array(z_iid, dtype=float), np.array(z_orf, dtype=float)

    def z(self, a, b):
        assert a == "simplex"
        return self.z_iid if b == "iid" else self.z_orf


def test_fig8_verdicts_do_not_depend_on_the_order_of_a_nan():
    """Before: min(5, nan) = 5 gave 'best' while min(nan, 5) = nan gave 'tied'.  A NaN resolves nothing:
    'best' needs both wins, 'behind' one resolved loss."""
    from figures.downstream import RESOLVED_Z, fig8_verdicts

    nan, z = np.nan, RESOLVED_Z
    cases = {(5.0, nan): "tied", (nan, -5.0): "behind", (nan, nan): "tied", (5.0, 5.0): "best",
             (5.0, -5.0): "behind", (z, z): "best", (-z, 0.0): "behind", (2.9, 10.0): "tied"}
    for (a, b), want in cases.items():
        got = fig8_verdicts(_Curve([a, b], [b, a]))
        assert got == [want, want], ((a, b), got)
