"""webhook.terminal: the helpers every command prints through."""

from __future__ import annotations

import io

import pytest
import yaml

from webhook.terminal import Progress, columns, yaml_error


def test_columns_align_and_numbers_flush_right() -> None:
    rows = [["team", "GPUs"], ["vision", "8"], ["nlp", "12"]]
    assert columns(rows) == ["team    GPUs", "vision  8", "nlp     12"]
    assert columns(rows, right=[1]) == ["team    GPUs", "vision     8", "nlp       12"]
    assert columns([]) == []


def test_progress_is_silent_off_a_terminal() -> None:
    stream = io.StringIO()
    progress = Progress(stream)
    progress.show("listing", force=True)
    progress.clear()
    assert stream.getvalue() == ""


def test_a_yaml_error_says_where_as_a_person_reads_the_file() -> None:
    with pytest.raises(yaml.YAMLError) as err:
        yaml.safe_load("spec:\n  devices: [nvidia\nmetadata: {}\n")
    text = yaml_error(err.value)
    assert text.startswith("is not valid YAML (line 2 to 3):") and "expected ',' or ']'" in text
