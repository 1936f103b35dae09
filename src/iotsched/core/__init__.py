"""The pure core: models, triggers, slots, shard plans and state decisions.

A task definition is `task_definition` with its parts (`task_triggers`, `task_sharding`,
`task_policies`, `task_alerts`, `task_fleet_safety`, `calendars`) and a task file `task_file`;
what the scheduler stores is `task_record`, `instance_record`, `shard_record`, `attempt_record`,
and what it sends `shard_message` and `alert_message`. Nothing in this package imports an AWS
SDK, reads the environment or the wall clock: every instant is passed in
(`tests/unit/test_architecture.py` and `lint-imports` hold the rule).
"""

from __future__ import annotations
