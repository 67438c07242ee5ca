"""The command lines of montecarlo, figures and paper_checks: --help, bad arguments, failure paths.

Issue 12 items 7 and 8.  Each command line: ``--help`` prints the options with
their help text and defaults and runs nothing (exit 0, fast); a bad argument is
one line on stderr and exit status 2; a failure while computing is one line on
stderr and a non-zero status, never a traceback; long work reports progress on
stderr; and ``python -m paper_checks`` never rewrites the committed table unless
asked (``--write-committed``) and never writes a report from a run that did not
happen.

Subprocesses run with a timeout (``subprocess.run(timeout=...)`` kills the
child on expiry) so that a command that ignores ``--help`` and starts its
minutes-long default work fails the test instead of hanging it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _cli import ROOT, cli_env
from montecarlo import norm_coupling, optimum
from theory.errors import ConvergenceError



def _run(args, cwd, timeout=600):
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=cli_env(), capture_output=True, text=True,
                          timeout=timeout)


def _one_error_line(err, prog):
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{prog}: error: "), err
    return lines[0]


# ---------------------------------------------------------------------------
# --help runs nothing, shows every option with its default


@pytest.mark.parametrize("module, options", [
    ("montecarlo.optimum", ["--d", "--v", "--n-draws", "--seed", "--no-progress"]),
    ("montecarlo.norm_coupling", ["--d", "--v", "--no-progress"]),
    ("figures", ["--out", "--only", "--quick", "--seed", "--dps", "--backend", "--uci-dir", "--traceback"]),
    ("paper_checks", ["--out", "--workers", "--write-committed"]),
])
def test_help_runs_nothing_and_shows_defaults(tmp_path, module, options):
    """Before the fix ``python -m montecarlo.optimum --help`` ignored --help and ran for minutes."""
    proc = _run([module, "--help"], tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    for opt in options:
        assert opt in proc.stdout
    assert "(default: " in proc.stdout
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_montecarlo_help_lists_audit(tmp_path):
    top = _run(["montecarlo", "--help"], tmp_path, timeout=600)
    sub = _run(["montecarlo", "audit", "--help"], tmp_path, timeout=600)
    assert top.returncode == sub.returncode == 0
    assert "audit" in top.stdout
    for opt in ("--d", "--m", "--coupling", "--n ", "--seed", "--alpha", "--no-progress", "(default: 5000)"):
        assert opt in sub.stdout


# ---------------------------------------------------------------------------
# bad arguments: one line on stderr, exit 2


def _main_of(module):
    """The in-process entry point of ``python -m module``."""
    import importlib

    entry = {"montecarlo": "montecarlo.__main__", "paper_checks": "paper_checks.__main__"}.get(module, module)
    return importlib.import_module(entry).main


@pytest.mark.parametrize("args, message", [
    (["montecarlo.optimum", "--d", "1"], "argument --d: must be an integer >= 2, got 1"),
    (["montecarlo.optimum", "--v", "-1"], "argument --v: must be a finite real >= 0"),
    (["montecarlo.optimum", "--n-draws", "x"], "argument --n-draws: expected an integer"),
    (["montecarlo.norm_coupling", "--v", "nan"], "argument --v: must be a finite real >= 0"),
    (["montecarlo.norm_coupling", "--d"], "argument --d: expected at least one argument"),
    (["montecarlo", "audit", "x:y", "--d", "1"], "argument --d: must be an integer >= 2"),
    (["montecarlo", "audit", "x:y", "--d", "4", "--n", "10"], "argument --n: must be an integer >= 50"),
    (["montecarlo", "audit", "x:y", "--d", "4", "--alpha", "0"], "argument --alpha: must be a finite real > 0"),
    (["montecarlo", "bogus"], "argument COMMAND: invalid choice: 'bogus'"),
    (["figures", "--seed", "-1"], "argument --seed: must be an integer >= 0, got -1"),
    (["figures", "--out", ""], "--out must be a directory path"),
    (["paper_checks", "-n", "abc"], "argument -n/--workers: expected an integer, got 'abc'"),
    (["paper_checks", "-n", "-1"], "argument -n/--workers: must be an integer >= 0"),
])
def test_bad_argument_is_one_line(tmp_path, monkeypatch, capsys, args, message):
    """In process (the ``python -m`` entry points are exercised by the subprocess tests above and below)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        _main_of(args[0])(args[1:])
    assert exc.value.code == 2
    prog = "python -m " + (args[0] if args[0] != "montecarlo" or args[1] == "bogus" else "montecarlo audit")
    line = _one_error_line(capsys.readouterr().err, prog)
    assert message in line
    assert list(tmp_path.iterdir()) == []


def test_bad_argument_through_python_m(tmp_path):
    proc = _run(["montecarlo.optimum", "--d", "1"], tmp_path)
    assert proc.returncode == 2
    assert "argument --d: must be an integer >= 2" in _one_error_line(proc.stderr, "python -m montecarlo.optimum")


# ---------------------------------------------------------------------------
# failure paths: one line, non-zero status


def test_optimum_failure_paths(capsys, monkeypatch):
    """Sizes beyond the memory budget: exit 2 with the arguments named; a computation that does not
    converge: exit 1; progress lines on stderr, the table on stdout."""
    assert optimum.main(["--d", "100000", "--n-draws", "2"]) == 2
    err = _one_error_line(capsys.readouterr().err, "python -m montecarlo.optimum")
    assert "MAX_ELEMENTS" in err

    def fail(*args, **kwargs):
        raise ConvergenceError("deliberate: quadrature did not converge")

    monkeypatch.setattr(optimum, "optimality_gaps", fail)
    assert optimum.main(["--d", "3", "--v", "0.5", "--n-draws", "2"]) == 1
    assert _one_error_line(capsys.readouterr().err, "python -m montecarlo.optimum").endswith("deliberate: "
                                                                                            "quadrature did not "
                                                                                            "converge")


def test_optimum_prints_rows_and_progress(capsys):
    assert optimum.main(["--d", "3", "--v", "0.5", "1", "--n-draws", "2", "--seed", "1"]) == 0
    out, err = capsys.readouterr()
    rows = out.strip().splitlines()
    assert len(rows) == 3 and rows[0].split()[:2] == ["d", "v"]
    assert "[1/2] d = 3, v = 0.5 done" in err and "[2/2] d = 3, v = 1 done" in err
    table = optimum.format_gap_table(optimum.optimality_gap_table((3,), (0.5, 1.0), n_draws=2, rng=1))
    assert out.strip() == table.strip()  # the command line reproduces the library table for the same seed
    assert optimum.main(["--d", "3", "--v", "0.5", "--n-draws", "2", "--no-progress"]) == 0
    assert capsys.readouterr().err == ""


def test_norm_coupling_failure_path_and_progress(capsys, monkeypatch):
    assert norm_coupling.main(["--d", "4", "--v", "0.5"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[1].split()[:2] == ["4", "0.50"] and "[1/1] d = 4, v = 0.5 done" in err

    def fail(d, v, kind):
        raise ConvergenceError(f"deliberate ({kind})")

    monkeypatch.setattr(norm_coupling, "mse_ratio_to_simplex", fail)
    assert norm_coupling.main(["--d", "4", "--v", "0.5"]) == 1
    assert "deliberate (antithetic)" in _one_error_line(capsys.readouterr().err, "python -m montecarlo.norm_coupling")


def test_audit_failure_paths(tmp_path):
    """A sampler module that does not import, and a sampler that raises: exit 2, one line each."""
    bad = tmp_path / "sampler.py"
    bad.write_text("def draw(d, m, rng):\n    raise RuntimeError('broken sampler')\n")
    proc = _run(["montecarlo", "audit", f"{bad}:draw", "--d", "4", "--n", "60"], tmp_path)
    assert proc.returncode == 2
    assert "the sampler raised RuntimeError: broken sampler" in _one_error_line(proc.stderr,
                                                                               "python -m montecarlo audit")
    proc = _run(["montecarlo", "audit", "no_such_module:f", "--d", "4"], tmp_path)
    assert proc.returncode == 2
    assert "cannot import 'no_such_module'" in _one_error_line(proc.stderr, "python -m montecarlo audit")


def test_figures_failure_path(tmp_path):
    """--out under a file (was: NotADirectoryError traceback): exit 2, one line."""
    f = tmp_path / "f"
    f.write_text("")
    proc = _run(["figures", "--only", "fig3", "--quick", "--out", str(f / "sub")], tmp_path)
    assert proc.returncode == 2
    assert "which is a file, not a directory" in _one_error_line(proc.stderr, "python -m figures")


# ---------------------------------------------------------------------------
# paper_checks: output outside the source tree, no report from a run that did not happen


def _digest(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def test_paper_checks_writes_outside_the_package_and_counts_right(tmp_path):
    """Default output is ./paper_checks_report in the working directory; the committed table is untouched;
    the totals line counts every category (was: 'not run' and 'not verifiable here' merged as 'not')."""
    package = ROOT / "paper_checks"
    before = _digest(package)
    proc = _run(["paper_checks", "-n", "0", "--", "-k", "test_registry"], tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stderr
    report = tmp_path / "paper_checks_report"
    assert sorted(p.name for p in report.iterdir()) == ["REPORT.md", "report.json"]
    assert _digest(package) == before
    text = (report / "REPORT.md").read_text()
    import json

    from paper_checks._report import totals

    rows = json.loads((report / "report.json").read_text())["claims"]
    claims, _ = totals(rows)
    assert sum(claims.values()) == len(rows) > 50
    assert claims["not run"] == len(rows) - claims["not-verifiable-here"] > 0
    line = next(x for x in text.splitlines() if x.startswith("Totals: "))
    assert f"{len(rows)} claims (0 verified, 0 erratum, {claims['not-verifiable-here']} not verifiable here, " \
           f"0 FAILED, {claims['not run']} not run)" in line


def test_paper_checks_keeps_the_previous_report_when_pytest_does_not_run(tmp_path):
    """Was: ``-n abc`` (or any pytest usage error) overwrote the table with all rows 'not run'."""
    out = tmp_path / "rep"
    out.mkdir()
    (out / "REPORT.md").write_text("previous")
    proc = _run(["paper_checks", "--out", str(out), "-n", "0", "--", "--no-such-pytest-option"], tmp_path)
    assert proc.returncode == 2  # (a bad PYTEST_ARGS is a bad option of this command: issue 38, was pytest's 4)
    assert "pytest did not run the checks (exit status 4); no report written" in proc.stderr
    assert (out / "REPORT.md").read_text() == "previous" and not (out / "report.json").exists()
    proc = _run(["paper_checks", "--out", str(out), "-n", "0", "--", "-k", "no_check_has_this_name"], tmp_path,
                timeout=300)
    assert proc.returncode == 2 and "pytest did not run the checks (exit status 5)" in proc.stderr  # (was 5)
    assert (out / "REPORT.md").read_text() == "previous"


def test_paper_checks_exit_statuses_and_unwritable_output(tmp_path, capsys):
    """Issue 38: ``--out /proc/pc`` passed the pre-check (root may write in /proc, yet nothing can be created
    there), ran the checks, then died with a FileNotFoundError traceback (status 1); pytest's statuses 4 and 5
    passed straight through.  Now the folder is created before the checks (one line, status 2), a report that
    cannot be written is one line and status 1, and pytest's statuses map to the command's own (module
    docstring): 0, 1 (failed, broken suite), 2 (bad options), 130 (interrupted)."""
    from paper_checks.__main__ import _status, _write
    from paper_checks._report import Collector

    if os.path.isdir("/proc/self"):
        proc = _run(["paper_checks", "--out", "/proc/pc", "-n", "0"], tmp_path)
        assert proc.returncode == 2
        assert "--out '/proc/pc': cannot create the folder" in _one_error_line(proc.stderr, "python -m paper_checks")
        assert _write(Path("/proc/pc"), [], []) is None
        assert "could not write the report in '/proc/pc'" in _one_error_line(capsys.readouterr().err,
                                                                              "python -m paper_checks")
    c = Collector()
    assert [_status(code, c) for code in (0, 1, 2, 3, 4, 5)] == [0, 1, 130, 1, 2, 2]
    c.collect_errors.append("paper_checks/test_x.py")
    assert _status(2, c) == 1


def test_paper_checks_refuses_the_package_folder_and_partial_committed_runs(tmp_path):
    package = ROOT / "paper_checks"
    before = _digest(package)
    proc = _run(["paper_checks", "--out", str(package)], tmp_path)
    assert proc.returncode == 2 and "is inside the package folder" in _one_error_line(proc.stderr,
                                                                                        "python -m paper_checks")
    proc = _run(["paper_checks", "--write-committed", "-n", "0", "--", "-k", "test_registry"], tmp_path, timeout=900)
    assert proc.returncode == 1
    assert "committed table not rewritten: extra pytest arguments select part of the suite" in proc.stderr
    assert _digest(package) == before


def test_refuse_committed_reasons():
    from paper_checks.__main__ import _refuse_committed
    from paper_checks._report import Collector

    c = Collector()
    ok = [{"id": "a", "result": "verified"}, {"id": "b", "result": "not-verifiable-here"}]
    assert _refuse_committed(0, ok, c, []) is None
    assert "status 1" in _refuse_committed(1, ok, c, [])
    assert "1 claims were not run (c)" in _refuse_committed(0, ok + [{"id": "c", "result": "not run"}], c, [])
    c.collect_errors.append("paper_checks/test_x.py")
    assert "collection errors" in _refuse_committed(0, ok, c, [])
