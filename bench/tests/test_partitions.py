"""The partition benchmark's classes and ceilings (`bench.partition_ceilings.analyse`), on
ledgers written by hand: bucketed keys are shared, keys naming a task or an instance are theirs;
reads reach their limit at 3,000 RCU/s, writes at 1,000 WCU/s."""

from __future__ import annotations

from bench.indexreads import ReadCharge, ReadLedger
from bench.indexwrites import Charge, Ledger
from bench.partition_ceilings import analyse

INSTANCES = [f"pb-many-{i:05d}@2026-12-07T08:00Z" for i in range(4)]


def ledger_of(charges: list[Charge]) -> Ledger:
    ledger = Ledger()
    for n, c in enumerate(charges):
        ledger.charge("worker", f"item-{n}", [], [c])
    return ledger


def test_bucketed_keys_are_shared_and_spread_over_their_family() -> None:
    charges = [
        # 4 instances x 10 shards: 2 WCU per shard on LEASE#k, 8 buckets, unevenly hit
        *[
            Charge("idx", f"LEASE#{(i * 10 + s) % 3}", "put", 2)
            for i in range(4)
            for s in range(10)
        ],
        Charge("idx", "LEASE#7", "put", 2),  # the highest bucket seen: 8 buckets
        *[Charge("table", f"INST#{i}", "put", 1) for i in INSTANCES for _ in range(10)],
        *[Charge("table", f"TASK#{i.split('@')[0]}", "update", 1) for i in INSTANCES],
    ]
    found = analyse(ledger_of(charges), INSTANCES, shards=10)
    classes = {r["partition"]: r["class"] for r in found["partitions"]}
    assert classes["LEASE#0"] == "shared"
    assert classes[f"INST#{INSTANCES[0]}"] == "per-instance"
    assert classes["TASK#pb-many-00000"] == "per-task"
    shared = found["classes"]["shared"]
    # the hottest bucket measured: LEASE#0 or #1 with 14 puts (28 WCU) of 40 shards
    assert shared["hottest"]["wcu"] == 28
    assert shared["ceiling_shards_per_s"] == round(1000 * 40 / 28, 1)
    # at scale: the family's 82 WCU spread over its 8 buckets
    assert shared["at_scale"]["family"] == "idx LEASE#<0..7>"
    assert shared["at_scale"]["ceiling_shards_per_s"] == round(1000 * 40 / (82 / 8), 1)
    # one instance's partition bounds that instance: 10 WCU for its 10 shards
    assert found["classes"]["per-instance"]["ceiling_shards_per_s"] == 1000.0


def test_a_constant_key_is_one_partition_of_its_own() -> None:
    charges = [Charge("idx", "OPEN", "update", 4) for _ in INSTANCES]
    found = analyse(ledger_of(charges), INSTANCES, shards=1)
    at_scale = found["classes"]["shared"]["at_scale"]
    assert at_scale["family"] == "idx OPEN"
    assert at_scale["ceiling_instances_per_s"] == 250.0


def reads_of(charges: list[ReadCharge]) -> ReadLedger:
    reads = ReadLedger()
    for c in charges:
        reads.charge("worker", c.operation, [c])
    return reads


def test_reads_have_their_ceilings_at_3000_rcu_per_s_by_class() -> None:
    reads = reads_of(
        [
            *[ReadCharge("idx", f"DUE#{b}", "Query", 0.5) for b in range(4)],
            *[
                ReadCharge("table", f"INST#{i}", "GetItem", 1.0)
                for i in INSTANCES
                for _ in range(10)
            ],
        ]
    )
    found = analyse(Ledger(), INSTANCES, shards=10, reads=reads)
    assert found["rcu"] == 42.0
    per_instance = found["read_classes"]["per-instance"]
    # one instance's 10 shards read its partition 10 times: 3,000 x 10 / 10
    assert per_instance["hottest"]["rcu"] == 10.0
    assert per_instance["ceiling_shards_per_s"] == 3000.0
    shared = found["read_classes"]["shared"]
    assert shared["ceiling_shards_per_s"] == 3000 * 40 / 0.5
    assert shared["at_scale"]["family"] == "idx DUE#<0..3>"


def test_own_keys_take_the_lower_rate_of_writes_and_reads() -> None:
    (instance,) = INSTANCES[:1]
    task = instance.split("@")[0]
    # 100 shards of one instance: its gate takes a write per start, its fence a read per start,
    # its task partition a few writes
    ledger = ledger_of(
        [
            *[Charge("table", f"GATE#instance#{instance}", "update", 1) for _ in range(100)],
            *[Charge("table", f"TASK#{task}", "update", 1) for _ in range(3)],
        ]
    )
    reads = reads_of(
        [ReadCharge("table", f"INST#{instance}", "GetItem", 1.0) for _ in range(100)]
        + [ReadCharge("table", f"GATE#instance#{instance}", "GetItem", 1.0)]
    )
    found = analyse(ledger, [instance], shards=100, reads=reads)
    own = found["own_keys"]
    assert own["WCU"]["partition"] == f"GATE#instance#{instance}"
    assert own["WCU"]["shards_per_s"] == 1000.0
    assert own["RCU"]["partition"] == f"INST#{instance}"
    assert own["RCU"]["shards_per_s"] == 3000.0
    assert own["hottest"]["unit"] == "WCU"
    gate = next(r for r in found["own_partitions"] if r["partition"].startswith("GATE#"))
    assert gate["shards_per_s_at_wcu_limit"] == 1000.0
    assert gate["shards_per_s_at_rcu_limit"] == 300_000.0
    assert gate["binds"] == "WCU"
    assert found["own_partitions"][0] == gate  # the lowest rate first


def test_own_items_bound_an_instance_once_its_partition_is_split_by_heat() -> None:
    (instance,) = INSTANCES[:1]
    # 100 shards: each shard item of the instance's partition takes 3 units (its own), the
    # counter item a unit per ten shards, the fence item a read per start; by partition key
    # they add up, by item none is hot but the fence.
    ledger = Ledger()
    for n in range(100):
        for _ in range(3):
            ledger.charge(
                "worker", f"table:SHARD#{n}", [], [Charge("table", f"INST#{instance}", "update", 1)]
            )
    for _ in range(10):
        ledger.charge(
            "worker", "table:COUNT", [], [Charge("table", f"INST#{instance}", "update", 1)]
        )
    reads = ReadLedger()
    for _ in range(100):
        reads.charge(
            "worker", "GetItem", [ReadCharge("table", f"INST#{instance}", "GetItem", 1.0, "GATE")]
        )
    found = analyse(ledger, [instance], shards=100, reads=reads)
    assert found["own_keys"]["hottest"]["shards_per_s"] == round(1000 * 100 / 310, 1)
    hottest = found["own_item_hottest"]
    assert (hottest["item"], hottest["binds"], hottest["shards_per_s"]) == ("GATE", "RCU", 3000.0)
    counter = next(r for r in found["own_items"] if r["item"] == "table:COUNT")
    assert counter["shards_per_s"] == 10_000.0
    shard = next(r for r in found["own_items"] if r["item"] == "table:SHARD#0")
    assert shard["shards_per_s"] == round(1000 * 100 / 3, 1)
