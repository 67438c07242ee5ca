"""python -m figures: options, outputs, skips and errors of the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import figures
from figures import main
from figures.registry import FIGURES, Figure, lookup

ROOT = Path(__file__).resolve().parents[1]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("SIMPLEX_RF_UCI_DIR", None)
    return env


def test_module_entry_point_writes_png_pdf_json(tmp_path):
    """``python -m figures`` from another directory: default output folder, three files, index.json."""
    proc = subprocess.run([sys.executable, "-m", "figures", "--quick", "--only", "fig3", "--no-progress"],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "simplex_rf_figures"
    for ext in ("png", "pdf", "json"):
        assert (out / f"fig3_simplex_plus.{ext}").stat().st_size > 1000
    assert (out / "fig3_simplex_plus.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "fig3_simplex_plus.pdf").read_bytes()[:5] == b"%PDF-"
    index = json.loads((out / "index.json").read_text())
    assert [f["status"] for f in index["figures"]] == ["written"]
    assert index["settings"] == {"quick": True, "seed": 0, "dps": 20, "backend": "numpy"}
    assert "fig3_simplex_plus:" in proc.stdout


def test_list(capsys):
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    for f in FIGURES:
        assert f.name in out


def test_unknown_figure_is_a_clean_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--only", "fig99", "--out", "unused"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unknown figure 'fig99'" in err
    for f in FIGURES:
        assert f.name in err
    assert not Path("unused").exists()


@pytest.mark.parametrize("args, message", [
    (["--dps", "3"], "--dps must be an integer >= 10"),
    (["--backend", "jax"], "invalid choice: 'jax'"),
    (["--seed", "x"], "invalid int value"),
])
def test_bad_options(capsys, args, message):
    with pytest.raises(SystemExit) as exc:
        main(args + ["--only", "fig3"])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_lookup_accepts_short_names_and_latex_labels():
    assert lookup("fig6").name == "fig6_mse_ratio"
    assert lookup("var_comp_fig").name == "fig6_mse_ratio"
    assert lookup("fig:the_dists").name == "fig5_wij_pdf"
    assert lookup("fig10").name == "fig10_sigma_search"
    assert lookup("new_rff_mse_ratio").paper_label is None
    assert len({f.name for f in FIGURES}) == len(FIGURES) == 11


def test_uci_figures_skip_without_a_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SIMPLEX_RF_UCI_DIR", raising=False)
    assert main(["--only", "fig8,fig10", "--out", str(tmp_path), "--no-progress"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for name in ("fig8_nonparametric", "fig10_sigma_search"):
        line = next(x for x in lines if x.startswith(name))
        assert line == f"{name}: skipped: no UCI data directory (pass --uci-dir DIR or set SIMPLEX_RF_UCI_DIR)"
    index = json.loads((tmp_path / "index.json").read_text())
    assert {f["status"] for f in index["figures"]} == {"skipped"}


def test_uci_directory_from_option_or_environment(tmp_path, capsys, monkeypatch):
    """The environment variable is used when --uci-dir is absent; unreadable directories skip with a reason."""
    monkeypatch.setenv("SIMPLEX_RF_UCI_DIR", str(tmp_path / "nowhere"))
    assert main(["--only", "fig8", "--out", str(tmp_path), "--no-progress"]) == 0
    assert f"fig8_nonparametric: skipped: UCI data directory '{tmp_path / 'nowhere'}' does not exist" in \
        capsys.readouterr().out
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["--only", "fig10", "--out", str(tmp_path), "--uci-dir", str(empty), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "fig10_sigma_search: skipped: no UCI dataset readable in" in out
    assert not (tmp_path / "fig10_sigma_search.json").exists()


def test_a_failing_figure_does_not_stop_the_others(tmp_path, capsys, monkeypatch):
    def boom(ctx):
        raise RuntimeError("deliberate")

    broken = Figure("broken", None, "raises", boom)
    good = lookup("fig3")
    monkeypatch.setattr(figures.registry, "FIGURES", (broken, good))
    assert main(["--quick", "--only", "broken,fig3", "--out", str(tmp_path), "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "broken: FAILED: RuntimeError: deliberate" in out
    assert (tmp_path / "fig3_simplex_plus.json").exists()
    index = json.loads((tmp_path / "index.json").read_text())
    assert [f["status"] for f in index["figures"]] == ["failed", "written"]


def test_seed_reproduces_and_changes_the_draws(tmp_path):
    runs = {}
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        out = tmp_path / name
        assert main(["--quick", "--only", "fig3", "--out", str(out), "--seed", str(seed), "--no-progress"]) == 0
        runs[name] = json.loads((out / "fig3_simplex_plus.json").read_text())
    assert runs["a"]["norms"] == runs["b"]["norms"]
    assert runs["a"]["norms"] != runs["c"]["norms"]
    assert runs["c"]["settings"]["seed"] == 1


def test_torch_backend(tmp_path):
    pytest.importorskip("torch")
    assert main(["--quick", "--only", "fig2", "--backend", "torch", "--out", str(tmp_path), "--no-progress"]) == 0
    data = json.loads((tmp_path / "fig2_geometry.json").read_text())
    assert data["settings"]["backend"] == "torch"
    for p in data["panels"]:
        w = np.array(p["vectors"])
        u = w / np.linalg.norm(w, axis=1)[:, None]
        off = (u @ u.T)[~np.eye(p["d"], dtype=bool)]
        if p["coupling"] == "orthogonal":
            assert np.max(np.abs(off)) < 1e-12
        if p["coupling"] == "simplex":
            assert np.max(np.abs(off + 1 / (p["d"] - 1))) < 1e-12


def test_style_is_shared():
    from figures.style import COUPLING_STYLE, marker_style, style

    colors = [s["color"] for s in COUPLING_STYLE.values()]
    assert len(set(colors)) == len(colors)
    for c in ("iid", "orthogonal", "simplex", "simplex_plus"):
        assert style(c)["color"] == marker_style(c)["color"] == COUPLING_STYLE[c]["color"]
    with pytest.raises(ValueError, match="coupling must be one of"):
        style("orf")
