"""`python -m bench` still runs against the current code (a smoke run: seconds, not figures).

The benchmarks are not timed tests; this only checks that the request-counting run and the
planning benchmark complete on the emulator, that the results files carry the headline keys, and
that the "Chaos run" sections another tool writes into results.md survive a benchmark run.
Runs in a subprocess: the benchmarks patch moto in their own process (bench/common.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.moto]


def bench(*args: str) -> None:
    """`python -m bench ARGS` in a subprocess; fails the test if it fails."""
    done = subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_quick_bench_writes_results_and_keeps_the_chaos_section(tmp_path: Path) -> None:
    # Both chaos sections (`make chaos`'s and `--default-timeouts`'), between other sections.
    (tmp_path / "results.md").write_text(
        "# Benchmark results\n\nold figures\n\n## Chaos run\n\nchaos figures stay\n\n"
        "## Old section\n\nold text\n\n"
        "## Chaos run at the template's default timeouts\n\nfailover figures stay\n",
        encoding="utf-8",
    )
    bench("--quick", "--only", "planning", "--only", "cost", "--out", str(tmp_path))
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    for key in (
        "requests_per_shard",
        "usd_per_million_shards",
        "usd_per_million_shards_30s",
        "ceiling_shards_per_s",
        "ceiling_instances_per_s",
        "dispatch_ratio_to_floor",
        "throughput_ratio_to_floor",
        "tick_10k_due_seconds",
        "cold_start_ratio_to_floor",
        "plan_peak_mb",
        "peer_apscheduler_ratio",
    ):
        assert key in results
    per_shard = results["requests_per_shard"]
    assert {"dynamodb", "sqs", "lambda"} <= set(per_shard)
    assert per_shard["dynamodb_wru"] > 0
    assert results["usd_per_million_shards"] > 0
    assert results["usd_per_million_shards_30s"] > 0
    # the floor counted over as many messages: fewer requests per shard than the design's
    floor = results["details"]["cost"]["floor"]
    assert floor["shard_executions"] == results["details"]["cost"]["shard_executions"]
    assert 0 < results["request_ratio_to_floor"] < 1
    # a shard five minutes long pays its renewals, holds and polls ten times as long
    assert results["usd_per_million_shards_5min"] > results["usd_per_million_shards_30s"]
    assert "request_ratio_to_floor" in results["measured_at"]
    assert results["requests_per_shard"]["dynamodb_wru"] > per_shard_table(results)
    assert "usd_per_million_shards_30s" in results["measured_at"]
    assert results["details"]["cost"]["instances_succeeded"] == 1
    assert set(results["plan_peak_mb"]) == {"10000", "100000", "1000000"}
    markdown = (tmp_path / "results.md").read_text(encoding="utf-8")
    assert "## Summary" in markdown
    assert "old figures" not in markdown
    assert "old text" not in markdown
    assert markdown.count("## Chaos run\n") == 1
    assert markdown.count("## Chaos run at the template's default timeouts\n") == 1
    assert markdown.rstrip().endswith(
        "## Chaos run\n\nchaos figures stay\n\n"
        "## Chaos run at the template's default timeouts\n\nfailover figures stay"
    )

    # --merge measures one benchmark again and keeps the others' figures, with a note
    bench("--quick", "--only", "planning", "--merge", "--out", str(tmp_path))
    merged = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert merged["details"]["cost"] == results["details"]["cost"]
    assert set(merged["plan_peak_mb"]) == {"10000", "100000", "1000000"}
    assert merged["command"] == results["command"]
    (note,) = merged["notes"]
    assert note.startswith("The planning figures were measured again on their own")


def per_shard_table(results: dict[str, object]) -> float:
    """The cost run's table units per shard (the headline counts the indexes too)."""
    cost = results["details"]["cost"]  # type: ignore[index]
    return float(cost["dynamodb_wru_per_shard_table"])


def test_partition_bench_names_the_binding_partition(tmp_path: Path) -> None:
    bench("--quick", "--only", "partitions", "--out", str(tmp_path))
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert results["ceiling_shards_per_s"] > 0
    assert results["ceiling_instances_per_s"] > 0
    assert results["binding_partition"]["partition"]
    scenarios = results["details"]["partitions"]["scenarios"]
    assert set(scenarios) == {
        "tick",
        "instances_100_shards",
        "heartbeat_30s",
        "report_10_groups",
        "failing",
        "capped_backlog",
        "rollout_fast",
    }
    # every scenario found a partition that every instance writes (the platform's bound)
    assert all("shared" in s["classes"] for s in scenarios.values())
    # a capped tenant's own partition (its slots and line) is counted as its task's
    capped = scenarios["capped_backlog"]["classes"]["per-task"]["hottest"]["partition"]
    assert capped.startswith("TENANT#"), capped
    # reads are charged too: the capped tenant's slot partitions are its task's hottest read
    capped_reads = scenarios["capped_backlog"]["read_classes"]["per-task"]["hottest"]
    assert capped_reads["partition"].startswith("TENANT#"), capped_reads
    # a cap of several slot groups spreads its slots over partitions of their own
    tenant_keys = {
        p["partition"]
        for p in scenarios["capped_backlog"]["own_partitions"]
        if p["partition"].startswith("TENANT#")
    }
    assert len(tenant_keys) > 1, tenant_keys
    # one instance under a rollout: its own partitions' lowest rate, written or read, named
    rollout = scenarios["rollout_fast"]
    assert rollout["statuses"] == {"planning": 1}  # one minute of its sends started
    assert scenarios["capped_backlog"]["statuses"] == {"planning": 1}  # a stretch of it ran
    item = results["details"]["partitions"]["rollout_hottest_item"]
    assert results["details"]["partitions"]["rollout_hottest_item_shards_per_s"] > 0
    assert item["binds"] in ("WCU", "RCU") and item["item"]
    key = results["rollout_hottest_key"]
    assert results["rollout_hottest_key_shards_per_s"] == key["shards_per_s"] > 0
    assert key["unit"] in ("WCU", "RCU")
    assert rollout["own_partitions"][0]["partition"] == key["partition"]
    assert results["details"]["partitions"]["capped_backlog_hottest_key_shards_per_s"] > 0
    assert results["capped_backlog_hold_ms"] > 0
    markdown = (tmp_path / "results.md").read_text(encoding="utf-8")
    section = markdown.split("## Write units by partition", 1)[1].split("\n## ", 1)[0]
    assert section.rstrip().splitlines()[-1].startswith("**Binding partition:**")


def test_tick_profile_splits_a_batched_tick_by_request_and_action() -> None:
    """`python -m bench.tick_profile` (bench/results.md cites it) still runs and names its parts."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.tick_profile", "12"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("tick of 12 due tasks (12 claimed, batched)")
    rows = {line[:46].rstrip(): line[46:].split() for line in lines[2:]}
    # 12 due tasks: one page, one transaction each for the claims, the marks and the advances.
    assert rows["TransactWriteItems"][0] == "3"
    # each claim puts the instance and its counter item (in the claim's transaction)
    assert rows["  backend PutItem (claim)"][0] == "24"
    assert rows["  backend UpdateItem (running mark)"][0] == "12"
    assert rows["  backend UpdateItem (clock advance)"][0] == "12"
    assert "SendMessageBatch" in rows
