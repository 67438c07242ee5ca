"""Command line ``python -m montecarlo.experiments``: help with defaults, one-line errors, exit statuses,
progress on stderr, and each subcommand on tiny settings (issue 12 item 7, issue 13)."""

import argparse
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from montecarlo.experiments import __main__ as cli, attention, classification, uci

ROOT = Path(__file__).resolve().parents[1]
UCI_DIR = uci.resolve_uci_dir()
SUBCOMMANDS = ("table", "curve", "sigma", "gram", "attention", "split-spread", "performer-train")


def _run(*args, timeout=600):
    """The command in a subprocess (its own process group is not needed: it starts no children)."""
    return subprocess.run([sys.executable, "-m", "montecarlo.experiments", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def _subparsers():
    p = cli._parser()
    action = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return p, action.choices


def test_every_option_has_help_text_and_a_shown_default():
    p, subs = _subparsers()
    assert set(subs) == set(SUBCOMMANDS)
    for name, sp in subs.items():
        for action in sp._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help, (name, action.dest)
        text = sp.format_help()
        assert "(default:" in text, name


@pytest.mark.parametrize("sub", SUBCOMMANDS)
def test_help_of_each_subcommand(sub, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main([sub, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m montecarlo.experiments {sub}") and "(default:" in out


def test_help_and_a_bad_argument_in_a_process():
    proc = _run("--help")
    subs = "{table,curve,sigma,gram,attention,split-spread,performer-train}"
    assert proc.returncode == 0 and proc.stderr == "" and subs in proc.stdout
    proc = _run("table", "--seed", "-1")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == ("python -m montecarlo.experiments table: error: argument --seed: must be an integer "
                           ">= 0, got -1 (see --help)\n")


@pytest.mark.parametrize("args, needle", [
    (["table", "--seed", "-1"], "argument --seed: must be an integer >= 0, got -1"),
    (["table", "--n-draws", "1"], "argument --n-draws/--n-reps: must be an integer >= 2, got 1"),
    (["table", "--datasets", "iris"], "argument --datasets: invalid choice: 'iris'"),
    (["table", "--protocol", "authors"], "argument --protocol: invalid choice: 'authors'"),
    (["attention", "--logit-std", "-1"], "argument --logit-std: must be a finite real > 0, got '-1'"),
    (["sigma", "wifi", "--sigmas", "0.1", "nan"], "argument --sigmas: must be a finite real > 0, got 'nan'"),
    (["gram", "--m", "0"], "argument --m: must be an integer >= 1, got 0"),
    (["table", "--n-jobs", "0"], "argument --n-jobs: must be a nonzero integer (-1: every core), got 0"),
    (["curve", "wifi", "--n-jobs", "x"], "argument --n-jobs: expected an integer, got 'x'"),
    (["table", "--kind", "rff"], "argument --kind: invalid choice: 'rff'"),
    (["split-spread", "wifi", "--first-seed", "42"], "argument --first-seed: must be an integer >= 43, got 42"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_bad_arguments_are_one_line_with_status_2(args, needle, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(args)
    assert info.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert captured.out == "" and len(lines) == 1 and needle in lines[0] and lines[0].endswith("(see --help)")


def test_bad_uci_dir_is_named(capsys):
    assert cli.main(["table", "--uci-dir", str(ROOT / "absent")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{cli.PROG}: error: UCI data directory") and "absent" in err and "does not exist" in err
    assert len(err.splitlines()) == 1


def test_requested_dataset_missing_fails(tmp_path):
    """Finding: ``table --datasets banknote`` exited 0 with an empty table when the file was missing."""
    proc = _run("table", "--datasets", "banknote", "--uci-dir", str(tmp_path), "--quiet")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"{cli.PROG}: error: UCI data in {tmp_path}: missing banknote.txt\n"


def test_an_empty_directory_and_a_malformed_file_fail_in_one_line(tmp_path, capsys):
    assert cli.main(["table", "--uci-dir", str(tmp_path), "--quiet"]) == 2  # nothing present at all
    err = capsys.readouterr().err
    assert err.startswith(f"{cli.PROG}: error: none of the requested UCI files is present")
    assert len(err.splitlines()) == 1
    (tmp_path / "banknote.txt").write_text("3.6,8.6,-2.8,-0.4,0\n4.5,8.1,x,-1.4,1\n")
    assert cli.main(["table", "--datasets", "banknote", "--uci-dir", str(tmp_path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "banknote.txt, line 2, column 2: expected a number, got 'x'" in err


@pytest.mark.parametrize("exc, status, needle", [
    (MemoryError(), 1, f"{cli.PROG}: error: out of memory"),
    (KeyboardInterrupt(), 130, f"{cli.PROG}: interrupted"),
])
def test_run_failures_are_one_line(monkeypatch, capsys, exc, status, needle):
    def boom(*a, **k):
        raise exc

    monkeypatch.setattr(classification, "accuracy_table", boom)
    assert cli.main(["table", "--quiet"]) == status
    err = capsys.readouterr().err
    assert err.startswith(needle) and len(err.splitlines()) == 1


def test_convergence_failure_is_one_line(monkeypatch, capsys):
    from theory.errors import ConvergenceError

    def boom(*a, **k):
        raise ConvergenceError("SimRFs+ update did not converge in 1000 passes\nsecond line")

    monkeypatch.setattr(classification, "accuracy_table", boom)
    assert cli.main(["table", "--quiet"]) == 1
    assert capsys.readouterr().err == (f"{cli.PROG}: error: SimRFs+ update did not converge in 1000 passes "
                                       "second line\n")


def test_table_on_a_partial_directory_with_progress(tmp_path, capsys):
    for name in ("banknote", "wifi"):
        f = uci.SPECS[name].file
        (tmp_path / f).write_bytes((UCI_DIR / f).read_bytes())
    assert cli.main(["table", "--uci-dir", str(tmp_path), "--n-draws", "3", "--couplings", "iid", "simplex",
                     "--split-seeds", "0", "1"]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "banknote | 4 | 4 |" in out and "wifi | 7 | 7 |" in out
    assert "missing (not run): abalone, car, yeast, cmc, nursery, chess" in out
    assert "protocol resampled, 2 split(s) [0, 1], 3 draws per split" in out
    err = captured.err.splitlines()
    assert err[-1].startswith(f"{cli.PROG}: warning: UCI data in {tmp_path}: missing abalone.data, car.data")
    # progress: units done (at most once a second, and at the end), then each dataset's cells
    assert all(x.startswith("[") and "] table: " in x and " units, " in x for x in err[:-3])
    assert "] table: 8/8 units, " in err[-4]  # 2 datasets x 2 splits: 4 exact-kernel units + 4 blocks of 3 draws
    assert "] banknote: iid " in err[-3] and "] wifi: iid " in err[-2] and " simplex " in err[-2]


def test_table3_pads_to_a_power_of_two(capsys):
    assert cli.main(["table", "--table", "3", "--n-draws", "2", "--datasets", "cmc", "--split-seeds", "0",
                     "--couplings", "orthogonal", "fast_orthogonal", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Table 3 (zero-padded") and "cmc | 16 | 16 |" in out  # d = 9 padded to p = 16, m = p


def test_curve_and_sigma_subcommands(capsys):
    assert cli.main(["curve", "banknote", "--n-draws", "2", "--m-multipliers", "1", "2", "--split-seeds", "0",
                     "--quiet"]) == 0
    assert cli.main(["sigma", "wifi", "--n-draws", "2", "--sigmas", "0.1", "0.3", "--m-multiplier", "1",
                     "--protocol", "paper"]) == 0
    out = capsys.readouterr().out
    assert "banknote: d = 4" in out and "protocol resampled, splits [0], 2 draws per split, paired draws" in out
    assert ("m/d | iid | orthogonal | simplex | orthogonal-iid (z) | simplex-iid (z) | simplex-orthogonal (z)\n1 | "
            in out) and "\n2 | " in out
    assert "wifi: protocol paper, split 42, 1800 training and 99 validation records, m = 7, 2 draws" in out
    assert "best sigma (PRF)" in out and "paper 0.22" in out


def test_gram_and_attention_subcommands_and_the_shared_logit_default(capsys):
    assert cli.main(["gram", "--n-draws", "2", "--m", "8"]) == 0
    assert cli.main(["attention", "--seq-lens", "32", "--m", "8", "--n-draws", "2", "--couplings", "simplex",
                     "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("m | iid | orthogonal | simplex | orthogonal-iid (z) | simplex-iid (z) | "
                          "simplex-orthogonal (z)\n8 |")
    assert "kind prf, 2 draws, paired draws" in out
    assert f"logit std {attention.DEFAULT_LOGIT_STD:g} (q.k / sqrt(d) of unrelated tokens)" in out
    assert "32 | 8 | " in out
    # one default for the command line, the experiment and the data generator
    _, subs = _subparsers()
    assert subs["attention"].get_default("logit_std") == attention.DEFAULT_LOGIT_STD
    assert inspect.signature(attention.synthetic_qkv).parameters["logit_std"].default == attention.DEFAULT_LOGIT_STD
    # attention_errors takes None for "synthetic data at the default" (a logit std given with data= is refused)
    assert inspect.signature(attention.attention_errors).parameters["logit_std"].default is None
    synthetic = attention.attention_errors(("simplex",), (8,), (4,), 2, d_head=4, rng=0)
    assert synthetic.logit_std == attention.DEFAULT_LOGIT_STD


# ---------------------------------------------------------------------------
# Second round of command-line findings (exploration helper): z-scores of zero or round-off standard errors,
# repeated couplings, ``--out`` checked before any work, strict audit JSON, SIGTERM, an empty ``--only``,
# ``--redraw-study`` conflicts, sigma-search progress and the help and data-error texts.


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
