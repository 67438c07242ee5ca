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

import pytest

from _cli import ROOT, boom, strict_json
from tests._procs import run_groups


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
    monkeypatch.setattr(mod, section, boom)
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
    monkeypatch.setattr(mod, section, boom)
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
    data = strict_json(path)
    key = options[1]
    assert data[key] == {"ratio": None, "speedup": [None, 1.5]}
    assert sorted(os.listdir(path.parent)) == ["out.json"]


def test_bench_attention_json_checked_first_and_strict(tmp_path, monkeypatch, capsys):
    """bench_attention wrote its --json at the end with its own writer: a folder failed after the timings, a
    tracked file was overwritten, NaN was written as ``NaN``.  Now through benchmarks._timing: a folder or a
    tracked file is a one-line error (status 2) before any timing, and the JSON is strict."""
    pytest.importorskip("torch")
    mod = _bench("bench_attention")
    monkeypatch.setattr(mod, "host_overhead", boom)
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
    assert strict_json(path)["host"] == {"prf_ms": [None, 1.0], "sdpa_ms": [1.0, 1.0], "ratio_min": None,
                                     "launches": 0, "custom_ops": 0, "aten_ops": 0}


def test_bench_montecarlo_errors_are_one_line_and_only_needs_a_section(monkeypatch, capsys):
    """bench_montecarlo used a plain ArgumentParser: a bad option printed a two-line usage block plus the error,
    and ``--only`` with no section ran every section (minutes); now one line, status 2, and ``--only`` needs at
    least one section."""
    mod = _bench("bench_montecarlo")
    for name in ("bench_pointwise", "bench_prf", "bench_sampling", "bench_partial", "bench_haar", "bench_fast"):
        monkeypatch.setattr(mod, name, boom)
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


@pytest.mark.parametrize("module", ["bench_feature_map", "bench_kinds", "bench_montecarlo"])
def test_section_benchmarks_state_each_default_once(module, capsys):
    """The three section benchmarks share one parser (``benchmarks._timing.section_parser``); before, each built
    its own and ``--help`` printed ``--only``'s default twice in bench_montecarlo and ``(default: None)`` /
    ``(default: False)`` after ``--json`` and ``--quick``.  Power: the raw make_parser formatter does print them."""
    from benchmarks._timing import section_parser
    from theory.cli import make_parser

    mod = _bench(module)
    with pytest.raises(SystemExit) as exc:
        mod.main(["--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: None)" not in text and "(default: False)" not in text
    assert text.count("(default:") == 1, text
    assert f"benchmarks/results/{module}.json" in text
    raw = make_parser("p", "doc")
    raw.add_argument("--json", default=None, help="path")
    assert "(default: None)" in " ".join(raw.format_help().split())
    parser = section_parser("p", "doc", ("a", "b"), "x.json")
    assert "(default: a b)" in " ".join(parser.format_help().split())


def test_bench_montecarlo_accuracy_adds_its_sections_to_only(monkeypatch, capsys):
    """``--only partial --accuracy`` ran the partial section alone (``--accuracy`` was ignored with ``--only``);
    now the accuracy sections follow the chosen ones, each once."""
    mod = _bench("bench_montecarlo")
    calls = []
    for name in ("bench_partial", "accuracy", "bias_by_d"):
        monkeypatch.setattr(mod, name, lambda quick, name=name: calls.append(name) or [])
    assert mod.main(["--only", "partial", "bias", "--accuracy", "--quick"]) in (0, None)
    assert calls == ["bench_partial", "bias_by_d", "accuracy"]


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
        monkeypatch.setattr(mod, name, boom)
    with pytest.raises(SystemExit) as exc:
        mod.main(["--uci-dir", str(tmp_path / "missing")])
    assert exc.value.code == 2
    assert "--uci-dir" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------------------
# python -m figures.reproduce


# --------------------------------------------------------------------------------------------------------------
# python -m figures: index.json of a folder drawn in several runs


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


# ---------------------------------------------------------------------------
# Issue 42's command-line findings, each reproduced first: help that states each default once, ``winners
# --draws`` that was silently ignored, ``table --protocol paper`` and ``split-spread`` that did not say where the
# gaps come from or how many draws resolve them, the README's Dask recipe that failed as a script, and progress
# inside long work (Fig. 8 by blocks of draws, the attention scan by cells, the performer experiment by steps).


def test_bench_figures_checks_its_arguments_first(tmp_path, capsys):
    """``benchmarks.bench_figures``: a folder that is not a checkout for ``--against`` and a tracked ``--json``
    path are one-line errors (status 2) before any run; ``run_once`` reports wall, CPU of the process tree
    and the load of a run (here a failing one, ``--n-jobs 0``, raises naming the checkout)."""
    from benchmarks import bench_figures

    with pytest.raises(SystemExit) as exc:
        bench_figures.main(["--against", str(tmp_path)])
    assert exc.value.code == 2 and "is not a checkout of this toolkit" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        bench_figures.main(["--json", str(ROOT / "README.md")])
    assert exc.value.code == 2
    with pytest.raises(RuntimeError, match="python -m figures failed in .*status 2"):
        bench_figures.run_once(ROOT, quick=True, n_jobs=0)


# ---------------------------------------------------------------------------
# Issue 38, item 2 and finding D: the fast closed forms of pnc_orthogonal (theory._antithetic) and their error
# control, against implementations that share none of their code.
#
# Oracles: mpmath's incomplete gamma function (``mpmath.gammainc``, independent of the fixed-point series and
# of the partner steps of theory._antithetic) for every node of a rule; mpmath's hyp0f1 / expm1 for the
# fixed-point series of the integrands; the closed antithetic partner of d = 2 (x2 = -ln(1 - e^{-x1})) and
# d = 4 (Lambert W) with mpmath's own quadrature for the pair expectations at 55 digits (where the Laguerre
# tail's extrapolated error estimate had let a value 2^-155 off through at 183 bits, d = 8, v = 3); values of
# the previous implementation (mpmath's gammainc and tanh-sinh quadrature, commit 53441d0) for the d = 1024 RFF
# MSE of finding D.  No timing: work is bounded by theory._context's work counters.


def test_bench_pnc_json_refused_before_timing_and_strict(tmp_path, monkeypatch, capsys):
    """benchmarks/bench_pnc.py: ``--json DIR`` is one line and status 2 before any timing; a small run writes
    strict JSON with the cold and warm ratios and the summary."""
    from benchmarks import bench_pnc

    def boom(*args, **kwargs):
        raise AssertionError("timed before checking --json")

    monkeypatch.setattr(bench_pnc, "run", boom)
    with pytest.raises(SystemExit) as exc:
        bench_pnc.main(["--json", str(tmp_path)])
    assert exc.value.code == 2 and "--json" in capsys.readouterr().err
    monkeypatch.undo()
    monkeypatch.setattr(bench_pnc, "VS", ("1e-300", "1"))
    path = tmp_path / "out.json"
    assert bench_pnc.main(["--ds", "2", "--dps", "15", "--kinds", "prf", "--no-progress", "--json", str(path)]) == 0
    data = json.loads(path.read_text(), parse_constant=lambda t: (_ for _ in ()).throw(ValueError(t)))
    assert [r["v"] for r in data["rows"]] == ["1e-300", "1"]
    assert all(r["cold_ratio"] > 0 and r["warm_ratio"] > 0 for r in data["rows"])
    assert data["summary"]["all"]["cold_ratio"]["n"] == 2
