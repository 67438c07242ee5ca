r"""Regenerate the figures of Simplex Random Features (Reid et al., ICML 2023), and new ones.

The command line, the figure list and styles: :ref:`guide-figures` (``docs/guide/experiments.rst``).
"""

from .cli import main
from .registry import FIGURES, FIGURES_BY_NAME, Figure, lookup
from .style import COUPLING_STYLE

__all__ = ["COUPLING_STYLE", "FIGURES", "FIGURES_BY_NAME", "Figure", "lookup", "main"]
