"""Temporary home of the adversary's names while importers move to their modules."""

from __future__ import annotations

from iotsched.adversary.limits import (  # rehome: temporary re-export
    MAX_ITEM_BYTES,
    MAX_TRANSACTION_ACTIONS,
    MAX_TRANSACTION_BYTES,
    attribute_value_size,
    item_size,
    update_paths,
    update_paths_error,
)
from iotsched.adversary.middleware import Adversary  # rehome: temporary re-export
from iotsched.adversary.protocol import REASON_MESSAGES  # rehome: temporary re-export
from iotsched.adversary.schedule import (  # rehome: temporary re-export
    RANDOM_CANCEL_CODES,
    AdversaryConfig,
    Fault,
)

__all__ = [
    "MAX_ITEM_BYTES",
    "MAX_TRANSACTION_ACTIONS",
    "MAX_TRANSACTION_BYTES",
    "RANDOM_CANCEL_CODES",
    "REASON_MESSAGES",
    "Adversary",
    "AdversaryConfig",
    "Fault",
    "attribute_value_size",
    "item_size",
    "update_paths",
    "update_paths_error",
]
