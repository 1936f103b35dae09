"""The pure core: models, triggers, slots, shard plans and state decisions.

Nothing in this package imports an AWS SDK, reads the environment or the wall clock; every
instant is passed in. `tests/unit/test_architecture.py` and `lint-imports` hold the rule.
"""

from __future__ import annotations
