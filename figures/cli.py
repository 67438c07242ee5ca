"""``python -m figures``: regenerate every figure, or those named by ``--only``."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import traceback

from montecarlo.experiments.runtime import EXIT_TERMINATED, Terminated, one_default_help, terminate_as_interrupt
from theory.cli import atomic_write, check_output_dir, int_arg, make_parser, n_jobs_arg

from . import registry
from ._context import BACKENDS, DPS_RANGE, UCI_ENV, Context, _write_text
from .downstream import Skip
from .registry import FIGURES, lookup
from .style import use_paper_style

DEFAULT_OUT = "simplex_rf_figures"


def _parser():
    p = make_parser(
        "python -m figures",
        ("Regenerate the figures of Simplex Random Features (Reid et al., ICML 2023) with analytic "
         "curves from the theory package and Monte Carlo points from the montecarlo package. Each figure writes "
         "NAME.png, NAME.pdf and its plotted numbers NAME.json (each written under a temporary name and "
         "renamed into place). Exit status: 0 when every selected figure was written or skipped, 1 when one "
         "failed, 2 for bad options, 130 on Ctrl-C, 143 on SIGTERM (no temporary file is left)."),
        epilog="figures: " + ", ".join(f.name for f in FIGURES),
    )
    one_default_help(p)
    p.add_argument("--out", default=DEFAULT_OUT, help="output directory (created if missing)")
    p.add_argument("--only", action="append", metavar="NAME",
                   help="only these figures (repeat or comma-separate; full name, figN, or LaTeX label)")
    p.add_argument("--quick", action="store_true", help="fewer Monte Carlo samples (under 30 s in all)")
    p.add_argument("--seed", type=int_arg(0), default=0, help="base random seed (>= 0)")
    p.add_argument("--dps", type=int_arg(*DPS_RANGE), default=20,
                   help=f"mpmath decimal digits of the analytic curves ({DPS_RANGE[0]} to {DPS_RANGE[1]})")
    p.add_argument("--backend", choices=BACKENDS, default="numpy",
                   help="array backend of the Monte Carlo parts")
    p.add_argument("--uci-dir", default=None,
                   help=f"UCI data directory for Figs. 8 and 10 (None: ${UCI_ENV}, else the copy shipped with "
                        "montecarlo.experiments); must exist")
    p.add_argument("--n-jobs", type=n_jobs_arg, default=None, metavar="N",
                   help="parallel workers of the figures' sweeps (joblib; default every core, -1 too); the numbers do "
                        "not depend on it")
    p.add_argument("--no-progress", action="store_true", help="no progress lines and bars on stderr")
    p.add_argument("--traceback", action="store_true", help="print the full traceback of a failed figure")
    p.add_argument("--list", action="store_true", help="list the figures and exit")
    return p


#: Names of Fig. 9 (a Performer trained for minutes: not one of the figures of this command).
_FIG9_NAMES = ("fig9", "fig9_performer_digits", "performer_fig")


def _selection(parser, only):
    """The figures named by the ``--only`` options (``None``: every figure); a name list that is empty
    (``--only ""`` or ``--only ,``) or names an unknown figure is a parser error (status 2, nothing written)."""
    if only is None:
        return list(registry.FIGURES)
    chosen = []
    for item in only:
        for name in filter(None, (s.strip() for s in item.split(","))):
            if name in _FIG9_NAMES:
                parser.error(f"--only {name}: Fig. 9 (a Performer-ViT trained on scikit-learn's digits) is not drawn "
                             "by python -m figures; run python -m figures.reproduce performer")
            try:
                f = lookup(name)
            except ValueError as exc:
                parser.error(f"--only: {exc}; Fig. 9 is drawn by python -m figures.reproduce performer")
            if f not in chosen:
                chosen.append(f)
    if not chosen:
        parser.error(f"--only: no figure named (got {', '.join(repr(o) for o in only)}); name one or more of "
                     f"{', '.join(f.name for f in registry.FIGURES)}, or leave --only out for all")
    return chosen


def main(argv=None):
    """Run the command line; returns the exit status (0 when every selected figure was written or skipped).

    Exit status: 0 every selected figure written or skipped, 1 one failed, 2 bad options, 130 interrupted by
    Ctrl-C (SIGINT), 143 terminated by SIGTERM; an interrupted or terminated run leaves the files it had
    finished, complete, and no temporary ``.NAME.PID.part`` file.

    Parameters
    ----------
    argv : list of str, optional
        Arguments (default ``sys.argv[1:]``).
    """
    with terminate_as_interrupt():
        try:
            return _main(argv)
        except KeyboardInterrupt as exc:  # outside a figure (e.g. writing index.json): already cleaned up
            return _interrupted(exc, None)


def _interrupted(exc, during):
    terminated = isinstance(exc, Terminated)
    print(f"python -m figures: {'terminated (SIGTERM)' if terminated else 'interrupted'}"
          + (f" during {during}" if during else "") + " (files already written are complete)", file=sys.stderr)
    return EXIT_TERMINATED if terminated else 130


def _merged_index(out, summary, settings):
    """The figures of ``index.json``: this run's entries (with ``settings``), and, for the figures of an earlier
    run into the same folder that this run did not draw and whose three files are still there, that run's entries
    (their own settings, ``"earlier_run": true``), in the registry's order; so ``--only`` into a full folder keeps
    the record of every figure in it.  An unreadable earlier index is ignored."""
    entries = {e["name"]: {**e, "settings": settings} for e in summary}
    try:
        with open(os.path.join(out, "index.json"), encoding="utf-8") as fh:
            old = json.load(fh)
        old_settings, old_figures = old.get("settings"), old["figures"]
        for e in old_figures:
            name = e["name"]
            if (name not in entries and e.get("status") == "written"
                    and all(os.path.isfile(os.path.join(out, f"{name}.{ext}")) for ext in ("png", "pdf", "json"))):
                entries[name] = {**e, "settings": e.get("settings", old_settings), "earlier_run": True}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        pass
    order = {f.name: i for i, f in enumerate(registry.FIGURES)}
    return sorted(entries.values(), key=lambda e: order.get(e["name"], len(order)))


def _outcome(status, reason=None, **extra):
    return {"status": status, "reason": reason, "files": None, "seconds": 0.0, "cpu_seconds": 0.0, **extra}


def _swept(ctx, figures):
    """Every figure of ``figures`` through two parallel sweeps on ``ctx.n_jobs`` worker processes: the cells of
    all of them at once (:func:`figures._sweep.compute`), then their drawing (each figure rendered to bytes in a
    worker, :func:`figures._sweep.render`); the files are written here.  Returns {name: outcome} (``status``
    'written' with ``files``, 'skipped' or 'failed' with ``reason``; ``cpu_seconds``: of its cells and drawing)."""
    from . import _sweep

    outcomes, parts = {}, {}
    for f in figures:
        try:
            parts[f.name] = f.parts(ctx)
        except Skip as exc:
            outcomes[f.name] = _outcome("skipped", str(exc))
        except Exception as exc:
            failure = _sweep.Failed.of(exc)
            outcomes[f.name] = _outcome("failed", failure.reason, traceback=failure.traceback)
    if not parts:
        return outcomes
    bar = ctx.progress_bar(None, f"cells of {len(parts)} figures")
    try:
        results, cpu = _sweep.compute(parts, ctx.n_jobs, bar.message if ctx.progress else None, "cells")
    finally:
        bar.close()
    todo = []
    for name, res in results.items():
        failure = next((v for v in res.values() if isinstance(v, _sweep.Failed)), None)
        if failure is None:
            todo.append(name)
        elif isinstance(failure.exc, Skip):
            outcomes[name] = _outcome("skipped", str(failure.exc), cpu_seconds=cpu[name])
        else:
            outcomes[name] = _outcome("failed", failure.reason, traceback=failure.traceback, cpu_seconds=cpu[name])
    bar = ctx.progress_bar(None, f"drawing {len(todo)} figures")
    try:
        rendered = _sweep.render(ctx, [(name, results[name]) for name in todo], bar.message if ctx.progress else None)
    finally:
        bar.close()
    for name, out in zip(todo, rendered):
        out["cpu_seconds"] += cpu[name]
        outcomes[name] = out
    return outcomes


def _main(argv):
    parser = _parser()
    args = parser.parse_args(argv)
    if args.list:
        for f in registry.FIGURES:
            print(f"{f.name:22s} {f.paper_label or '(new)':20s} {f.description}")
        return 0
    if args.backend == "torch" and importlib.util.find_spec("torch") is None:
        parser.error("--backend torch needs PyTorch (pip install torch array-api-compat)")
    selected = _selection(parser, args.only)
    try:
        check_output_dir(args.out, "--out")
    except ValueError as exc:
        parser.error(str(exc))
    if args.uci_dir is not None and not os.path.isdir(args.uci_dir):
        parser.error(f"--uci-dir {args.uci_dir!r} does not exist or is not a directory")
    ctx = Context(out=args.out, quick=args.quick, seed=args.seed, dps=args.dps, backend=args.backend,
                  progress=not args.no_progress, uci_dir=args.uci_dir, n_jobs=args.n_jobs)
    use_paper_style()
    try:
        os.makedirs(ctx.out, exist_ok=True)
    except OSError as exc:
        parser.error(f"--out {ctx.out!r}: cannot create the directory ({exc.strerror})")
    summary, failed = [], []
    t_all = time.perf_counter()
    try:
        swept = _swept(ctx, [f for f in selected if f.parts is not None and f.render is not None])
    except KeyboardInterrupt as exc:
        return _interrupted(exc, "the figures' sweep")
    for i, f in enumerate(selected, 1):
        entry = {"name": f.name, "paper_label": f.paper_label}
        t0, c0 = time.perf_counter(), time.process_time()
        if f.name in swept:
            outcome = swept[f.name]
            try:
                if outcome["status"] == "written":
                    ctx.write_files(f.name, outcome["files"])
            except KeyboardInterrupt as exc:
                return _interrupted(exc, f.name)
            except OSError as exc:
                outcome = {**outcome, "status": "failed", "reason": f"{type(exc).__name__}: {exc}"}
            status, reason = outcome["status"], outcome.get("reason")
            if status == "failed" and args.traceback and outcome.get("traceback"):
                print(outcome["traceback"], file=sys.stderr, end="", flush=True)
            seconds, cpu = outcome["seconds"], outcome["cpu_seconds"]
        else:  # a figure without parts: drawn here
            if ctx.progress:
                print(f"[{i}/{len(selected)}] {f.name} ...", file=sys.stderr, flush=True)
            status, reason = "written", None
            try:
                f.draw(ctx)
            except KeyboardInterrupt as exc:
                return _interrupted(exc, f.name)
            except Skip as exc:
                status, reason = "skipped", str(exc)
            except Exception as exc:  # report, go on with the other figures, fail at the end
                status, reason = "failed", f"{type(exc).__name__}: {' '.join(str(exc).split())}"
                if args.traceback:
                    traceback.print_exc()
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        entry["status"] = status
        if ctx.progress and f.name in swept:
            print(f"[{i}/{len(selected)}] {f.name} {status}", file=sys.stderr, flush=True)
        if status == "skipped":
            entry["reason"] = reason
            print(f"{f.name}: skipped: {reason}", flush=True)
        elif status == "failed":
            entry["reason"] = reason
            failed.append(f.name)
            print(f"{f.name}: FAILED: {reason}", flush=True)
            print(f"python -m figures: {f.name} failed: {reason}", file=sys.stderr, flush=True)
        else:
            print(f"{f.name}: {cpu:.1f} CPU-s -> {os.path.join(ctx.out, f.name)}.{{png,pdf,json}}", flush=True)
        entry["seconds"] = round(seconds, 3)
        entry["cpu_seconds"] = round(cpu, 3)
        summary.append(entry)
    total = time.perf_counter() - t_all
    settings = {"quick": ctx.quick, "seed": ctx.seed, "dps": ctx.dps, "backend": ctx.backend}
    index = {"settings": settings, "seconds": round(total, 3),
             "figures": _merged_index(ctx.out, summary, settings)}
    atomic_write(os.path.join(ctx.out, "index.json"), lambda tmp: _write_text(tmp, json.dumps(index, indent=1) + "\n"))
    written = sum(e["status"] == "written" for e in summary)
    skipped = sum(e["status"] == "skipped" for e in summary)
    print(f"{written} of {len(selected)} figures written, {skipped} skipped, {len(failed)} failed, "
          f"in {total:.1f} s ({ctx.out})", flush=True)
    return 1 if failed else 0
