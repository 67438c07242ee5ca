"""Issue 22, item 7: benchmarks/ stays in the repository but is not installed.

``benchmarks`` is run from a checkout (``python -m benchmarks.bench_theory``); installed into
site-packages it would be a top-level package called ``benchmarks`` that shadows (or is shadowed
by) any other project's.  Checked on the packaging configuration itself (pyproject's
``[tool.setuptools.packages.find]``) and on what setuptools' finder selects with it.
"""

import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[1]


def _find_config():
    with open(ROOT / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)["tool"]["setuptools"]["packages"]["find"]


def test_pyproject_does_not_install_benchmarks():
    find = _find_config()
    assert not any(pattern.startswith("benchmarks") for pattern in find.get("include", []))
    assert "benchmarks*" in find.get("exclude", [])


def test_package_finder_selects_the_four_packages_and_not_benchmarks():
    find = _find_config()
    found = find_packages(str(ROOT), include=find.get("include", ["*"]), exclude=find.get("exclude", ()))
    tops = {name.split(".")[0] for name in found}
    assert tops == {"theory", "montecarlo", "figures", "paper_checks"}
    assert "montecarlo.experiments" in found  # the package that carries the UCI data files
    # the finder is not vacuous: without the exclusion benchmarks (a package) would be picked up
    widened = find_packages(str(ROOT), include=list(find.get("include", [])) + ["benchmarks*"])
    assert "benchmarks" in widened


def test_uci_package_data_is_declared():
    with open(ROOT / "pyproject.toml", "rb") as fh:
        data = tomllib.load(fh)["tool"]["setuptools"]["package-data"]
    patterns = data["montecarlo.experiments"]
    files = {p.name for pattern in patterns for p in (ROOT / "montecarlo" / "experiments").glob(pattern)}
    assert {"abalone.data", "car.data", "wifi.txt", "README.md"} <= files
