"""The Fig. 9 analogue (montecarlo.experiments.performer_train, figures.performer) at a tiny configuration:
1 epoch, 2 seeds, 100 training images (issue 20 item 5; the full run is in the module docs)."""

import argparse
import json
import re
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

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
