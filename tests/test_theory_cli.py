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
                           "--d", "1", "--v", "1"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "d must be an integer >= 2 for the simplex coupling" in proc.stderr
    with pytest.raises(SystemExit):
        main(["conformity", "--coupling", "orf", "--d", "4", "--v", "1"])
