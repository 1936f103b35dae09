"""The real services on the emulator, run the way the functions run them, every DynamoDB
write and read charged to its partition (`Harness`): the bucket dispatchers of the buckets
holding the due tasks for a tick (`bench.common.tick_as_deployed`), then the shard queue drained
as the Lambda event source mapping does (receive up to 10, the worker's `ShardBatch`, delete
what it acknowledges), on a manual clock. Shards of the `bench_long` handler run `LONG_SHARD_S`
on that clock, heartbeating every `HEARTBEAT_S` and asking `ctx.cancelled()` every `CHECK_S`
(as `tasklib.common.Liveness` does). The partition benchmark (`bench.partitions`) and the cost
of heartbeating shards (`bench.cost`) run their scenarios on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import deploy, tick_as_deployed
from bench.counting import RequestCounter, moto_item_sizes
from bench.indexreads import ReadAccountant
from bench.indexwrites import WriteAccountant, describe
from bench.virtual_time import VirtualTimers

T0 = datetime(2026, 12, 7, 0, 0, tzinfo=UTC)
LONG_SHARD_S = 30
HEARTBEAT_S = 5.0  # tasklib.common.Liveness's default
CHECK_S = 1.0  # ctx.cancelled() between units of work; the worker reads at most once a second


class Harness:
    """The services on the emulator, every write and read charged; a tick, then the queue
    drained."""

    def __init__(self, url: str, parameters: dict[str, str] | None = None) -> None:
        import boto3

        from iotsched.adapters.aws import AwsClients
        from iotsched.bootstrap import build
        from iotsched.clock import ManualClock

        self.deployment = deploy(url, parameters=parameters)
        self.clients = AwsClients(region="us-east-1", endpoint_url=url)
        reader = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=url)
        schema = describe(reader, self.deployment.table)
        self.accountant = WriteAccountant(reader, [schema])
        self.read_accountant = ReadAccountant(reader, [schema])
        self.requests = RequestCounter(size_of=moto_item_sizes())
        for client in (self.clients.dynamodb(), self.clients.sqs(), self.clients.sns()):
            self.requests.attach(client)
        self.accountant.attach(self.clients.dynamodb())
        self.read_accountant.attach(self.clients.dynamodb())
        self.pause(True)
        self.clock = ManualClock(T0 - timedelta(minutes=1))
        self.timers = VirtualTimers(self.clock)
        services = build(self.deployment.settings, clock=self.clock, clients=self.clients)
        self.services = dataclasses.replace(
            services,
            handlers={**services.handlers, "bench_long": self._long_shard},
            renewals=self.timers.renewals,
        )
        self.invocations = {"dispatcher": 0, "worker": 0}
        self.at = T0

    def pause(self, paused: bool) -> None:
        self.accountant.paused = paused
        self.read_accountant.paused = paused
        self.requests.paused = paused

    def label(self, name: str) -> None:
        self.accountant.label = name
        self.read_accountant.label = name
        self.requests.phase = name

    def _long_shard(self, ctx: Any) -> dict[str, Any]:
        """`LONG_SHARD_S` of work on the manual clock: a heartbeat every `HEARTBEAT_S`,
        `ctx.cancelled()` every `CHECK_S` (the worker reads the instance at most once a second)."""
        seconds = float(ctx.params.get("seconds", LONG_SHARD_S))
        elapsed, next_beat = 0.0, HEARTBEAT_S
        while elapsed < seconds:
            step = min(CHECK_S, seconds - elapsed)
            self.timers.advance(step)
            elapsed += step
            if ctx.cancelled():
                break
            if elapsed >= next_beat and elapsed < seconds:
                ctx.heartbeat()
                next_beat += HEARTBEAT_S
        return {"ran_s": elapsed}

    def run(
        self,
        definitions: list[dict[str, Any]],
        quotas: dict[str, dict[str, int]] | None = None,
        *,
        deliveries: int | None = None,
    ) -> list[str]:
        """Apply `definitions` (all due at the next instant) with the tenants' `quotas`, tick,
        drain (after about `deliveries` messages, if given: the rest is purged unread, a
        backlog's first stretch measured); the instance ids."""
        from iotsched.core.quotas import TenantQuotas
        from iotsched.core.task_definition import TaskDefinition
        from iotsched.services.definitions.apply import apply_tasks

        # A yearly cron (recurring, as most tasks are: each firing moves the task's due key),
        # scenarios 4 h apart: no earlier scenario's task is due again while a run lasts,
        # however many scenarios it has.
        self.at += timedelta(hours=4)
        at = self.at
        trigger = {"cron": f"{at.minute} {at.hour} {at.day} {at.month} *"}
        tasks = [TaskDefinition.model_validate({**d, "trigger": trigger}) for d in definitions]
        self.pause(True)
        self.clock.set(at - timedelta(minutes=1))
        apply_tasks(
            tasks,
            self.services.tasks,
            now=self.clock.now(),
            quotas={t: TenantQuotas.model_validate(q) for t, q in (quotas or {}).items()},
        )
        self.clock.set(at)
        self.pause(False)
        self.tick(at, [t.id for t in tasks])
        self.drain(deliveries)
        self.pause(True)
        if deliveries is not None:  # what is left is not the next scenario's to run
            self.clients.sqs().purge_queue(QueueUrl=self.deployment.queue_url)
        ids = []
        for t in tasks:
            ids += [i.instance_id for i in self.services.instances.list_instances(task_id=t.id)]
        return ids

    def tick(self, at: datetime, task_ids: list[str]) -> None:
        """The scheduler's tick at `at`, as the deployed dispatchers run it: the bucket
        dispatchers of the buckets holding the due tasks (the one place to change if the
        tick's entry point changes)."""
        self.label("dispatcher")
        self.invocations["dispatcher"] += tick_as_deployed(
            at, self.services, task_ids, self.deployment.settings.index_buckets
        )

    def _time_left(self, started: datetime, timeout_s: float) -> Callable[[], float]:
        """An invocation's remaining time on the manual clock."""
        return lambda: timeout_s - (self.clock.now() - started).total_seconds()

    def drain(self, limit: int | None = None) -> None:
        """Consume the shard queue as the event source mapping and the worker function do;
        with `limit`, stop once that many messages were handed to a worker."""
        from iotsched.services.execution.batch import ShardBatch
        from iotsched.services.execution.outcomes import (
            Delivery,
            PendingShard,
        )

        sqs = self.clients.sqs()
        url = self.deployment.queue_url
        n = handed = 0
        while limit is None or handed < limit:
            self.label("esm")
            batch = sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0, AttributeNames=["All"]
            ).get("Messages", [])
            if not batch:
                return
            n += 1
            self.label("worker")
            self.invocations["worker"] += 1
            started = self.clock.now()
            timeout = self.deployment.worker_timeout_s
            worker = ShardBatch(
                self.services,
                worker=f"bench-worker-{n}",
                time_left_s=self._time_left(started, timeout),
                timer=self.timers.timer,
                renewals=self.timers.renewals,
            )
            deliveries = [
                Delivery(
                    body=m["Body"],
                    receipt_handle=m["ReceiptHandle"],
                    receive_count=int(m.get("Attributes", {}).get("ApproximateReceiveCount", 1)),
                )
                for m in batch
            ]
            handed += len(batch)
            worker.expect(deliveries)
            acknowledged: list[str] = []
            pending = []
            for d in deliveries:
                try:
                    outcome = worker.run(d)
                except Exception:  # noqa: S112 - a batch item failure: the message comes back
                    continue
                if isinstance(outcome, PendingShard):
                    pending.append(outcome)
                elif worker.may_acknowledge(d.receipt_handle, outcome):
                    acknowledged.append(d.receipt_handle)
            worker.end()
            for p in pending:
                if (
                    p.error is None
                    and p.outcome is not None
                    and worker.may_acknowledge(p.delivery.receipt_handle, p.outcome)
                ):
                    acknowledged.append(p.delivery.receipt_handle)
            self.timers.clear()  # the invocation is over: its timers and renewals with it
            self.label("esm")
            if acknowledged:
                sqs.delete_message_batch(
                    QueueUrl=url,
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(acknowledged)
                    ],
                )
