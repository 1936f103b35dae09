"""Effect keys: a handler's exactly-once side effects."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from iotsched.adapters.dynamodb.codec import (
    _epoch_s,
    _to_item,
)
from iotsched.adapters.dynamodb.keys import _effect_pk
from iotsched.adapters.dynamodb.shards import Shards
from iotsched.adapters.dynamodb.transact_outcomes import Kind
from iotsched.ports.effects import EffectConditionError
from iotsched.ports.shards import StaleAttemptError
from iotsched.ports.store_errors import WriteRejectedError


class Effects(Shards):
    """Effect keys: a handler's exactly-once side effects."""

    def record_effect(
        self,
        key: str,
        *,
        instance_id: str,
        index: int,
        attempt: int,
        writes: Sequence[Mapping[str, Any]] = (),
        listed: bool = True,
        expires_at: datetime | None = None,
    ) -> bool:
        # The effect item (it names instance, shard and attempt), fenced on the attempt, and
        # the caller's writes, in one transaction:
        #   Transact[0 shard: attempt = n AND running; 1 effect: if new; 2.. the caller's writes]
        #   a second run ── 1 fails ──► False: skip the effect
        #   a zombie (attempt n-1) ── 0 fails ──► StaleAttemptError, nothing written
        #   a caller's write's condition fails ──► EffectConditionError, nothing written
        #   contention, throttling ──► sent again (a few rounds, then StoreContendedError)
        #   anything else (ValidationError, an item too large) ──► WriteRejectedError
        # The shard is only checked, never grown, except for the attempt's first few keys
        # (`listed`), which are appended to its record so that operators see them even if
        # the attempt dies; the rest are counted when the attempt ends.
        condition, names, values = self._fence(attempt)
        fence: dict[str, Any] = {
            "TableName": self._table,
            "Key": self._shard_key(instance_id, index),
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
        if listed:
            fence["UpdateExpression"] = (
                f"SET attempts[{attempt - 1}].#keys = list_append("
                f"if_not_exists(attempts[{attempt - 1}].#keys, :empty), :key)"
            )
            fence["ExpressionAttributeNames"] = {**names, "#keys": "keys"}
            fence["ExpressionAttributeValues"] = {
                **values,
                ":empty": {"L": []},
                ":key": {"L": [{"S": key}]},
            }
        effect = {
            "TableName": self._table,
            "Item": _to_item(
                {
                    "pk": _effect_pk(key),
                    "sk": "EFFECT",
                    "kind": "effect",
                    "instance_id": instance_id,
                    "idx": index,
                    "attempt": attempt,
                    "expires_at": _epoch_s(expires_at) if expires_at else None,  # TTL
                }
            ),
            "ConditionExpression": "attribute_not_exists(pk)",
        }
        outcome = self._transaction(
            [
                {"Update" if listed else "ConditionCheck": fence},
                {"Put": effect},
                *(self._on_table(w) for w in writes),
            ],
            what=f"effect {key!r}",
        )
        if outcome.kind is Kind.COMMITTED:
            return True
        if outcome.kind is Kind.CONDITION_FAILED:
            if 0 in outcome.failed:
                raise StaleAttemptError(
                    f"{instance_id} shard {index}: attempt {attempt} lost the lease"
                )
            if 1 in outcome.failed:
                return False
            write = outcome.failed[0] - 2
            raise EffectConditionError(
                f"effect {key!r}: the condition of its write {write} failed; nothing was "
                "written and the key is not claimed",
                index=write,
            )
        # WriteRejectedError even for a request refused as a whole (the 4 MB transaction
        # limit, a malformed write of the caller's): the handler's contract names no AWS error.
        raise WriteRejectedError(
            f"effect {key!r} not recorded: {outcome.describe()}"
        ) from outcome.cause

    def _on_table(self, write: Mapping[str, Any]) -> Any:
        """A caller's transaction entry, aimed at this table unless it names one."""
        ((action, body),) = write.items()
        return {action: {"TableName": self._table, **body}}
