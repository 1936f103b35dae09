"""The results files: write results.json and results.md, read a run back, keep the chaos sections.

The "Chaos run" sections of results.md belong to the chaos run (`make chaos` and its
`--default-timeouts` run): they are carried over as they are, after this run's sections.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.report.headline import results_json
from bench.report.markdown import FULL_STEM, full_run_section, markdown

CHAOS_HEADING = "## Chaos run"


def chaos_section(text: str) -> str:
    """Every chaos section of an existing results.md ('' if none), in their order.

    `make chaos` writes "Chaos run" and `--default-timeouts` its own "Chaos run at ..." section:
    any level-2 heading that starts with "Chaos run" is theirs.
    """
    sections: list[str] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("## "):
            if current is not None:
                sections.append("\n".join(current).rstrip("\n") + "\n")
            current = [line] if line.startswith(CHAOS_HEADING) else None
        elif current is not None:
            current.append(line)
    if current is not None:
        sections.append("\n".join(current).rstrip("\n") + "\n")
    return "\n".join(sections)


def load(json_path: Path) -> dict[str, Any]:
    """A run's results as `write` takes them, from its results JSON."""
    saved = json.loads(json_path.read_text(encoding="utf-8"))
    return {
        "profile": saved["profile"],
        "command": saved["command"],
        "machine": saved["machine"],
        "seconds": saved["seconds"],
        "errors": saved["errors"],
        "notes": saved.get("notes", []),
        "figures": saved["details"],
    }


def rewrite(directory: Path, stem: str = "results") -> tuple[Path, Path]:
    """Write the markdown again from the JSON (after a change to this module's text)."""
    return write(load(directory / f"{stem}.json"), directory, stem=stem)


def write(results: dict[str, Any], directory: Path, stem: str = "results") -> tuple[Path, Path]:
    """Write `stem`.json and `stem`.md into `directory`; returns their paths.

    The default run's markdown also summarises the full-size run (results-full.json) when
    one lies beside it, and keeps the "Chaos run" sections of the file it replaces.
    """
    directory.mkdir(parents=True, exist_ok=True)
    json_path = directory / f"{stem}.json"
    md_path = directory / f"{stem}.md"
    json_path.write_text(json.dumps(results_json(results), indent=2) + "\n", encoding="utf-8")
    previous = md_path.read_text(encoding="utf-8") if md_path.exists() else ""
    text = markdown(results)
    full = directory / f"{FULL_STEM}.json"
    if stem != FULL_STEM and results["profile"] != "full" and full.exists():
        text = text.rstrip("\n") + "\n\n" + full_run_section(load(full))
    chaos = chaos_section(previous)
    if chaos:
        text = text.rstrip("\n") + "\n\n" + chaos
    md_path.write_text(text, encoding="utf-8")
    return json_path, md_path
