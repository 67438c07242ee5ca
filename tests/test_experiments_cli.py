"""Command line ``python -m montecarlo.experiments``: each subcommand runs on tiny settings and prints
its table; a directory with only some UCI files runs those and names the missing ones."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from montecarlo.experiments import __main__ as cli
from montecarlo.experiments import uci

ROOT = Path(__file__).resolve().parents[1]
UCI_DIR = Path(os.environ.get(uci.ENV_VAR) or ROOT / ".." / "shared" / "uci")
needs_data = pytest.mark.skipif(not UCI_DIR.is_dir(), reason=f"UCI data directory {UCI_DIR} not found")


@needs_data
def test_table_on_a_partial_directory(tmp_path, capsys):
    for name in ("banknote", "wifi"):
        f = uci.SPECS[name].file
        (tmp_path / f).write_text((UCI_DIR / f).read_text())
    with pytest.warns(UserWarning, match="missing abalone.data"):
        assert cli.main(["table", "--uci-dir", str(tmp_path), "--n-draws", "3", "--couplings", "iid", "simplex"]) == 0
    out = capsys.readouterr().out
    assert "banknote | 4 | 4" in out and "wifi | 7 | 7" in out
    assert "missing (not run): abalone, car, yeast, cmc, nursery, chess" in out


@needs_data
def test_table3_pads_to_a_power_of_two(capsys):
    assert cli.main(["table", "--table", "3", "--uci-dir", str(UCI_DIR), "--n-draws", "2", "--datasets", "cmc",
                     "--couplings", "orthogonal", "fast_orthogonal"]) == 0
    assert "cmc | 16 | 16" in capsys.readouterr().out  # d = 9 padded to p = 16, m = p


def test_gram_and_attention_subcommands(capsys):
    assert cli.main(["gram", "--n-draws", "2", "--m", "8"]) == 0
    assert cli.main(["attention", "--seq-lens", "32", "--m", "8", "--n-draws", "2", "--couplings", "simplex"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("m | iid | orthogonal | simplex\n8 |")
    assert "32 | 8 | " in out


def test_bad_uci_dir_is_named(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "montecarlo.experiments", "table", "--uci-dir",
                           str(tmp_path / "absent")], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("error: UCI data directory")
    assert "absent" in proc.stderr and "does not exist" in proc.stderr and "Traceback" not in proc.stderr
