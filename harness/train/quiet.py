"""Third-party console lines that a user of train.py cannot act on, silenced where they start; nothing else.

- Lightning's info lines: its tips to install litlogger and litmodels, "GPU available: False, used: False" and
  "TPU available: ..." (train.py's own first line names each rank's device), and "`Trainer.fit` stopped:
  `max_steps=N` reached." (the end-of-run table says how many steps ran). Dropped by their opening words from
  its rank-zero logger; its other lines and all of its warnings still show.
- torch 2.14 deprecates `LeafSpec`, which Lightning 2.6's own `lightning.pytorch.utilities._pytree` still
  builds: a FutureWarning once per rank. Ignored for that message from that module only.
"""

from __future__ import annotations

import logging
import warnings

# Where Lightning's rank_zero_info lines are logged (lightning.pytorch's, and fabric's, which it may use).
LIGHTNING_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")
NOISE = ("💡 Tip:", "GPU available:", "TPU available:", "`Trainer.fit` stopped:")
LEAFSPEC_DEPRECATION = r"`isinstance\(treespec, LeafSpec\)` is deprecated"


class _DropNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(NOISE)


def silence_third_party_noise() -> None:
    """Install the filters (again is harmless): before the Trainer is built, which prints the first of them."""
    for name in LIGHTNING_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropNoise) for f in logger.filters):
            logger.addFilter(_DropNoise())
    warnings.filterwarnings(
        "ignore",
        message=LEAFSPEC_DEPRECATION,
        category=FutureWarning,
        module=r"lightning\.pytorch\.utilities\._pytree",
    )
