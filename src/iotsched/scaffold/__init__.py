"""`iotsched init DIR`: a project for a team's own jobs, written from the files in `project/`.

The project is a Python package whose handlers iotsched finds through its entry points (group
`iotsched.handlers`), with a task file, tests on the testing kit, a Makefile (`make test`,
`make local`, `make deploy`) and a SAM template that deploys the package as a layer with the
iotsched stack nested in it (docs/deploy-your-jobs.md).

The files are templates with `{{name}}` placeholders (see `Project.values`); a path segment
`__package__` becomes the package's name and `.tmpl` is dropped (so that no tool takes the
templates for the package's own code). Everything is checked before anything is written.
"""

from __future__ import annotations

import keyword
import os
import re
import sys
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import iotsched

#: Where the templates are (package data).
TEMPLATES = resources.files(__name__) / "project"
#: A package name the project may take: a lower-case identifier.
_PACKAGE = re.compile(r"[a-z][a-z0-9_]*")
#: Names a project's package must not take: it would hide iotsched or the tests' package.
_TAKEN = frozenset({"iotsched", "tests", "test", "functions", "bench"})


class ScaffoldError(ValueError):
    """The project cannot be written as asked (a name, a directory, no iotsched checkout)."""


@dataclass(frozen=True)
class Project:
    """A project to write: where, its names, and where iotsched's template is from it."""

    directory: Path
    package: str
    distribution: str
    iotsched_template: str  # relative to `directory`, as template.yaml's Location gives it
    iotsched_requirement: str = field(default_factory=lambda: requirement(iotsched.__version__))

    @property
    def handler(self) -> str:
        """The sample handler's name (its entry point, the task file's `handler:`)."""
        return f"{self.package}.hello"

    def values(self) -> dict[str, str]:
        """What each `{{name}}` of the templates becomes."""
        return {
            "package": self.package,
            "distribution": self.distribution,
            "env_prefix": self.package.upper(),
            "iotsched_template": self.iotsched_template,
            "iotsched_requirement": self.iotsched_requirement,
        }


def requirement(version: str) -> str:
    """The project's requirement on this iotsched: this minor version up to the next (before
    1.0 a minor version may change the handler API), from 1.0 on up to the next major."""
    major, minor = (int(part) for part in version.split(".")[:2])
    upper = f"{major}.{minor + 1}" if major == 0 else f"{major + 1}"
    return f"iotsched>={major}.{minor},<{upper}"


def package_name(directory: Path, given: str | None = None) -> str:
    """The package's import name: `given`, else the directory's name made one (`acme-jobs`
    gives `acme_jobs`). Raises ScaffoldError for a name that cannot be a package."""
    if given is not None:
        name, source = given, f"--package {given!r}"
    else:
        base = directory.resolve().name
        name = re.sub(r"[^a-z0-9]+", "_", base.lower()).strip("_")
        source = f"the directory's name {base!r}"
    if not _PACKAGE.fullmatch(name) or keyword.iskeyword(name):
        raise ScaffoldError(
            f"{source} does not make a package name (a lower-case letter, then letters, "
            "digits or _): pass --package NAME"
        )
    if name in _TAKEN or name in sys.stdlib_module_names:
        raise ScaffoldError(
            f"{source} gives the package {name!r}, which would hide "
            f"{'a module of the standard library' if name in sys.stdlib_module_names else 'one of iotsched'}"
            ": pass --package NAME"
        )
    return name


def find_checkout(given: Path | None = None) -> Path:
    """The iotsched checkout whose template.yaml the project deploys: `given`, else the one
    this iotsched runs from (an editable install of a clone). Raises ScaffoldError if neither
    is one."""
    if given is not None:
        checkout = given.resolve()
        if not is_iotsched_template(checkout / "template.yaml"):
            raise ScaffoldError(
                f"--iotsched {given}: no iotsched checkout there (its template.yaml, with "
                "the scheduler's functions, deploys iotsched)"
            )
        return checkout
    checkout = Path(iotsched.__file__).resolve().parents[2]
    if not is_iotsched_template(checkout / "template.yaml"):
        raise ScaffoldError(
            "this iotsched is not run from a checkout, so its template.yaml is not at hand: "
            "pass --iotsched PATH, an iotsched checkout (the project's template nests its "
            "template.yaml)"
        )
    return checkout


def is_iotsched_template(path: Path) -> bool:
    """Whether `path` is iotsched's template.yaml (it holds the scheduler's resources)."""
    from iotsched.local.template import iotsched_template  # YAML: read only by `init`

    return path.is_file() and iotsched_template(path) == path


def plan(
    directory: Path,
    *,
    package: str | None = None,
    checkout: Path | None = None,
    force: bool = False,
) -> Project:
    """The project to write in `directory`, every input checked; nothing is written.

    Raises ScaffoldError: `directory` is a file, or not empty without `force`; a bad package
    name; no iotsched checkout.
    """
    if directory.exists() and not directory.is_dir():
        raise ScaffoldError(f"{directory} is a file, not a directory")
    if directory.is_dir() and not force:
        entries = sorted(p.name for p in directory.iterdir())
        if entries:
            shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
            raise ScaffoldError(
                f"{directory} is not empty ({shown}): choose a new directory, or pass --force "
                "to write the project's files into it (replacing files of the same names)"
            )
    name = package_name(directory, package)
    template = find_checkout(checkout) / "template.yaml"
    return Project(
        directory=directory,
        package=name,
        distribution=name.replace("_", "-"),
        iotsched_template=os.path.relpath(template, directory.resolve()),
    )


def render(project: Project) -> dict[str, str]:
    """Each file of the project (its path relative to the directory, POSIX) and its text."""
    values = project.values()

    def fill(text: str) -> str:
        return re.sub(r"\{\{(\w+)\}\}", lambda m: values[m.group(1)], text)

    files: dict[str, str] = {}
    for relative, template in _templates(TEMPLATES, ""):
        parts = [project.package if p == "__package__" else p for p in relative.split("/")]
        name = parts[-1].removesuffix(".tmpl")
        parts[-1] = "." + name if name == "gitignore" else name
        files["/".join(parts)] = fill(template.read_text(encoding="utf-8"))
    return dict(sorted(files.items()))


def _templates(folder: Traversable, prefix: str) -> list[tuple[str, Traversable]]:
    found: list[tuple[str, Traversable]] = []
    for entry in folder.iterdir():
        relative = f"{prefix}{entry.name}"
        if entry.is_dir():
            found += _templates(entry, relative + "/")
        elif entry.name.endswith(".tmpl"):
            found.append((relative, entry))
    return found


def write(project: Project) -> list[str]:
    """Write the project's files (replacing any of the same names); returns their paths
    relative to the directory. Raises OSError where one cannot be written."""
    files = render(project)
    for relative, text in files.items():
        path = project.directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return list(files)
