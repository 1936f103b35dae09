"""`iotsched init DIR`: write a project for your own jobs (`iotsched.scaffold`)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import click

from iotsched.cli.output import BadInputError, emit, json_option, out, styled


def _next_steps(directory: Path) -> list[str]:
    return [
        f"cd {shlex.quote(str(directory))}",
        "make install   # this package into the current environment (its entry points)",
        "make test      # its tests, on iotsched's testing kit",
        "make local     # its task on the local runtime: apply tasks.yaml, run it, show it",
        "make deploy    # sam build && sam deploy: the package as a layer, iotsched nested",
    ]


@click.command("init")
@click.argument("directory", type=click.Path(path_type=Path, file_okay=True, dir_okay=True))
@click.option(
    "--package",
    help="The package's import name (default: from DIRECTORY's name, `acme-jobs` -> acme_jobs).",
)
@click.option(
    "--iotsched",
    "checkout",
    type=click.Path(path_type=Path, file_okay=False),
    help="The iotsched checkout the project deploys (default: the one this iotsched runs from).",
)
@click.option("--force", is_flag=True, help="Write into a non-empty DIRECTORY (replacing files).")
@json_option
def init(
    directory: Path, package: str | None, checkout: Path | None, force: bool, as_json: bool
) -> None:
    """Write a project for your own jobs in DIRECTORY: a package with a sample handler (its
    entry point in pyproject.toml), a task file, tests, a Makefile (test, local, deploy) and a
    SAM template that deploys the package with iotsched. DIRECTORY must be new or empty."""
    from iotsched.scaffold import ScaffoldError, plan, write

    try:
        project = plan(directory, package=package, checkout=checkout, force=force)
    except ScaffoldError as exc:
        raise BadInputError(str(exc)) from None
    try:
        files = write(project)
    except OSError as exc:
        raise click.ClickException(f"cannot write the project in {directory}: {exc}") from None
    summary = {
        "directory": str(directory),
        "package": project.package,
        "distribution": project.distribution,
        "handler": project.handler,
        "iotsched_template": project.iotsched_template,
        "requires": project.iotsched_requirement,
        "files": files,
        "next": [step.split("#")[0].strip() for step in _next_steps(directory)],
    }
    emit(summary, as_json, _print_summary)


def _print_summary(summary: dict[str, Any]) -> None:
    out.print(
        styled(f"wrote {summary['directory']}", "bold green"),
        f"(package {summary['package']}, handler {summary['handler']}):",
    )
    for name in summary["files"]:
        out.print(f"  {name}")
    out.print(f"iotsched's template (nested by template.yaml): {summary['iotsched_template']}")
    out.print("next, in the environment that has iotsched:")
    for step in _next_steps(Path(summary["directory"])):
        out.print(f"  {step}")
