"""``python -m montecarlo.nn plan|grid|plan-grid ...``: :func:`montecarlo.nn.plan_attention` and its checks from the command line."""

import sys

from montecarlo.nn._attention_error import main

sys.exit(main())
