"""Helpers of the command-line tests (one home each): the environment of a subprocess that runs this checkout,
a strict JSON reader, the totals of the progress bars on stderr, and a stand-in that fails when called."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cli_env():
    """The environment of a subprocess that imports this checkout (and not the UCI data of the caller's
    ``SIMPLEX_RF_UCI_DIR``)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("SIMPLEX_RF_UCI_DIR", None)
    return env


def boom(*args, **kwargs):
    """Patched in for a computation that must not start before the options are checked."""
    raise AssertionError("computed before the options were checked")


def strict_json(path):
    """The JSON file at ``path``, refusing NaN and Infinity (``json.loads`` accepts them by default)."""
    def refuse(token):
        raise ValueError(f"not strict JSON: {token}")

    return json.loads(Path(path).read_text(), parse_constant=refuse)


def bar_totals(err, label):
    """The totals n of every ``label: k/n`` progress line or tqdm bar ``label: ... k/n`` on stderr."""
    return {int(m) for m in re.findall(re.escape(label) + r"[^\r\n]*?\d+/(\d+)", err)}
