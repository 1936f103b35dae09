"""The README and the guides link to files that exist, and to headings those files have: a
section moved from one page to another leaves no dangling link."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "infra" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE = re.compile(r"^ *```.*?^ *```", re.M | re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def prose(page: Path) -> str:
    return CODE.sub("", page.read_text(encoding="utf-8"))


def anchors(page: Path) -> set[str]:
    return {slug(h) for h in re.findall(r"^#+ (.*)$", prose(page), re.M)}


def test_every_relative_link_reaches_a_file_and_heading() -> None:
    dangling = []
    for page in PAGES:
        for target in LINK.findall(prose(page)):
            if re.match(r"[a-z]+:", target):
                continue  # an absolute URL (the local console's): not a file of this tree
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT)}: {target}"
            if not dest.exists():
                dangling.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                dangling.append(f"{where}: no such heading")
    assert dangling == []


def test_slugs_follow_github() -> None:
    assert slug("A firing's way") == "a-firings-way"
    assert slug("Fan-in: reduce, dependencies, reruns") == "fan-in-reduce-dependencies-reruns"
