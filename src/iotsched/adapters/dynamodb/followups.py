"""The sweeper's readers of instances: open ones by deadline, final ones that owe follow-ups."""

from __future__ import annotations

from iotsched.adapters.dynamodb.instances import Instances
from iotsched.adapters.dynamodb.keys import (
    OPEN_PREFIX,
    _instance_key,
    owed_partitions,
)
from iotsched.core.buckets import partitions
from iotsched.core.instance_record import (
    FollowUp,
    InstanceRecord,
)


class FollowUps(Instances):
    """The sweeper's readers of instances, and the settling of owed follow-ups."""

    def open_instances(self, *, limit: int = 1000) -> list[InstanceRecord]:
        # Every OPEN bucket, merged in deadline order (the sort key leads with the deadline),
        # and the single `OPEN` of earlier versions: what was open at an upgrade still ends.
        items = self._gather(
            [
                {
                    "IndexName": "by_deadline",
                    "KeyConditionExpression": "open_pk = :open",
                    "ExpressionAttributeValues": {":open": {"S": pk}},
                }
                for pk in [*partitions(OPEN_PREFIX, self._buckets), OPEN_PREFIX]
            ],
            order="open_sk",
            limit=limit,
        )
        # eventually consistent: the sweeper's every write is conditional (half the units)
        found = self._fetch_instances(items, consistent=False)
        return [i for i in found if not i.status.final]  # the index lags the table

    def settle_followup(self, instance_id: str, step: FollowUp) -> bool:
        # Strike `step` off; the write that strikes the last one also takes the instance out of
        # the owing partition. Either may land twice (a retried request): the second finds the
        # mark gone and changes nothing. A mark struck by another caller between the two
        # conditions (the other was the last but one) is decided again on a fresh read, so the
        # last strike-off is always the one write that leaves the index.
        key = _instance_key(instance_id)
        values = {":step": {"S": step.value}, ":one": {"N": "1"}}
        for _ in range(len(FollowUp)):  # each retry follows another caller's strike-off
            if self._update_if(
                key,
                "REMOVE owed, open_pk, open_sk",
                "contains(owed, :step) AND size(owed) = :one",
                {},
                values,
            ):
                return True
            if self._update_if(
                key,
                "DELETE owed :steps",
                "contains(owed, :step) AND size(owed) > :one",
                {},
                {**values, ":steps": {"SS": [step.value]}},
            ):
                return True
            current = self.get_instance(instance_id)
            if current is None or step not in current.owed:
                return False
        return False

    def owing_instances(self, *, limit: int = 1000) -> list[InstanceRecord]:
        # Every owing bucket (and the legacy OWED#0..3), merged oldest end first.
        items = self._gather(
            [
                {
                    "IndexName": "by_deadline",
                    "KeyConditionExpression": "open_pk = :owed",
                    # unpublished alerts share these partitions (`alerts`): a
                    # backlog of them must not take the limit
                    "FilterExpression": "#kind = :instance",
                    "ExpressionAttributeNames": {"#kind": "kind"},
                    "ExpressionAttributeValues": {
                        ":owed": {"S": pk},
                        ":instance": {"S": "instance"},
                    },
                }
                for pk in owed_partitions(self._buckets)
            ],
            order="open_sk",
            limit=limit,
        )
        found: list[InstanceRecord] = []
        for instance in self._fetch_instances(items):
            if instance.owed:
                found.append(instance)
            else:  # its last mark went, its index keys not: drop them now
                self._update_if(
                    _instance_key(instance.instance_id),
                    "REMOVE open_pk, open_sk",
                    "attribute_not_exists(owed)",
                    {},
                    {},
                )
        return found
