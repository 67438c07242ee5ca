"""python -m theory: output matches the library at the requested precision."""

import subprocess
import sys

import pytest
from mpmath import mp

import theory
from theory.__main__ import main


def test_ratio_command(capsys):
    main(["ratio", "--d", "64", "--v", "0.5", "--dps", "50"])
    out = capsys.readouterr().out
    with mp.workdps(50):
        expected = mp.nstr(theory.mse_ratio("simplex", "iid", 64, "0.5"), 50)
    assert f"MSE(simplex) / MSE(iid) = {expected}" in out
    assert len(expected) > 45


def test_table_prefactor_zcrit_conformity(capsys):
    main(["table", "--d", "16", "--vs", "0,1"])
    out = capsys.readouterr().out
    with mp.workdps(30):
        assert mp.nstr(theory.simplex_v2_prefactor(16), 18) in out
    main(["prefactor", "--d", "64"])
    assert capsys.readouterr().out.startswith("0.0077817464")
    main(["zcrit", "--d", "64", "--dps", "15"])
    assert capsys.readouterr().out.startswith("6.9094147")
    main(["conformity", "--coupling", "simplex", "--d", "64", "--v", "1"])
    assert capsys.readouterr().out.startswith("2.65678318180446275002320541")
    main(["rff-ratio", "--d", "16", "--z", "1"])
    assert "RFF MSE(orthogonal) / MSE(iid)" in capsys.readouterr().out


def test_bad_arguments_exit_with_message():
    proc = subprocess.run([sys.executable, "-m", "theory", "conformity", "--coupling", "simplex",
                           "--d", "1", "--v", "1"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2
    assert "d must be an integer >= 2 for the simplex coupling" in proc.stderr
    assert main(["conformity", "--coupling", "orf", "--d", "4", "--v", "1"]) == 2


@pytest.mark.parametrize("argv,status,message", [
    (["zcrit", "--d", "64", "--dps", "-5"], 2, "--dps: must be an integer >= 1 and <= 10000"),   # issue 11: was accepted
    (["zcrit", "--d", "64", "--dps", "0"], 2, "--dps: must be an integer >= 1 and <= 10000"),
    (["zcrit", "--d", "64", "--dps", "ten"], 2, "--dps: expected an integer"),
    (["ratio", "--d", "0", "--v", "1"], 2, "--d: must be an integer >= 1, got 0"),
    (["ratio", "--d", "4", "--v", "-1"], 2, "v must be >= 0"),
    (["ratio", "--d", "4", "--v", "abc"], 2, "v must be a real number"),
    (["table", "--d", "4", "--vs", ","], 2, "--vs must be comma-separated values, none of them empty, got ','"),
    (["table", "--d", "4", "--vs", "0.5,,1"], 2, "none of them empty, got '0.5,,1'"),  # issue 38: skipped the item
    (["conformity", "--coupling", "simplex", "--d", "64", "--v", "1e400"], 1, "beyond the reachable domain"),
    (["conformity", "--coupling", "simplex", "--d", "64", "--v", "1000", "--work", "20000"], 1,
     "work budget of 20000 units exhausted"),
    (["conformity", "--coupling", "simplex", "--d", "64", "--v", "1000", "--seconds", "0.2"], 1,
     "time budget of 0.2 s exhausted"),  # the opt-in wall clock (the call needs minutes on any machine)
    (["ratio", "--d", "4", "--v", "1", "--work", "0"], 2, "--work: must be an integer >= 1"),
    ([], 2, "the following arguments are required: command"),
])
def test_errors_are_one_line_with_status(argv, status, message, capsys):
    """Issue 11: one-line errors on stderr, exit 2 for bad arguments, 1 for no convergence."""
    assert main(argv) == status
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("python -m theory") and ": error: " in err, err
    assert message in err, err


def test_huge_m_and_tiny_v_are_answered(capsys):
    """Issue 11 items 3, 4: --m 1e9 was a hang (a list of m/d blocks), v = 1e-400 a crash."""
    assert main(["ratio", "--d", "2", "--v", "0.5", "--m", "1000000000"]) == 0
    out = capsys.readouterr().out
    with mp.workdps(30):
        expected = mp.nstr(theory.mse_ratio("simplex", "iid", 2, "0.5", m=10 ** 9), 30)
    assert f"MSE(simplex) / MSE(iid) = {expected}" in out
    assert main(["ratio", "--d", "64", "--v", "1e-400"]) == 0
    out = capsys.readouterr().out
    assert "MSE(simplex) / MSE(iid) = 0.00778174641445748830814670398723" in out  # the v -> 0 limit, Sec. 5.1


def test_help_and_subprocess_exit_codes():
    proc = subprocess.run([sys.executable, "-m", "theory", "--help"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "zcrit" in proc.stdout and "Exit status" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "theory", "conformity", "--coupling", "simplex", "--d", "64",
                           "--v", "1e400"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1


@pytest.mark.parametrize("argv,status,message", [
    (["ratio", "--d", "1", "--v", "0.5"], 2, "d must be an integer >= 2 for the simplex coupling"),
    (["ratio", "--d", "4", "--v", "-1"], 2, "v must be >= 0"),
    (["ratio", "--d", "4", "--v", "abc"], 2, "v must be a real number"),
    (["ratio", "--d", "4", "--v", "1e400"], 1, "beyond the reachable domain"),
    (["table", "--d", "1"], 2, "d must be an integer >= 2 for the simplex coupling"),
    (["table", "--d", "4", "--vs", "0,1,x"], 2, "v must be a real number, got 'x'"),
    (["table", "--d", "4", "--vs", "0,-1"], 2, "v must be >= 0, got '-1'"),
    (["table", "--d", "4", "--vs", "0,1e400"], 1, "beyond the reachable domain"),
    (["conformity", "--coupling", "simplex", "--d", "1", "--v", "1"], 2, "d must be an integer >= 2"),
    (["rff-ratio", "--d", "4", "--z", "-1"], 2, "z must be >= 0"),
    (["prefactor", "--d", "1"], 2, "d must be an integer >= 2"),
    (["zcrit", "--d", "1"], 2, "d must be an integer >= 2"),
])
def test_arguments_are_validated_before_any_output(argv, status, message, capsys):
    """Round 2 (inputs): every argument is checked before the first line of output.  Before, ``ratio --d 1
    --v 0.5`` printed its header and 'MSE(orthogonal) / MSE(iid) = 1.0' on stdout, then exited 2 on the
    simplex d; ``ratio --v -1`` and ``table --vs 0,1,x`` printed the header (and table its first rows)."""
    assert main(argv) == status
    captured = capsys.readouterr()
    assert captured.out == "", captured.out
    assert captured.err.count("\n") == 1 and message in captured.err, captured.err


# ---------------------------------------------------------------------------
# Issue 38, item 1: theory's budgets count work, not seconds.
#
# On a 2-core machine loaded by other work (load 7-90) the suite failed 8 tests with "time budget of 30 s
# exhausted": the default budget was a wall clock, so whether a user got a number or an exception depended on
# what else the machine was doing.  The default budget is now a count of work (:data:`theory._context.DEFAULT_WORK`
# units, charged by the loops themselves and weighted by the working precision); a wall-clock limit is an opt-in
# (``theory.budget(seconds=...)``).
#
# The determinism check simulates a very slow machine without being one: every clock of the :mod:`time` module
# runs 10 000 times fast while the calls below compute, and each call must return the same value (or raise the
# same error) as with the real clocks.  Under the old wall-clock default each of these calls, a few milliseconds
# to a second of real time, read as 30 s to hours and raised.


def test_the_command_line_takes_a_work_budget(capsys):
    from theory.__main__ import main

    assert main(["ratio", "--d", "8", "--v", "0.5", "--dps", "15", "--work", "3"]) == 1
    err = capsys.readouterr().err
    assert "work budget of 3 units exhausted" in err and len(err.strip().splitlines()) == 1
    assert main(["ratio", "--d", "8", "--v", "0.5", "--dps", "15"]) == 0
    assert "MSE(simplex) / MSE(iid) = 0.13296090149094" in capsys.readouterr().out
