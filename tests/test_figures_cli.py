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
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
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
    (["--dps", "3"], "argument --dps: must be an integer >= 10 and <= 200, got 3"),
    (["--dps", "100000"], "argument --dps: must be an integer >= 10 and <= 200"),
    (["--backend", "jax"], "invalid choice: 'jax'"),
    (["--seed", "x"], "argument --seed: expected an integer, got 'x'"),
    (["--seed", "-1"], "argument --seed: must be an integer >= 0, got -1"),
    (["--out", ""], "--out must be a directory path, got an empty string"),
    (["--uci-dir", "/nonexistent/uci"], "--uci-dir '/nonexistent/uci' does not exist or is not a directory"),
])
def test_bad_options(capsys, args, message):
    """Issue 12 item 7: every bad option is one line on stderr and exit status 2; nothing runs or is written."""
    with pytest.raises(SystemExit) as exc:
        main(args + ["--only", "fig3"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1 and err.startswith("python -m figures: error: ")


def test_out_must_be_a_directory(tmp_path, capsys):
    """--out naming an existing file, or a path under a file: one-line error, no traceback, nothing written."""
    f = tmp_path / "a_file"
    f.write_text("keep me")
    for out, message in ((f, "exists and is not a directory"), (f / "sub", "which is a file, not a directory")):
        with pytest.raises(SystemExit) as exc:
            main(["--quick", "--only", "fig3", "--out", str(out), "--no-progress"])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert f.read_text() == "keep me" and sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_lookup_accepts_short_names_and_latex_labels():
    assert lookup("fig6").name == "fig6_mse_ratio"
    assert lookup("var_comp_fig").name == "fig6_mse_ratio"
    assert lookup("fig:the_dists").name == "fig5_wij_pdf"
    assert lookup("fig10").name == "fig10_sigma_search"
    assert lookup("new_rff_mse_ratio").paper_label is None
    assert len({f.name for f in FIGURES}) == len(FIGURES) >= 11  # unique names; helpers add figures


def test_uci_directory_errors_and_skips(tmp_path, capsys, monkeypatch):
    """A missing --uci-dir is a usage error (exit 2, was: exit 0 and "skipped"); a missing
    $SIMPLEX_RF_UCI_DIR fails the figure (exit 1, one line on stderr); an existing directory without any
    readable dataset skips it with the reason."""
    with pytest.raises(SystemExit) as exc:
        main(["--only", "fig8", "--out", str(tmp_path / "o"), "--uci-dir", str(tmp_path / "nowhere")])
    assert exc.value.code == 2 and not (tmp_path / "o").exists()
    capsys.readouterr()
    monkeypatch.setenv("SIMPLEX_RF_UCI_DIR", str(tmp_path / "nowhere"))
    assert main(["--only", "fig8", "--out", str(tmp_path), "--no-progress"]) == 1
    captured = capsys.readouterr()
    assert "fig8_nonparametric: FAILED:" in captured.out and "nowhere" in captured.out
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    monkeypatch.delenv("SIMPLEX_RF_UCI_DIR")
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
    captured = capsys.readouterr()
    out = captured.out
    assert "broken: FAILED: RuntimeError: deliberate" in out
    assert captured.err == "python -m figures: broken failed: RuntimeError: deliberate\n"  # no traceback
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


def test_progress_lines_on_stderr(tmp_path, capsys):
    """Progress on stderr: a bar over the cells of every selected figure (one sweep), a bar over their drawing,
    and one line per figure as it is written; none with --no-progress."""
    assert main(["--quick", "--only", "fig3,fig6", "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "cells of 2 figures" in err and "drawing 2 figures" in err
    assert "[1/2] fig3_simplex_plus written" in err and "[2/2] fig6_mse_ratio written" in err
    assert main(["--quick", "--only", "fig3", "--out", str(tmp_path), "--no-progress"]) == 0
    assert capsys.readouterr().err == ""


def test_pdf_fonts_are_truetype(tmp_path):
    """Issue 14 item 4: the written PDF embeds TrueType (Type 42) fonts, no Type 3 font.

    Power: the same figure saved with pdf.fonttype = 3 does contain a Type 3 font."""
    import matplotlib
    import matplotlib.pyplot as plt

    assert main(["--quick", "--only", "fig3", "--out", str(tmp_path), "--no-progress"]) == 0
    pdf = (tmp_path / "fig3_simplex_plus.pdf").read_bytes()
    assert b"/Type3" not in pdf and b"/FontFile2" in pdf
    fig, ax = plt.subplots()
    ax.set_title(r"$w_{ij}$ SimRFs")
    with matplotlib.rc_context({"pdf.fonttype": 3}):
        fig.savefig(tmp_path / "type3.pdf")
    plt.close(fig)
    assert b"/Type3" in (tmp_path / "type3.pdf").read_bytes()
    from figures._context import Context

    fig, ax = plt.subplots()
    ax.set_title(r"$w_{ij}$ SimRFs")
    with matplotlib.rc_context({"pdf.fonttype": 3}):  # Context.save embeds TrueType whatever the caller's rcParams
        Context(out=str(tmp_path / "ctx"), progress=False).save(fig, "t", {})
    assert b"/Type3" not in (tmp_path / "ctx" / "t.pdf").read_bytes()


def test_saved_files_are_the_same_bytes_every_time(tmp_path):
    """Issue 42: a figure saved twice (written, and captured in a worker's way) is the same bytes each time: the
    PDF carries no creation date, whose seconds made two runs' PDFs differ.

    Power: matplotlib's own PDF of the figure carries /CreationDate."""
    import matplotlib.pyplot as plt

    from figures._context import Context

    def draw():
        fig, ax = plt.subplots()
        ax.plot([0, 1], [1, 0.5], marker="o")
        ax.set_title(r"$w_{ij}$ SimRFs")
        return fig

    files = []
    for k in range(2):
        Context(out=str(tmp_path / f"w{k}"), progress=False).save(draw(), "t", {"x": 1})
        files.append({ext: (tmp_path / f"w{k}" / f"t.{ext}").read_bytes() for ext in ("png", "pdf", "json")})
    captured = Context(out=str(tmp_path / "c"), progress=False, capture=True)
    captured.save(draw(), "t", {"x": 1})
    assert b"/CreationDate" not in files[0]["pdf"]
    assert files[0] == files[1]
    assert {ext: body if isinstance(body, bytes) else body.encode() for ext, body in captured.captured["t"].items()} == files[0]
    fig = draw()
    fig.savefig(tmp_path / "plain.pdf")
    plt.close(fig)
    assert b"/CreationDate" in (tmp_path / "plain.pdf").read_bytes()


def test_interrupted_save_leaves_no_partial_file(tmp_path, monkeypatch):
    """Issue 12 item 8: a save that fails half-way leaves the previous complete files and no temporary file."""
    import matplotlib.pyplot as plt

    from figures._context import Context

    ctx = Context(out=str(tmp_path), progress=False)
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    ctx.save(fig, "fig", {"x": [1.0]})
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert sorted(before) == ["fig.json", "fig.pdf", "fig.png"]

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    real = fig.savefig

    def savefig(path, **kw):
        if kw.get("format") == "pdf":
            with open(path, "wb") as fh:
                fh.write(b"%PDF-1.4 truncated")
            raise KeyboardInterrupt
        return real(path, **kw)

    monkeypatch.setattr(fig, "savefig", savefig)
    with pytest.raises(KeyboardInterrupt):
        ctx.save(fig, "fig", {"x": [2.0]})
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert sorted(after) == ["fig.json", "fig.pdf", "fig.png"]  # no .part file left
    assert after["fig.pdf"] == before["fig.pdf"] and after["fig.json"] == before["fig.json"]
    assert after["fig.png"] != before["fig.png"]  # written completely before the interruption


def test_interrupted_write_leaves_no_partial_file(tmp_path, monkeypatch):
    """The main process writes the bytes its workers drew (Context.write_files): a write interrupted half-way
    leaves the previous complete file and no temporary file; the files written before it are complete."""
    from figures import _context
    from figures._context import Context

    ctx = Context(out=str(tmp_path), progress=False)
    ctx.write_files("fig", {"png": b"\x89PNG old", "pdf": b"%PDF- old", "json": '{"x": 1}\n'})
    real = _context._write_bytes

    def interrupted(path, body):
        if body.startswith(b"%PDF"):
            with open(path, "wb") as fh:
                fh.write(body[:3])
            raise KeyboardInterrupt
        return real(path, body)

    monkeypatch.setattr(_context, "_write_bytes", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ctx.write_files("fig", {"png": b"\x89PNG new", "pdf": b"%PDF- new", "json": '{"x": 2}\n'})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.json", "fig.pdf", "fig.png"]
    assert (tmp_path / "fig.png").read_bytes() == b"\x89PNG new"
    assert (tmp_path / "fig.pdf").read_bytes() == b"%PDF- old" and json.loads((tmp_path / "fig.json").read_text()) == {"x": 1}


@pytest.mark.parametrize("kwargs, message", [
    ({"seed": -1}, "seed must be an integer >= 0"),
    ({"seed": 1.5}, "seed must be an integer"),
    ({"dps": 5}, "dps must be an integer >= 10 and <= 200"),
    ({"backend": "jax"}, "backend must be one of 'numpy', 'torch'"),
    ({"quick": "False"}, "quick must be True or False"),
    ({"progress": 1}, "progress must be True or False"),
    ({"out": ""}, "out must be a directory path"),
    ({"uci_dir": "/nonexistent/uci"}, "uci_dir '/nonexistent/uci' does not exist"),
])
def test_context_validates_settings(kwargs, message):
    from figures._context import Context

    with pytest.raises(ValueError, match=message):
        Context(**kwargs)


class _Overlap:
    """Counts the units running at once (threads of this process standing in for the worker processes)."""

    def __init__(self):
        import threading

        self.lock, self.now, self.most, self.mixed = threading.Lock(), {}, 0, False

    def unit(self, kind, k):
        import time

        with self.lock:
            self.now[kind, k] = True
            kinds = {key[0] for key in self.now}
            self.most, self.mixed = max(self.most, len(self.now)), self.mixed or len(kinds) == 2
        time.sleep(0.05)
        with self.lock:
            del self.now[kind, k]
        return k * k


def test_sweep_runs_at_most_n_jobs_units_at_once(monkeypatch):
    """Issue 42: the figures' sweep runs at most n_jobs units at once, numpy units on threads and pure-Python
    ones on worker processes sharing the n_jobs (before, a thread pool and a process pool of n_jobs each ran at
    once: 4 busy workers on 2 cores).  The worker processes are threads here, so that one counter sees every
    unit; the numbers are those of n_jobs = 1.

    Power: both kinds ran at the same time (the schedule mixes them, so without the cap 4 would have run)."""
    from figures import _sweep

    overlap = _Overlap()
    monkeypatch.setattr(_sweep, "_process_executor", lambda n: _sweep._Threads(n, "test-processes"))
    parts = {"fig": {**{("t", k): _sweep.Cell(overlap.unit, ("numpy", k), cost=1.0, threads=True) for k in range(8)},
                     **{("p", k): _sweep.Cell(overlap.unit, ("python", k), cost=1.0) for k in range(8)}}}
    results, _ = _sweep.compute(parts, n_jobs=2)
    assert results["fig"] == {(kind, k): k * k for kind in ("t", "p") for k in range(8)}
    assert overlap.most == 2 and overlap.mixed
    assert _sweep.compute(parts, n_jobs=1)[0] == results
