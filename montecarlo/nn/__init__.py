r"""PRF attention as a torch ``nn.Module``: :class:`PRFAttention` (the SimRFs-Performer of Sec. 5.4).

``from montecarlo.nn import PRFAttention``.  FAVOR+-style linear attention:
the softmax kernel :math:`e^{s\,q^\top k}` is estimated by positive random
features of any coupling (``coupling="simplex"`` is the SimRFs-Performer) and
any positive feature kind of :mod:`theory.feature_kinds` (``kind="prf"``,
``"hyperbolic"``, ``"oprf"`` where registered), bidirectional or causal, self-
or cross-attention, with key-padding masks.  The log-features come from the
kind's record (hook ``log_features``: one home of each formula, shared with the
numpy reference :func:`montecarlo.experiments.attention.prf_attention`).

The operating manual (stabilisation, input range, precision, synchronisation, gradients, speed, decoding,
multi-head layers, the error, copies and checkpoints): :ref:`guide-montecarlo.nn`
(``docs/guide/attention.rst``).
"""

from __future__ import annotations

import sys
import types

from montecarlo.nn import _features, _module
from montecarlo.nn._attention_error import AttentionError, attention_error, measured_attention_error, plan_attention
from montecarlo.nn._dispatch import FUSED
from montecarlo.nn._features import check_device, draw_projections, hook_extras, input_range, oprf_a
from montecarlo.nn._mha import PRFMultiheadAttention
from montecarlo.nn._module import RUNNING_MOMENTUM, DecodingState, PRFAttention
from montecarlo.nn._scan import DIRECT_BLOCK, GROUP_ENTRIES, PRODUCT_STATES
from montecarlo.nn._streams import check_generator, fork_generator

__all__ = [
    "DEFAULT_CHUNK",
    "INPUT_DTYPES",
    "DecodingState",
    "STORAGE_DTYPES",
    "AttentionError",
    "PRFAttention",
    "PRFMultiheadAttention",
    "attention_error",
    "check_device",
    "check_generator",
    "draw_projections",
    "input_range",
    "measured_attention_error",
    "oprf_a",
    "plan_attention",
]

#: dtypes of the projections (and of the feature computations); other accepted dtypes store float32.
STORAGE_DTYPES = _features.STORAGE_DTYPES
#: Input dtypes the module accepts (features computed in float32 for the half types).
INPUT_DTYPES = _features.INPUT_DTYPES
#: Default chunk length of the causal scan per device type (a power of two).  On a GPU the fused kernels'
#: chunks: on an H100 (bf16, batch x heads 32, d 64, m 128, forward + backward) 128 took 35.6 ms at
#: L = 65536 against 41.0 for 256 and 51.6 for 512 (and 2.84 against 3.19 ms at 4096 under CUDA graphs), at
#: 12% more memory than 256 (benchmarks/README); on the CPU the within-chunk work dominates.
DEFAULT_CHUNK = _module.DEFAULT_CHUNK

#: The package's files in dependency order (each imports only files before it; ``_fused``, which needs Triton,
#: is imported by ``_dispatch`` and ``_module`` when the kernels first run).
_FILES = ("_probes", "_ops", "_scan", "_fused", "_dispatch", "_streams", "_features", "_module", "_mha",
          "_attention_error")


def _files():
    """The package's files imported so far, in :data:`_FILES` order."""
    return [m for m in (sys.modules.get(f"{__name__}.{f}") for f in _FILES) if m is not None]


class _Package(types.ModuleType):
    """``montecarlo.nn`` itself, one namespace over its files as when it was one file: a name set here
    (``montecarlo.nn.FUSED = False``, a test's ``monkeypatch.setattr``, ``mock.patch.object``) is set in every
    file that holds the same object (its home and the files that imported it); a file's private name is read
    through, and deleting one set here (``mock.patch``'s undo) restores its files' original."""

    def __getattr__(self, name):
        for mod in _files():
            if name in vars(mod):
                return vars(mod)[name]
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")

    def __setattr__(self, name, value):
        local = name in vars(self)
        old = vars(self)[name] if local else next((vars(m)[name] for m in _files() if name in vars(m)), _MISSING)
        if old is not _MISSING:
            if not local and _ORIGINALS.get(name, _MISSING) is value:  # (set back: the override has ended)
                del _ORIGINALS[name]
            elif not local:
                _ORIGINALS.setdefault(name, old)
            for mod in _files():
                if vars(mod).get(name, _MISSING) is old:
                    setattr(mod, name, value)
        if local or old is _MISSING:
            super().__setattr__(name, value)

    def __delattr__(self, name):
        if name in _ORIGINALS and name not in vars(self):
            self.__setattr__(name, _ORIGINALS[name])
        else:
            super().__delattr__(name)


_MISSING = object()
#: The files' values of read-through names before they were first set here (restored by ``del``).
_ORIGINALS: dict = {}


sys.modules[__name__].__class__ = _Package
