"""The Fig. 9 analogue (montecarlo.experiments.performer_train, figures.performer) at a tiny configuration:
1 epoch, 2 seeds, 100 training images (issue 20 item 5; the full run is in the module docs)."""

import argparse
import json
import math
import re
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

from montecarlo.experiments import __main__ as cli  # noqa: E402
from montecarlo.experiments import performer_train as pt  # noqa: E402

TINY = ["--seeds", "2", "--epochs", "1", "--train-size", "100", "--quiet"]


def test_subcommand_runs_and_writes_json(tmp_path, capsys):
    """add_parser + run (the wiring of ``python -m montecarlo.experiments performer-train``): every arm, per-epoch
    accuracies in [0, 1], the JSON written (no temporary file left), paired arms start from the same weights."""
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    pt.add_parser(sub)
    out = tmp_path / "res" / "performer.json"
    args = parser.parse_args(["performer-train", *TINY, "--out", str(out)])
    assert pt.run(args) == 0
    text = capsys.readouterr().out
    assert "exact" in text and "prf-simplex" in text
    data = json.loads(out.read_text())
    assert data["arms"] == [a[0] for a in pt.ARMS] and data["seeds"] == [0, 1]
    for arm in data["arms"]:
        acc = np.array(data["accuracy"][arm])
        assert acc.shape == (2, 1) and np.all((acc >= 0) & (acc <= 1))
    assert data["config"]["n_train"] == 100 and data["config"]["n_test"] == pt.TEST_SIZE
    assert sorted(p.name for p in out.parent.iterdir()) == ["performer.json"]


def test_seeds_reproduce_and_arms_differ():
    """The same seed reproduces a run exactly; a PRF arm and exact attention differ (power: the arms are really
    different models); one run leaves torch's global random state untouched."""
    import torch

    cfg = pt.TrainConfig(epochs=2, train_size=150)
    data = pt.digits_tokens(150)
    state = torch.get_rng_state()
    a = pt.train_one("prf", "simplex", 3, cfg, data)
    assert torch.equal(torch.get_rng_state(), state)
    assert np.array_equal(a, pt.train_one("prf", "simplex", 3, cfg, data))
    assert not np.array_equal(a, pt.train_one(None, None, 3, cfg, data)) or \
        not np.array_equal(a, pt.train_one("prf", "orthogonal", 3, cfg, data))


def test_redraw_intervals_reach_the_module():
    """redraw_every='epoch' redraws once per epoch's steps; an int every so many steps."""
    cfg = pt.TrainConfig(redraw_every="epoch")
    model = pt._model(cfg, "prf", "simplex", 0, steps_per_epoch=41)
    assert {b.att.prf.redraw_every for b in model.blocks} == {41}
    model = pt._model(pt.TrainConfig(redraw_every=10), "prf", "simplex", 0, steps_per_epoch=41)
    assert {b.att.prf.redraw_every for b in model.blocks} == {10}


def test_command_line_contract(tmp_path):
    """--help exits 0 and runs nothing; a bad option is one line and status 2; --redraw-study runs."""
    cmd = [sys.executable, "-m", "montecarlo.experiments.performer_train"]
    res = subprocess.run([*cmd, "--help"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0 and "--redraw-study" in res.stdout
    res = subprocess.run([*cmd, "--seeds", "0"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    res = subprocess.run([*cmd, "--redraw-every", "sometimes"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 2
    out = tmp_path / "redraw.json"
    res = subprocess.run([*cmd, "--redraw-study", "--arms", "prf-simplex", "--seeds", "2", "--epochs", "1",
                          "--train-size", "60", "--quiet", "--out", str(out)], capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, res.stderr
    assert set(json.loads(out.read_text())["redraw_study"]) == {"never", "10", "100", "epoch"}


def test_figure(tmp_path):
    """figures.performer draws the curves of every arm at a tiny effort and records them in the JSON."""
    pytest.importorskip("matplotlib")
    from figures._context import Context
    from figures.performer import fig9_performer_digits

    ctx = Context(out=str(tmp_path), quick=True, progress=False)
    fig9_performer_digits(ctx, {"seeds": 2, "epochs": 1, "train_size": 80})
    data = json.loads((tmp_path / "fig9_performer_digits.json").read_text())
    assert data["paper_label"] == "performer_fig" and len(data["arms"]) == 5
    assert (tmp_path / "fig9_performer_digits.png").exists()


def test_counts_beyond_their_documented_limits_are_refused_at_once(capsys):
    """Issue 38: ``--layers 99999999999999999999`` was accepted (the model built block after block, memory growing
    ~13 MB/s) and ``--seeds 99999999999999999999`` trained seed after seed.  Now --layers <= MAX_LAYERS = 64 and
    --seeds <= MAX_SEEDS = 1000 (argparse: one line, status 2; the API: ValueError naming them), and the sizes
    without a cap of their own are held to the allocation budget before any work (d_model: the parameters,
    epochs: the accuracies; numpy's 'Maximum allowed dimension exceeded' and torch's allocator error before)."""
    assert (pt.MAX_LAYERS, pt.MAX_SEEDS) == (64, 1000) and pt.TrainConfig(layers=64).layers == 64
    for argv, text in ((["--layers", "99999999999999999999"], r"argument --layers: must be an integer >= 1 and <= 64, "
                                                            "got 99999999999999999999"),
                       (["--seeds", "1001"], r"argument --seeds: must be an integer >= 1 and <= 1000, got 1001"),
                       (["--seeds", "9" * 5000], r"argument --seeds: .* got an integer of 5000 digits")):
        with pytest.raises(SystemExit) as exc:
            pt.main(argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and len(err.strip().splitlines()) == 1 and re.search(text, err), err
    for argv, text in ((["--d-model", "1000000", "--heads", "1"], r"the model's parameters \(layers = 2, d_model = "
                                                                    r"1000000\) would need 1.6e\+13 entries"),
                       (["--epochs", "99999999999999999999"], r"5 arms x 5 seeds x 99999999999999999999 epochs")):
        assert pt.main([*argv, "--quiet"]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and re.search(text, err), err
    with pytest.raises(ValueError, match=r"TrainConfig.layers must be an integer >= 1 and <= 64, got 65"):
        pt.TrainConfig(layers=65)
    with pytest.raises(ValueError, match=r"seeds must be an integer >= 1 and <= 1000, got 1001"):
        pt.train_arms(seeds=1001)


# ---------------------------------------------------------------------------
# Second round of command-line findings (exploration helper): z-scores of zero or round-off standard errors,
# repeated couplings, ``--out`` checked before any work, strict audit JSON, SIGTERM, an empty ``--only``,
# ``--redraw-study`` conflicts, sigma-search progress and the help and data-error texts.


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


# ---------------------------------------------------------------------------
# Issue 42's command-line findings, each reproduced first: help that states each default once, ``winners
# --draws`` that was silently ignored, ``table --protocol paper`` and ``split-spread`` that did not say where the
# gaps come from or how many draws resolve them, the README's Dask recipe that failed as a script, and progress
# inside long work (Fig. 8 by blocks of draws, the attention scan by cells, the performer experiment by steps).


def test_performer_progress_by_steps():
    """The performer experiment reported once per finished run; now ``on_step`` is called after every optimiser
    step of every run (arms x seeds x epochs x steps per epoch), and ``progress`` lines carry epoch and step."""
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    from montecarlo.experiments import performer_train as pt

    cfg = pt.TrainConfig(epochs=2, train_size=40, batch_size=16)
    calls, lines = [], []
    res = pt.train_arms(("exact", "prf-simplex"), 1, cfg, seed=0, progress=lines.append,
                        on_step=lambda *a: calls.append(a))
    steps = math.ceil(40 / 16)
    assert len(calls) == 2 * 1 * 2 * steps
    assert calls[:steps] == [(0, k, steps) for k in range(1, steps + 1)]
    assert res.arms == ("exact", "prf-simplex") and np.all(np.isfinite(res.accuracy["exact"]))
    assert any("final test accuracy" in ln for ln in lines)
    reporter = pt._step_reporter(lines.append, "prf-simplex", 3, 2, None)
    time.sleep(1.05)
    reporter(1, 2, 3)
    assert lines[-1] == "prf-simplex seed 3: epoch 2/2, step 2/3"


# ---------------------------------------------------------------------------
# Round 2 of the experiments' Python API review: the paired IID budget, Split validation, accuracy_table's
# sigmas keys, TrainConfig validation and distinct arms, NaN-safe Fig. 8 verdicts, attention_errors' record of
# the caller's data.  Every test names the old behaviour it would have caught.


BASE = dict(train_size=40, epochs=1, n_features=8, d_model=8, layers=1)


@pytest.mark.parametrize("field, value, exc", [
    ("batch_size", 0, ValueError),      # was ZeroDivisionError in train_one
    ("batch_size", -4, ValueError),     # was UnboundLocalError 'loss'
    ("threads", 0, ValueError),         # was a torch RuntimeError
    ("epochs", 2.5, TypeError),         # was a numpy TypeError
    ("epochs", 0, ValueError),          # was an empty result and table
    ("lr", 0.0, ValueError),
    ("lr", float("nan"), ValueError),
    ("d_model", 1, ValueError),
    ("heads", 3, ValueError),           # 8 is not a multiple of 3
    ("train_size", 5, ValueError),
    ("redraw_every", "never", ValueError),
    ("redraw_every", 0, ValueError),
    ("layers", True, TypeError),
])
def test_trainconfig_refuses_bad_fields_naming_them(field, value, exc):
    pt = pytest.importorskip("montecarlo.experiments.performer_train")
    with pytest.raises(exc, match=rf"TrainConfig\.{field}"):
        pt.TrainConfig(**{**BASE, field: value})


def test_trainconfig_accepts_the_cli_range_and_normalises_numpy_ints():
    pt = pytest.importorskip("montecarlo.experiments.performer_train")
    c = pt.TrainConfig(**{**BASE, "epochs": np.int64(2), "redraw_every": "epoch"})
    assert type(c.epochs) is int and c.epochs == 2 and c.redraw_every == "epoch"
    assert pt.TrainConfig(redraw_every=np.int64(10)).redraw_every == 10
    assert pt.TrainConfig() == pt.TrainConfig(epochs=10, batch_size=32, lr=3e-3, d_model=32, heads=2, layers=2,
                                              n_features=32, train_size=None, redraw_every=None, threads=1)


def test_train_arms_refuses_duplicate_arms_and_a_non_config():
    """Before: ['prf-simplex', 'prf-simplex'] trained twice and collapsed into one result entry."""
    pt = pytest.importorskip("montecarlo.experiments.performer_train")
    with pytest.raises(ValueError, match=r"arms must not repeat an arm.*prf-simplex repeated"):
        pt.train_arms(["prf-simplex", "prf-simplex"], 1, pt.TrainConfig(**BASE))
    with pytest.raises(TypeError, match="cfg must be a TrainConfig"):
        pt.train_arms(["prf-simplex"], 1, dict(BASE))
    with pytest.raises(TypeError, match="arms must be None or a sequence"):
        pt.train_arms("prf-simplex", 1, pt.TrainConfig(**BASE))
