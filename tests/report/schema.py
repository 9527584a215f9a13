"""Every ``gpugate report -o json`` document the tests see is checked against the published JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "webhook/report/report.schema.json"
_VALIDATOR = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))


def checked(text: str) -> dict[str, Any]:
    """The parsed document, after the schema passed it (the error names the path that failed)."""
    document = json.loads(text)
    errors = sorted(_VALIDATOR.iter_errors(document), key=lambda e: list(e.absolute_path))
    assert not errors, "; ".join(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors[:5])
    return dict(document)
