"""Write-sharded index partitions: stable, spread, and readable after a raise."""

from __future__ import annotations

import pytest

from iotsched.core.buckets import bucket_of, partition, partitions
from iotsched.settings import Settings, SettingsError

ENV = {
    "IOTSCHED_TABLE": "t",
    "IOTSCHED_SHARD_QUEUE_URL": "http://q",
    "IOTSCHED_ALERT_TOPIC_ARN": "arn:aws:sns:us-east-1:1:a",
}


def test_a_key_has_one_bucket_whatever_the_process() -> None:
    # crc32, not hash(): Python salts str hashes per process.
    assert bucket_of("daily-report@2026-12-01T00:05", 32) == 27
    assert partition("OPEN", "daily-report@2026-12-01T00:05", 32) == "OPEN#27"


def test_keys_spread_over_every_bucket() -> None:
    counts = [0] * 32
    for n in range(32_000):
        counts[bucket_of(f"tenant-{n}-report@2026-12-01T00:05", 32)] += 1
    assert min(counts) > 800 and max(counts) < 1200  # about 1,000 each


def test_raising_the_count_keeps_every_written_bucket_read() -> None:
    written = {partition("LEASE", f"i@{n}#000001", 8) for n in range(500)}
    assert written <= set(partitions("LEASE", 16))


def test_the_setting_is_read_and_checked() -> None:
    assert Settings.from_env(ENV).index_buckets == 32
    assert Settings.from_env({**ENV, "IOTSCHED_INDEX_BUCKETS": "64"}).index_buckets == 64
    for bad in ("0", "513", "many"):
        with pytest.raises(SettingsError, match="IOTSCHED_INDEX_BUCKETS"):
            Settings.from_env({**ENV, "IOTSCHED_INDEX_BUCKETS": bad})
