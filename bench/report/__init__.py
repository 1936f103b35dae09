"""bench/results.json and bench/results.md from one run's figures.

One module per part of the report: `files` (reading and writing the results), `headline`
(results.json's headline keys), `markdown` (the page and its summary), and one per section.
"""

from __future__ import annotations

from bench.report.cost import ITEM_KINDS
from bench.report.files import CHAOS_HEADING, chaos_section, load, rewrite, write
from bench.report.headline import measured_at, results_json
from bench.report.markdown import FULL_STEM, full_run_section, markdown

__all__ = [
    "CHAOS_HEADING",
    "FULL_STEM",
    "ITEM_KINDS",
    "chaos_section",
    "full_run_section",
    "load",
    "markdown",
    "measured_at",
    "results_json",
    "rewrite",
    "write",
]
