"""Tests of :mod:`figures.reproduce` (``python -m figures.reproduce``): arguments checked before any work, help,
progress and what each table says."""

import argparse
import math
import re

import pytest

from _cli import bar_totals
from figures import reproduce


# ---------------------------------------------------------------------------
# Second round of command-line findings (exploration helper): z-scores of zero or round-off standard errors,
# repeated couplings, ``--out`` checked before any work, strict audit JSON, SIGTERM, an empty ``--only``,
# ``--redraw-study`` conflicts, sigma-search progress and the help and data-error texts.


def test_figures_reproduce_checks_out_before_computing(tmp_path, capsys, monkeypatch):
    """Before: fig10 was computed, then 'error: [Errno 2] No such file or directory: ...' without --out."""
    from figures import downstream, reproduce

    def never(*a, **k):
        raise AssertionError("computed before --out was checked")

    monkeypatch.setattr(downstream, "fig10_sigma_search", never)
    f = tmp_path / "a_file"
    f.write_text("x")
    for out in (str(f / "sub"), "/proc/xyz"):
        assert reproduce.main(["--out", out, "--no-progress", "fig10", "--draws", "2", "--n-sigmas", "2"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"{reproduce.PROG}: error: --out ")


# ---------------------------------------------------------------------------
# Issue 42's command-line findings, each reproduced first: help that states each default once, ``winners
# --draws`` that was silently ignored, ``table --protocol paper`` and ``split-spread`` that did not say where the
# gaps come from or how many draws resolve them, the README's Dask recipe that failed as a script, and progress
# inside long work (Fig. 8 by blocks of draws, the attention scan by cells, the performer experiment by steps).


def _parsers():
    """Every parser of figures, figures.reproduce and montecarlo.experiments, subcommands included."""
    from figures import cli, reproduce
    from montecarlo.experiments import __main__ as ex

    out = []
    for top in (cli._parser(), reproduce._parser(), ex._parser()):
        out.append(top)
        for action in top._actions:
            if isinstance(action, argparse._SubParsersAction):
                out.extend(action.choices.values())
    return out


def _option_helps(parser):
    """(option, its help as printed) for every option with a help text."""
    formatter = parser._get_formatter()
    return [(a.option_strings[0] if a.option_strings else a.dest, formatter._expand_help(a))
            for a in parser._actions if a.help and a.help is not argparse.SUPPRESS]


def test_help_states_each_default_once():
    """``--help`` printed "(default: the protocol's, 5 or 1; at most 1000) (default: None)", a raw dict for
    ``fig8 --draws`` ("{'chess': 16}") and RST backticks in the description.  Now every option says its default
    at most once, never "(default: None)" or "(default: False)", and no help shows a dict or a backtick."""
    parsers = _parsers()
    assert len(parsers) >= 3 + 5 + 7
    for p in parsers:
        text = p.format_help()
        assert "`" not in text and "{'" not in text, p.prog
        for option, help_text in _option_helps(p):
            assert help_text.lower().count("default") <= 1, (p.prog, option, help_text)
            assert "(default: None)" not in help_text and "(default: False)" not in help_text, (p.prog, option)
    # power: argparse's own formatter on the same fig8 parser doubles the default of --splits
    from figures import reproduce

    fig8 = next(p for p in parsers if p.prog.endswith("reproduce fig8"))
    plain = argparse.ArgumentDefaultsHelpFormatter(fig8.prog)
    splits = next(a for a in fig8._actions if "--splits" in a.option_strings)
    assert plain._expand_help(splits).lower().count("default") == 2
    assert reproduce.PROG in fig8.prog


def test_table_under_the_paper_protocol_says_where_the_gaps_come_from(capsys):
    """``table --protocol paper`` printed z = -0.1 for cmc at 200 draws and nothing else: the cell looked
    reproduced.  Now it prints, for every cell with a printed value, the draws at which its gap would reach
    |z| >= 3 (from the measured per-draw s.d., with the range for the gap +- 2 s.e.), and the attribution of
    Table 2's gaps (the authors' public code gives the same values; the 40-seed split spread).  Power: the
    resampled protocol prints no attribution."""
    from montecarlo.experiments import classification as cl
    from montecarlo.experiments.__main__ import main

    assert main(["table", "--protocol", "paper", "--n-draws", "6", "--datasets", "cmc", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "draws to resolve each gap to the paper at |z| >= 3" in out
    assert "authors' public code, run as written, splits bit-identically and gives the same values" in out
    assert "wifi simplex 0.5970 +- 0.0032" in out and "cmc simplex 0.366-0.494" in out
    assert "split-spread cmc wifi" in out
    rows = re.findall(r"  cmc (simplex|simplex_plus): gap ([+-][0-9.]+), z \S+, ([0-9 ]+) draws at the measured gap", out)
    assert [r[0] for r in rows] == ["simplex", "simplex_plus"]
    table = cl.accuracy_table(("simplex", "simplex_plus"), 1, 6, 0, datasets=["cmc"], protocol="paper")
    for comp in table.versus(cl.paper_table(2)):
        sd = comp.stderr * math.sqrt(6)
        n, low, high = table.draws_to_resolve(comp)
        assert n == max(2, math.ceil((3 * sd / abs(comp.mean - comp.paper_mean)) ** 2))
        assert low <= n and (high is None or high >= n)
    assert main(["table", "--protocol", "resampled", "--n-draws", "3", "--datasets", "cmc", "--split-seeds", "0",
                 "--quiet"]) == 0
    assert "public code" not in capsys.readouterr().out


def test_split_spread_says_what_the_spread_shows(capsys):
    """``split-spread`` printed the per-split ranges without saying what they mean for the printed values or that
    the authors' code gives this toolkit's values at seed 42; now both, one line per printed value."""
    from montecarlo.experiments.__main__ import main

    assert main(["split-spread", "wifi", "--n-splits", "2", "--n-draws", "3", "--couplings", "simplex", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"wifi simplex: the printed 0\.6314 lies (inside|outside)", out)
    assert "the authors' public code, run as written, splits seed 42 bit-identically" in out
    assert "wifi simplex 0.5970 +- 0.0032" in out


def test_fig8_progress_by_blocks_of_draws(tmp_path, capsys):
    """``fig8 --datasets chess --draws 50`` sat at 0/1 (one task per dataset) for minutes; now the bar counts the
    sweep's units, one per block of 25 draws at each m/d and one for the exact classifier: 1 + 2 x 2 here."""
    from figures.reproduce import main

    assert main(["--out", str(tmp_path), "--n-jobs", "1", "fig8", "--datasets", "wifi", "--draws", "50",
                 "--m-multipliers", "1", "2"]) == 0
    err = capsys.readouterr().err
    assert bar_totals(err, "fig8 classification") == {5}


def test_attention_progress_by_cells(tmp_path, capsys):
    """The attention scan was one 0/1 task; now one unit per (logit std, L, m, block of draws): 2 x 1 x 3 x 1."""
    from figures.reproduce import main

    assert main(["--out", str(tmp_path), "--n-jobs", "1", "attention", "--seq-lens", "16", "--logit-stds", "0.1", "1",
                 "--draws", "3"]) == 0
    err = capsys.readouterr().err
    assert bar_totals(err, "attention scan") == {6}


# ---------------------------------------------------------------------------
# Figs. 8 and 10 with exposed protocol and effort (``python -m figures.reproduce``), and the new attention
# figure (``new_attention_scan``): what their JSON states, and that the plotted numbers are the experiments'.


@pytest.mark.parametrize("args, needle", [
    (["fig8", "--splits", "0"], "argument --splits: must be an integer >= 1, got 0"),
    (["--n-jobs", "0", "fig8"], "argument --n-jobs: must be a nonzero integer (-1: every core), got 0"),
    (["fig8", "--protocol", "authors"], "argument --protocol: invalid choice: 'authors'"),
    (["attention", "--logit-stds", "0"], "argument --logit-stds: must be a finite real > 0"),
])
def test_reproduce_bad_arguments_are_one_line(args, needle, capsys):
    with pytest.raises(SystemExit) as info:
        reproduce.main(args)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and needle in err


def test_reproduce_missing_data_is_one_line(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert reproduce.main(["--out", str(tmp_path), "--uci-dir", str(empty), "--no-progress", "fig10"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m figures.reproduce: error: no UCI dataset readable in") and err.count("\n") == 1
