"""Every part of the DynamoDB store (a module of `iotsched.adapters.dynamodb`) has contract
tests that exercise it: `PARTS` names them, `BESIDE` the tests of the package's other modules,
and this checks the maps against the package.

A part that holds a mixin of `DynamoDBStore` (or the alert log) is exercised by its files when
they call its port methods: each public method the part defines is called in one of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import iotsched.adapters.dynamodb as package

HERE = Path(__file__).parent
PACKAGE = Path(package.__file__).parent

#: The contract (and unit) test files of each part of the store.
PARTS: dict[str, tuple[str, ...]] = {
    "keys": ("test_sharded_keys.py", "test_due_buckets.py", "test_owing_index.py"),
    "codec": ("test_store.py", "test_oversized_task.py"),
    "transactions": ("test_cancellations.py", "test_single_writes.py", "test_adversary.py"),
    "partition_reads": ("test_sharded_keys.py", "test_alert_log.py"),
    "base": ("test_single_writes.py", "test_cancellations.py", "test_throttling.py"),
    "tasks": (
        "test_store.py",
        "test_delete_task.py",
        "test_batch_writes.py",
        "test_audit_store.py",
        "test_tenant_tasks.py",
    ),
    "task_clock": ("test_store.py", "test_pause.py", "test_due_buckets.py", "test_batch_writes.py"),
    "calendars": ("test_calendars.py",),
    "tenants": ("test_tenant_tasks.py",),
    "audit": ("test_audit_store.py",),
    "instances": ("test_store.py", "test_submissions.py", "test_retention.py"),
    "followups": ("test_owing_index.py", "test_store.py", "test_durable_followups.py"),
    "counter": ("test_counter.py", "test_reduce.py", "test_store.py"),
    "claims": (
        "test_claim_concurrency.py",
        "test_batch_writes.py",
        "test_big_send.py",
        "test_tenant_tasks.py",
    ),
    "blocking": ("test_blocking_store.py",),
    "ticks": ("test_due_buckets.py",),
    "shards": ("test_lease_index.py", "test_store.py", "test_release_repair.py"),
    "completions": ("test_attempt_outcomes.py", "test_dead_letter.py", "test_counter.py"),
    "effects": ("test_effects.py",),
    "gates": ("test_start_gates.py",),
    "slots": ("test_tenant_slots.py",),
    "alerts": ("test_alert_log.py", "test_alert_at_least_once.py", "test_sharded_keys.py"),
    "alertstate": ("test_alert_state.py",),
}
#: Modules of the package beside the store's parts (no mixin of `DynamoDBStore`): the batch
#: and transaction-outcome helpers every part shares, and the devices table's directory. Their
#: test files, relative to tests/, exist.
BESIDE: dict[str, tuple[str, ...]] = {
    "batches": ("unit/test_dynamodb_batches.py", "unit/test_batches.py"),
    "transact_outcomes": ("unit/test_transact.py", "contract/test_adversary.py"),
    "devices": ("contract/test_device_directory.py", "iot/test_device_table.py"),
}
#: Methods a part's files exercise through another object's call: the alert log's writes
#: are made by `DedupAlertSink.publish`, which its files call.
THROUGH: dict[str, dict[str, str]] = {"alerts": {"record": "publish", "published": "publish"}}


def public_methods(module: str) -> set[str]:
    """The public methods of the classes `module` defines."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    return {
        f.name
        for c in tree.body
        if isinstance(c, ast.ClassDef)
        for f in c.body
        if isinstance(f, ast.FunctionDef) and not f.name.startswith("_")
    }


def test_every_part_of_the_store_is_mapped() -> None:
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert modules == set(PARTS) | set(BESIDE)
    assert not set(PARTS) & set(BESIDE)


@pytest.mark.parametrize("module", sorted(BESIDE))
def test_a_module_beside_the_store_has_its_tests(module: str) -> None:
    assert all((HERE.parent / f).is_file() for f in BESIDE[module]), BESIDE[module]


@pytest.mark.parametrize("part", sorted(PARTS))
def test_a_part_is_exercised_by_its_contract_tests(part: str) -> None:
    files = PARTS[part]
    assert all((HERE / f).is_file() for f in files), files
    text = "".join((HERE / f).read_text() for f in files)
    through = THROUGH.get(part, {})
    uncalled = {m for m in public_methods(part) if f".{through.get(m, m)}(" not in text}
    assert not uncalled, f"{part}: no contract test calls {sorted(uncalled)}"
