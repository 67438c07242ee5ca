"""Entry point: ``python -m figures [--quick] [--only NAME] [--out DIR] ...``."""

from ._sweep import exit_now
from .cli import main

exit_now(main())
