"""Entry point: ``python -m figures [--quick] [--only NAME] [--out DIR] ...``."""

from .cli import main

raise SystemExit(main())
