"""`iotsched init DIR`: the names it derives, the files it writes, what it refuses (exit 2,
nothing written), and the local runtime finding iotsched's template from such a project.

That the project works (its `make test`, its task on the local runtime, its template linted)
is tested in tests/integration/test_scaffold_project.py and tests/infra/test_scaffold_template.py.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from iotsched.cli.main import cli
from iotsched.local.template import TemplateNotFound, find_template, load
from iotsched.scaffold import Project, ScaffoldError, package_name, plan, render, requirement

ROOT = Path(__file__).resolve().parents[2]


def init(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["init", *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize(
    ("directory", "package"),
    [("jobs", "jobs"), ("acme-jobs", "acme_jobs"), ("Acme Jobs 2", "acme_jobs_2")],
)
def test_the_package_is_named_after_the_directory(
    tmp_path: Path, directory: str, package: str
) -> None:
    assert package_name(tmp_path / directory) == package


@pytest.mark.parametrize(
    ("directory", "given", "says"),
    [
        ("2026", None, "does not make a package name"),
        ("jobs", "Acme", "does not make a package name"),
        ("jobs", "class", "does not make a package name"),
        ("json", None, "a module of the standard library"),
        ("jobs", "iotsched", "one of iotsched"),
        ("tests", None, "one of iotsched"),
    ],
)
def test_a_name_that_cannot_be_the_package_is_refused(
    tmp_path: Path, directory: str, given: str | None, says: str
) -> None:
    with pytest.raises(ScaffoldError, match=says):
        package_name(tmp_path / directory, given)


def test_the_requirement_stops_before_the_next_api() -> None:
    assert requirement("0.1.0") == "iotsched>=0.1,<0.2"
    assert requirement("1.4.2") == "iotsched>=1.4,<2"


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return plan(tmp_path / "acme-jobs")


def test_every_placeholder_is_filled(project: Project) -> None:
    files = render(project)
    assert set(files) == {
        ".gitignore",
        "Makefile",
        "README.md",
        "pyproject.toml",
        "samconfig.toml",
        "src/acme_jobs/__init__.py",
        "src/acme_jobs/handlers.py",
        "tasks.yaml",
        "template.yaml",
        "tests/test_handlers.py",
        "tests/test_tasks.py",
    }
    for name, text in files.items():
        assert "{{" not in text and "}}" not in text, name


def test_the_handler_has_one_name_everywhere(project: Project) -> None:
    """The entry point, the decorator and the task file name the same handler: a name that
    differs between them would be refused when the task is applied."""
    files = render(project)
    pyproject = tomllib.loads(files["pyproject.toml"])
    assert pyproject["project"]["name"] == "acme-jobs"
    assert pyproject["project"]["dependencies"][0] == project.iotsched_requirement
    entry_points = pyproject["project"]["entry-points"]["iotsched.handlers"]
    assert entry_points == {"acme_jobs.hello": "acme_jobs.handlers:hello"}
    assert '@handler("acme_jobs.hello", params=HelloParams)' in files["src/acme_jobs/handlers.py"]
    (task,) = yaml.safe_load(files["tasks.yaml"])["tasks"]
    assert task["handler"] == project.handler == "acme_jobs.hello"
    assert "ACME_JOBS_GREETING" in files["src/acme_jobs/handlers.py"]
    assert "ACME_JOBS_GREETING" in files["template.yaml"]


def test_the_code_stays_within_its_line_length_whatever_the_package_name(tmp_path: Path) -> None:
    long = plan(tmp_path / "jobs", package="acme_industrial_iot_platform_jobs")
    for name, text in render(long).items():
        if name.endswith(".py"):
            for n, line in enumerate(text.splitlines(), 1):
                assert len(line) <= 100, f"{name}:{n}"


def test_the_makefile_recipes_are_tab_indented(project: Project) -> None:
    makefile = render(project)["Makefile"]
    for target in ("install", "test", "local", "build", "deploy", "build-HandlersLayer"):
        match = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", makefile, re.M)
        assert match, f"{target}: no recipe"


def test_the_template_nests_the_checkouts_template_by_a_relative_path(project: Project) -> None:
    project.directory.mkdir()
    (project.directory / "template.yaml").write_text(render(project)["template.yaml"])
    template = load(project.directory / "template.yaml")
    location = template["Resources"]["Iotsched"]["Properties"]["Location"]
    assert not Path(location).is_absolute()
    assert (project.directory.resolve() / location).resolve() == ROOT / "template.yaml"
    parameters = template["Resources"]["Iotsched"]["Properties"]["Parameters"]
    assert parameters["HandlerLayerArns"] == {"Ref": "HandlersLayer"}
    assert parameters["HandlerPolicyArns"] == {"Ref": "HandlersPolicy"}
    assert json.loads(parameters["HandlerEnvironment"]) == {"ACME_JOBS_GREETING": "Hello"}


def test_init_writes_the_project_and_says_what_next(tmp_path: Path) -> None:
    target = tmp_path / "jobs"
    code, stdout, stderr = init(str(target))
    assert code == 0, stderr
    assert (target / "src" / "jobs" / "handlers.py").is_file()
    assert (target / ".gitignore").is_file()
    assert "handler jobs.hello" in stdout
    assert "make local" in stdout and f"cd {target}" in stdout


def test_init_json_lists_the_files_and_the_next_commands(tmp_path: Path) -> None:
    target = tmp_path / "jobs"
    code, stdout, stderr = init(str(target), "--package", "acme_jobs", "--json")
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert summary["package"] == "acme_jobs" and summary["distribution"] == "acme-jobs"
    assert summary["handler"] == "acme_jobs.hello"
    assert sorted(summary["files"]) == sorted(
        str(p.relative_to(target)) for p in target.rglob("*") if p.is_file()
    )
    assert summary["next"] == [
        f"cd {target}",
        "make install",
        "make test",
        "make local",
        "make deploy",
    ]


def test_a_directory_that_is_not_empty_is_refused_unless_forced(tmp_path: Path) -> None:
    target = tmp_path / "jobs"
    target.mkdir()
    (target / "notes.txt").write_text("mine\n")
    code, stdout, stderr = init(str(target))
    assert code == 2 and stdout == ""
    assert stderr.count("\n") == 1 and "is not empty (notes.txt)" in stderr and "--force" in stderr
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt"]
    code, _, stderr = init(str(target), "--force")
    assert code == 0, stderr
    assert (target / "notes.txt").read_text() == "mine\n"
    assert (target / "pyproject.toml").is_file()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--package", "Jobs"], "--package 'Jobs' does not make a package name"),
        (["--iotsched", "{tmp}"], "no iotsched checkout there"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_with_nothing_written(
    tmp_path: Path, args: list[str], says: str
) -> None:
    target = tmp_path / "jobs"
    code, stdout, stderr = init(str(target), *(a.format(tmp=tmp_path) for a in args))
    assert code == 2 and stdout == ""
    assert stderr.count("\n") == 1 and says in stderr, stderr
    assert not target.exists()


def test_a_file_is_not_a_directory(tmp_path: Path) -> None:
    target = tmp_path / "jobs"
    target.write_text("")
    code, _, stderr = init(str(target))
    assert code == 2 and "is a file, not a directory" in stderr


def test_local_up_in_a_project_runs_the_iotsched_template_it_nests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "jobs"
    assert init(str(target))[0] == 0
    monkeypatch.chdir(target / "src")
    assert find_template(None) == ROOT / "template.yaml"
    assert find_template(target / "template.yaml") == ROOT / "template.yaml"
    assert find_template(ROOT / "template.yaml") == ROOT / "template.yaml"


def test_a_template_that_is_not_iotsched_and_nests_none_is_named(tmp_path: Path) -> None:
    other = tmp_path / "template.yaml"
    other.write_text("Resources:\n  Bucket:\n    Type: AWS::S3::Bucket\n")
    with pytest.raises(TemplateNotFound, match="is not iotsched's template and nests none"):
        find_template(other)
