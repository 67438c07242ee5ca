"""The main job's cost: wall and CPU time of python -m figures (or --quick) and all its worker processes.

``python -m figures`` (or ``--quick``) end to end, wall time and CPU time of the whole process tree (the
worker processes included), with the load average before and after each run.

Each run is a subprocess; its CPU time is the children's resource usage (user + system) gathered when it
ends, which counts the worker processes it waited for.  ``--against DIR`` runs another checkout (e.g.
``git worktree add /tmp/base <commit>``) the same number of times, alternating with this one, so that both see
the same neighbours.  A run whose load average (1 minute, before or after it) was above ``--max-load`` is
marked; the README's numbers are from runs below it.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time

from theory.cli import int_arg, main_runner, make_parser, real_arg

from ._timing import REPO_ROOT, RESULTS_DIR, parsed_json_path, write_json

PROG = "python -m benchmarks.bench_figures"


def run_once(root, quick, n_jobs=None):
    """One ``python -m figures`` run from checkout ``root`` into a temporary folder: a dict of wall and CPU
    seconds (user + system of the process tree) and the 1-minute load average before and after."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "figures", "--out", out, "--no-progress"] + (["--quick"] if quick else [])
        if n_jobs is not None:
            cmd += ["--n-jobs", str(n_jobs)]
        env = dict(os.environ, PYTHONPATH=str(root))
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"python -m figures failed in {root} (status {proc.returncode}): {proc.stderr[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"root": str(root), "quick": quick, "wall_s": wall, "cpu_s": cpu, "load_before": load0,
            "load_after": os.getloadavg()[0]}


def main(argv=None):
    """Run the command line; returns the exit status (0 done, 2 bad options, 130 Ctrl-C, 143 SIGTERM)."""
    from montecarlo.experiments.runtime import run_terminable

    return run_terminable(main_runner, PROG, _main, argv)


def _main(argv):
    from montecarlo.experiments.runtime import one_default_help

    p = one_default_help(make_parser(PROG, __doc__.splitlines()[0]))
    p.add_argument("--quick", action="store_true", help="time python -m figures --quick")
    p.add_argument("--repeat", type=int_arg(1), default=2, help="runs of each checkout")
    p.add_argument("--against", default=None, metavar="DIR", help="another checkout, run alternately")
    p.add_argument("--n-jobs", type=int_arg(1), default=None, help="--n-jobs of the runs (default: theirs)")
    p.add_argument("--max-load", type=real_arg(0.0), default=1.0,
                   help="1-minute load average above which a run is marked as loaded")
    p.add_argument("--json", nargs="?", const=str(RESULTS_DIR / "bench_figures.json"), default=None,
                   metavar="PATH", help="write the results as strict JSON (atomically; checked before any run)")
    args = p.parse_args(argv)
    json_path = parsed_json_path(p, args.json)
    if args.against is not None and not os.path.isdir(os.path.join(args.against, "figures")):
        p.error(f"--against {args.against!r} is not a checkout of this toolkit (no figures package)")
    roots = [REPO_ROOT] + ([os.path.abspath(args.against)] if args.against else [])
    runs = []
    for k in range(args.repeat):
        for root in roots:
            r = run_once(root, args.quick, args.n_jobs)
            r["loaded"] = max(r["load_before"], r["load_after"]) > args.max_load
            runs.append(r)
            print(f"{'this' if root == REPO_ROOT else 'against'} run {k + 1}: {r['wall_s']:.1f} s wall, "
                  f"{r['cpu_s']:.1f} CPU-s, load {r['load_before']:.2f} -> {r['load_after']:.2f}"
                  + (" (loaded)" if r["loaded"] else ""), flush=True)
    if json_path is not None:
        write_json(json_path, {"cpus": os.cpu_count(), "quick": args.quick, "runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
