"""`python -m bench`'s command line (bench/run.py): its options and its usage errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench.run import main

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--quick", "--full"], "--quick and --full are exclusive"),
        (["--merge"], "--merge needs --only"),
        (["--only", "nope"], "Invalid value for '--only'"),
    ],
)
def test_bad_use_is_a_one_line_usage_error(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"Error: {message}" in err and "Traceback" not in err


def test_rewrite_writes_the_markdown_again_from_the_json(tmp_path: Path) -> None:
    shutil.copy(BENCH / "results.json", tmp_path / "results.json")
    with pytest.raises(SystemExit) as exit_info:
        main(["--rewrite", "--out", str(tmp_path)])
    assert exit_info.value.code == 0
    markdown = (tmp_path / "results.md").read_text(encoding="utf-8")
    assert "## Summary" in markdown
