"""python -m figures: options, outputs, skips and errors of the command line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import figures
from _cli import ROOT, boom, cli_env, strict_json
from figures import main
from figures.registry import FIGURES, Figure, lookup

def test_module_entry_point_writes_png_pdf_json(tmp_path):
    """``python -m figures`` from another directory: default output folder, three files, index.json."""
    proc = subprocess.run([sys.executable, "-m", "figures", "--quick", "--only", "fig3", "--no-progress"],
                          cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=600)
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


# ---------------------------------------------------------------------------
# Second round of command-line findings (exploration helper): z-scores of zero or round-off standard errors,
# repeated couplings, ``--out`` checked before any work, strict audit JSON, SIGTERM, an empty ``--only``,
# ``--redraw-study`` conflicts, sigma-search progress and the help and data-error texts.


def _strict_loads(text):
    """json.loads that refuses the non-standard NaN / Infinity tokens Python writes by default."""
    def refuse(token):
        raise ValueError(f"non-standard JSON token {token}")
    return json.loads(text, parse_constant=refuse)


def test_audit_json_is_strict(tmp_path, capsys):
    """Before: 'norm_norm_rho': NaN (no coupling claimed: no consecutive-norm test) and 'statistic': Infinity
    (a constant sampler), which strict parsers refuse (the parse_constant hook raises on them)."""
    from montecarlo.__main__ import main

    (tmp_path / "samplers.py").write_text("import numpy as np\n"
                                          "def iid(d, m, rng):\n    return rng.standard_normal((m, d))\n"
                                          "def ones(d, m, rng):\n    return np.ones((m, d))\n")
    spec = str(tmp_path / "samplers.py")
    assert main(["audit", f"{spec}:iid", "--d", "4", "--n", "50", "--json", "--no-progress"]) == 0
    rep = _strict_loads(capsys.readouterr().out)
    assert rep["structure"]["norm_norm_rho"] is None
    assert main(["audit", f"{spec}:ones", "--d", "4", "--n", "50", "--json", "--no-progress"]) == 1
    text = capsys.readouterr().out
    rep = _strict_loads(text)
    stats = [t["statistic"] for c in rep["checks"] for t in c["tests"]]
    assert "inf" in stats and "NaN" not in text and "Infinity" not in text


def test_sigterm_during_a_figure_leaves_no_part_file(tmp_path):
    """SIGTERM while ``python -m figures`` computes, draws (in its worker processes) or writes: the command ends
    with 143 and one line, leaves no temporary ``.NAME.PID.part`` file, no incomplete file under a final name and
    no worker process running (before: killed by the signal, status -15, the .part file left behind; then, with
    worker processes, the workers outlived the command and held its output open).  The figures are drawn to
    bytes in worker processes and written by the main process, so the signal is sent at a series of moments
    after the command's first progress output until one lands before the end; the write itself interrupted is
    ``test_figures_cli.py::test_interrupted_write_leaves_no_partial_file``."""
    import select

    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    landed = False
    for k, delay in enumerate((1.0, 0.3, 2.0, 3.0, 5.0, 8.0)):
        out = tmp_path / f"figs{k}"
        out.mkdir()
        proc = subprocess.Popen([sys.executable, "-m", "figures", "--only", "fig2,fig6", "--quick", "--n-jobs", "2",
                                 "--out", str(out)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            ready, _, _ = select.select([proc.stdout], [], [], 300)  # its first progress output: the sweep began
            assert ready, "no output within 300 s"
            time.sleep(delay)
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            text, _ = proc.communicate(timeout=300)  # a hang guard (it ends within seconds)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
        assert proc.returncode in (0, 143), text
        assert not [p for p in os.listdir(out) if p.endswith(".part")]
        for p in out.glob("*.json"):
            json.loads(p.read_text())  # complete
        for p in out.glob("*.png"):
            assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        if proc.returncode == 143:
            assert "terminated (SIGTERM)" in text and "leaked" not in text
            deadline = time.monotonic() + 60  # its worker processes ended with it
            while time.monotonic() < deadline:
                try:
                    os.killpg(proc.pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.2)
            else:
                os.killpg(proc.pid, signal.SIGKILL)
                raise AssertionError("worker processes outlived the terminated command")
            landed = True
            break
    assert landed, "every run ended before its SIGTERM"


@pytest.mark.parametrize("only", [",", "", " , "])
def test_empty_only_is_an_error_and_writes_nothing(only, tmp_path, capsys):
    from figures import main

    (tmp_path / "index.json").write_text('{"keep": 1}\n')
    with pytest.raises(SystemExit) as exc:
        main(["--only", only, "--out", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "error: --only: no figure named" in err and err.count("\n") == 1
    assert (tmp_path / "index.json").read_text() == '{"keep": 1}\n'


def test_only_fig9_points_to_reproduce(tmp_path, capsys):
    from figures import main

    with pytest.raises(SystemExit) as exc:
        main(["--only", "fig9", "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert "python -m figures.reproduce performer" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# Round 4 of the command-line hardening: the benchmarks' ``--json`` (checked before any timing, strict JSON, never
# a tracked file, no partial file on SIGTERM / Ctrl-C), their one-line errors and sections, and
# ``python -m figures.reproduce`` / ``python -m figures`` (size caps, repeated values, options after the
# subcommand, ``index.json`` of a folder drawn in several runs).
#
# Each test names what the code before this round did; every process started here runs in its own group through
# :mod:`tests._procs` and is killed on timeout.


@pytest.fixture
def no_figures(monkeypatch):
    """Every figure function of reproduce replaced by one that fails the test if it is reached."""
    from figures import attention, downstream, winners

    monkeypatch.setattr(downstream, "fig8_nonparametric", boom)
    monkeypatch.setattr(downstream, "fig10_sigma_search", boom)
    monkeypatch.setattr(attention, "new_attention_scan", boom)
    monkeypatch.setattr(winners, "new_winners_map", boom)


@pytest.mark.parametrize("argv, needle", [
    (["fig8", "--splits", "2000"], "--splits: must be an integer >= 1 and <= 1000 (each split is a whole run), "
                                   "got 2000"),
    (["fig10", "--n-sigmas", "100000"], "--n-sigmas: must be an integer >= 2 and <= 1000 (each sigma is a whole "
                                        "run), got 100000"),
])
def test_reproduce_refuses_huge_counts(argv, needle, tmp_path, no_figures, capsys):
    """``fig8 --splits 100000000`` ran past a 40 s SIGTERM and was killed at 10 min (the split seeds are checked for
    repeats pairwise, in montecarlo); ``fig10 --n-sigmas 100000000`` allocated the grid and ran on.  Now both are
    refused at parse time (status 2; the old code reached the figure, here a failing stand-in)."""
    from figures.reproduce import main

    with pytest.raises(SystemExit) as exc:
        main(["--out", str(tmp_path / "o")] + argv)
    assert exc.value.code == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv, option", [
    (["fig8", "--m-multipliers", "1", "1"], "--m-multipliers"),
    (["fig8", "--datasets", "banknote", "banknote"], "--datasets"),
    (["attention", "--seq-lens", "8", "8"], "--seq-lens"),
    (["attention", "--logit-stds", "1", "1.0"], "--logit-stds"),
    (["winners", "--ds", "2", "2"], "--ds"),
    (["winners", "--vs", "0.5", "0.50"], "--vs"),
])
def test_reproduce_refuses_repeated_values(argv, option, tmp_path, no_figures, capsys):
    """A repeated value (``--m-multipliers 1 1``, ``--datasets banknote banknote``, ...) was computed twice and
    drawn twice (status 0); now one line naming the option, status 2, nothing created."""
    from figures.reproduce import main

    with pytest.raises(SystemExit) as exc:
        main(["--out", str(tmp_path / "o")] + argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{option} must not repeat a value" in err
    assert not (tmp_path / "o").exists()


def test_reproduce_common_options_after_the_subcommand(tmp_path, monkeypatch, capsys):
    """``python -m figures.reproduce winners --ds 2 --vs 1 --out DIR --seed 3`` was "unrecognized arguments: --out
    DIR --seed 3" (status 2): the shared options had to come before the subcommand.  Now accepted on either side
    (after it wins); before it still works."""
    from figures import winners
    from figures.reproduce import main

    seen = []
    monkeypatch.setattr(winners, "new_winners_map", lambda ctx, effort: seen.append((ctx.out, ctx.seed, effort)))
    out = tmp_path / "after"
    assert main(["--seed", "1", "winners", "--ds", "2", "--vs", "1", "--out", str(out), "--seed", "3",
                 "--no-progress"]) == 0
    assert seen[-1][:2] == (str(out), 3) and seen[-1][2]["ds"] == (2,)
    assert main(["--out", str(tmp_path / "before"), "--seed", "4", "winners", "--ds", "2"]) == 0
    assert seen[-1][:2] == (str(tmp_path / "before"), 4)


def test_index_keeps_the_figures_of_an_earlier_run(tmp_path, monkeypatch, capsys):
    """``--only a,b`` then ``--only a`` into the same folder: index.json listed only ``a`` (1 entry) although
    ``b``'s three files were still there; now both, ``b`` marked as from the earlier run with its own settings,
    and a figure whose files are gone is dropped."""
    import figures.registry
    from figures.cli import main
    from figures.registry import Figure

    def draw(name):
        def f(ctx):
            for ext in ("png", "pdf", "json"):
                (Path(ctx.out) / f"{name}.{ext}").write_text("x")
        return f

    figs = tuple(Figure(n, None, n, draw(n)) for n in ("a", "b", "c"))
    monkeypatch.setattr(figures.registry, "FIGURES", figs)
    assert main(["--only", "a,b,c", "--out", str(tmp_path), "--no-progress", "--seed", "1"]) == 0
    (tmp_path / "c.pdf").unlink()
    assert main(["--only", "a", "--out", str(tmp_path), "--no-progress", "--seed", "2"]) == 0
    index = strict_json(tmp_path / "index.json")
    assert [e["name"] for e in index["figures"]] == ["a", "b"]
    a, b = index["figures"]
    assert a["settings"]["seed"] == 2 and "earlier_run" not in a
    assert b["settings"]["seed"] == 1 and b["earlier_run"] is True
    assert index["settings"]["seed"] == 2
