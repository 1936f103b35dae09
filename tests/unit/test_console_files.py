"""The console ships as package data, and loads nothing from the internet."""

from __future__ import annotations

import re

from iotsched.local.control import console_files


def test_the_console_files_ship_in_the_package() -> None:
    files = console_files()
    pages = {"tasks.js", "forms.js", "instances.js", "alerts.js", "tenants.js", "overview.js"}
    shared = {"index.html", "console.css", "console.js", "common.js", "audit.js", "logs.js"}
    assert pages | shared <= set(files)
    index = files["index.html"].decode()
    assert 'src="console.js"' in index and 'href="console.css"' in index


def test_no_console_file_reaches_outside_its_origin() -> None:
    for name, data in console_files().items():
        text = data.decode()
        # no absolute URL, protocol-relative URL or @import: every asset is a sibling file
        assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", text, re.I), name
        assert "@import" not in text, name


def test_every_module_the_console_imports_ships() -> None:
    files = console_files()
    for name, data in files.items():
        if name.endswith(".js"):
            for target in re.findall(r'from "\./([^"]+)"', data.decode()):
                assert target in files, (name, target)


def test_the_pause_form_takes_as_long_a_note_as_the_api() -> None:
    from iotsched.core.task_record import MAX_NOTE_CHARS

    forms = console_files()["forms.js"].decode()
    assert f"export const MAX_NOTE_CHARS = {MAX_NOTE_CHARS};" in forms
