"""Round 4 of the command-line hardening: the benchmarks' ``--json`` (checked before any timing, strict JSON, never
a tracked file, no partial file on SIGTERM / Ctrl-C), their one-line errors and sections, and
``python -m figures.reproduce`` / ``python -m figures`` (size caps, repeated values, options after the
subcommand, ``index.json`` of a folder drawn in several runs).

Each test names what the code before this round did; every process started here runs in its own group through
:mod:`tests._procs` and is killed on timeout.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests._procs import run_groups

ROOT = Path(__file__).resolve().parents[1]


def _boom(*args, **kwargs):
    raise AssertionError("computed before the options were checked")


def _strict(path):
    def refuse(token):
        raise ValueError(f"not strict JSON: {token}")

    return json.loads(Path(path).read_text(), parse_constant=refuse)


# --------------------------------------------------------------------------------------------------------------
# benchmarks: --json checked before any timing


def _bench(name):
    import importlib

    return importlib.import_module(f"benchmarks.{name}")


#: (module, options selecting one section, the section's function that must not run).
_SECTION = {
    "bench_theory": ([], "run"),
    "bench_kinds": (["--only", "theory"], "bench_theory"),
    "bench_montecarlo": (["--only", "partial"], "bench_partial"),
    "bench_experiments": (["--only", "gram"], "bench_gram"),
}


@pytest.mark.parametrize("module", sorted(_SECTION))
def test_json_that_is_a_directory_is_refused_before_timing(module, tmp_path, monkeypatch, capsys):
    """``--json DIR`` (an existing folder): before, every benchmark ran all its timings (bench_theory 20 s at the
    default sizes) and then died with a traceback ``IsADirectoryError: '/.tmp.PID.part' -> '/tmp'`` (status 1),
    its temporary file aimed at the parent folder; now one line naming --json, status 2, nothing timed."""
    mod = _bench(module)
    options, section = _SECTION[module]
    monkeypatch.setattr(mod, section, _boom)
    with pytest.raises(SystemExit) as exc:
        mod.main(options + ["--json", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--json" in err and "is a directory" in err
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
@pytest.mark.parametrize("module", ["bench_theory", "bench_kinds"])
def test_json_never_overwrites_a_tracked_file(module, monkeypatch, capsys):
    """``--json README.md`` (tracked): before, the benchmark timed everything and then replaced the repository's
    README.md with its JSON; now refused at once (status 2) and README.md keeps its bytes."""
    mod = _bench(module)
    options, section = _SECTION[module]
    monkeypatch.setattr(mod, section, _boom)
    readme = ROOT / "README.md"
    before = readme.read_bytes()
    with pytest.raises(SystemExit) as exc:
        mod.main(options + ["--json", str(readme)])
    assert exc.value.code == 2
    assert "tracked by git" in capsys.readouterr().err
    assert readme.read_bytes() == before


@pytest.mark.parametrize("module", ["bench_kinds", "bench_montecarlo", "bench_experiments"])
def test_json_is_strict(module, tmp_path, monkeypatch, capsys):
    """A NaN or an infinity in the results (a ratio over a zero time, a z-score over a zero standard error) was
    written as the bare tokens ``NaN`` / ``Infinity`` (json.dump's default), which strict JSON readers reject;
    now ``null``."""
    mod = _bench(module)
    options, section = _SECTION[module]
    monkeypatch.setattr(mod, section, lambda *a, **k: {"ratio": math.nan, "speedup": [math.inf, 1.5]})
    path = tmp_path / "sub" / "out.json"
    code = mod.main(options + ["--json", str(path)])
    assert not isinstance(code, int) or code == 0  # (bench_montecarlo's main returned its results dict)
    data = _strict(path)
    key = options[1]
    assert data[key] == {"ratio": None, "speedup": [None, 1.5]}
    assert sorted(os.listdir(path.parent)) == ["out.json"]


def test_bench_attention_json_checked_first_and_strict(tmp_path, monkeypatch, capsys):
    """bench_attention wrote its --json at the end with its own writer: a folder failed after the timings, a
    tracked file was overwritten, NaN was written as ``NaN``.  Now through benchmarks._timing: a folder or a
    tracked file is a one-line error (status 2) before any timing, and the JSON is strict."""
    pytest.importorskip("torch")
    mod = _bench("bench_attention")
    monkeypatch.setattr(mod, "host_overhead", _boom)
    assert mod.main(["--host", "--json", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--json" in err and "is a directory" in err and os.listdir(tmp_path) == []
    if shutil.which("git") is not None and (ROOT / ".git").exists():
        readme = ROOT / "README.md"
        before = readme.read_bytes()
        assert mod.main(["--host", "--json", str(readme)]) == 2
        assert "tracked by git" in capsys.readouterr().err and readme.read_bytes() == before
    res = {"prf_ms": (math.nan, 1.0), "sdpa_ms": (1.0, 1.0), "ratio_min": math.inf, "launches": 0,
           "custom_ops": 0, "aten_ops": 0}
    monkeypatch.setattr(mod, "host_overhead", lambda *a, **k: res)
    path = tmp_path / "sub" / "out.json"
    assert mod.main(["--host", "--json", str(path)]) == 0
    assert _strict(path)["host"] == {"prf_ms": [None, 1.0], "sdpa_ms": [1.0, 1.0], "ratio_min": None,
                                     "launches": 0, "custom_ops": 0, "aten_ops": 0}


def test_bench_montecarlo_errors_are_one_line_and_only_needs_a_section(monkeypatch, capsys):
    """bench_montecarlo used a plain ArgumentParser: a bad option printed a two-line usage block plus the error,
    and ``--only`` with no section ran every section (minutes); now one line, status 2, and ``--only`` needs at
    least one section."""
    mod = _bench("bench_montecarlo")
    for name in ("bench_pointwise", "bench_prf", "bench_sampling", "bench_partial", "bench_haar", "bench_fast"):
        monkeypatch.setattr(mod, name, _boom)
    for argv, needle in ((["--bogus"], "unrecognized arguments: --bogus"),
                         (["--only"], "--only: expected at least one argument")):
        with pytest.raises(SystemExit) as exc:
            mod.main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err and err.startswith("python -m benchmarks.bench_montecarlo")


@pytest.mark.parametrize("module", ["bench_kinds", "bench_montecarlo"])
def test_a_repeated_section_runs_once(module, monkeypatch, capsys):
    """``--only theory theory`` (bench_kinds) and ``--only partial partial`` (bench_montecarlo) timed the section
    twice (2 calls); now once."""
    mod = _bench(module)
    options, section = _SECTION[module]
    calls = []
    monkeypatch.setattr(mod, section, lambda quick: calls.append(quick) or [])
    assert mod.main(options + [options[1], "--quick"]) in (0, None)
    assert calls == [True]


_SIGTERM_IN_WRITE = """
import os, pathlib, signal, sys, time
sys.path.insert(0, {root!r})
import importlib
mod = importlib.import_module("benchmarks.{module}")
setattr(mod, {section!r}, lambda *a, **k: {{"x": 1}})
def write_text(self, text, *a, **k):
    with open(self, "w") as fh:
        fh.write(text[:5])
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
pathlib.Path.write_text = write_text
sys.exit(mod.main({argv!r}))
"""

_INTERRUPT_IN_RUN = """
import sys
sys.path.insert(0, {root!r})
import benchmarks.bench_theory as mod
def run(*args, **kwargs):
    raise KeyboardInterrupt
mod.run = run
sys.exit(mod.main({argv!r}))
"""


def test_sigterm_and_ctrl_c_leave_no_partial_file(tmp_path):
    """SIGTERM while the JSON is being written: before, bench_montecarlo and bench_kinds died of the signal
    (status -15) and left ``.out.json.PID.part`` (5 bytes) behind; now status 143, one line ``terminated
    (SIGTERM)``, no file.  Ctrl-C in bench_theory printed a KeyboardInterrupt traceback; now one line, 130."""
    cmds, folders = [], []
    for module in ("bench_montecarlo", "bench_kinds"):
        options, section = _SECTION[module]
        folder = tmp_path / module
        folder.mkdir()
        folders.append(folder)
        argv = options + ["--quick", "--json", str(folder / "out.json")]
        cmds.append([sys.executable, "-c", _SIGTERM_IN_WRITE.format(root=str(ROOT), module=module, section=section,
                                                                      argv=argv)])
    cmds.append([sys.executable, "-c", _INTERRUPT_IN_RUN.format(root=str(ROOT),
                                                               argv=["--json", str(tmp_path / "t.json")])])
    results = run_groups(cmds, timeout=600, cwd=str(tmp_path))
    for (code, out), folder in zip(results[:2], folders):
        assert code == 143, out
        assert "terminated (SIGTERM)" in out and "Traceback" not in out
        assert os.listdir(folder) == []
    code, out = results[2]
    assert code == 130, out
    assert out.strip() == "python -m benchmarks.bench_theory: interrupted"
    assert not (tmp_path / "t.json").exists()


def test_bench_experiments_checks_uci_dir_first(tmp_path, monkeypatch, capsys):
    """``--uci-dir /missing``: the classification section was reported "skipped" and the other sections timed on
    (status 0); now a one-line error naming --uci-dir, status 2, before any timing."""
    mod = _bench("bench_experiments")
    for name in ("bench_classification", "bench_attention", "bench_gram"):
        monkeypatch.setattr(mod, name, _boom)
    with pytest.raises(SystemExit) as exc:
        mod.main(["--uci-dir", str(tmp_path / "missing")])
    assert exc.value.code == 2
    assert "--uci-dir" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------------------
# python -m figures.reproduce


@pytest.fixture
def no_figures(monkeypatch):
    """Every figure function of reproduce replaced by one that fails the test if it is reached."""
    from figures import attention, downstream, winners

    monkeypatch.setattr(downstream, "fig8_nonparametric", _boom)
    monkeypatch.setattr(downstream, "fig10_sigma_search", _boom)
    monkeypatch.setattr(attention, "new_attention_scan", _boom)
    monkeypatch.setattr(winners, "new_winners_map", _boom)


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


# --------------------------------------------------------------------------------------------------------------
# python -m figures: index.json of a folder drawn in several runs


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
    index = _strict(tmp_path / "index.json")
    assert [e["name"] for e in index["figures"]] == ["a", "b"]
    a, b = index["figures"]
    assert a["settings"]["seed"] == 2 and "earlier_run" not in a
    assert b["settings"]["seed"] == 1 and b["earlier_run"] is True
    assert index["settings"]["seed"] == 2


def test_bench_theory_reports_progress(monkeypatch, capsys):
    """bench_theory printed nothing until every timing was done (``--dps 10000``: silent past 20 s, when a
    timeout's SIGTERM ended it); now one line on stderr as each part starts, none with ``--no-progress``."""
    mod = _bench("bench_theory")
    monkeypatch.setattr(mod, "best_time", lambda *a, **k: 1e-3)  # no timing: the lambdas are never called
    assert mod.main(["--dps", "15"]) == 0
    err = capsys.readouterr().err
    assert "baseline hyp1f1(64, 32, 8) at 15 digits" in err and "Fig. 6 curve" in err
    assert len(err.splitlines()) == 1 + 12 + 1 + 3
    assert mod.main(["--dps", "15", "--no-progress"]) == 0
    assert capsys.readouterr().err == ""
