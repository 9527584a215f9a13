"""What every command shares on a terminal: exit codes, a progress line, aligned columns, where a YAML error is."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TextIO

import yaml

#: The exit codes of every gpugate command: it worked and found nothing to object to; it worked and found
#: something (a denied object, a finding, an invalid policy); it could not do its work (bad flags or input).
EXIT_OK, EXIT_FOUND, EXIT_BAD_INPUT = 0, 1, 2


class Progress:
    """One self-overwriting line on a terminal, at most five times a second; silent otherwise (cron, CI, pipes)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.enabled = stream.isatty()
        self.last = 0.0

    def show(self, text: str, *, force: bool = False) -> None:
        now = time.monotonic()
        if self.enabled and (force or now - self.last > 0.2):
            self.last = now
            self.stream.write(f"\r\033[K{text}")
            self.stream.flush()

    def clear(self) -> None:
        if self.enabled:
            self.stream.write("\r\033[K")
            self.stream.flush()


def columns(rows: Sequence[Sequence[str]], *, right: Sequence[int] = ()) -> list[str]:
    """Rows as lines of aligned columns two spaces apart; the columns in ``right`` (numbers) flush right."""
    widths = [max(len(cell) for cell in column) for column in zip(*rows, strict=True)] if rows else []
    return [
        "  ".join(
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def yaml_error(err: yaml.YAMLError) -> str:
    """Where a YAML error is, as a person reads the file. PyYAML marks where it noticed the problem, which
    is often the line after the mistake (an unclosed bracket is noticed at the next key); say both."""
    problem = getattr(err, "problem", None) or str(err)
    mark = getattr(err, "problem_mark", None)
    context = getattr(err, "context_mark", None)
    if mark is None:
        return f"is not valid YAML: {problem}"
    where = f"line {mark.line + 1}, column {mark.column + 1}"
    if context is not None and context.line != mark.line:
        where = f"line {context.line + 1} to {mark.line + 1}"
        problem = f"{getattr(err, 'context', '') or 'in this block'}: {problem}"
    elif mark.column == 0 and mark.line > 0:
        where = f"line {mark.line} or {mark.line + 1}"
    return f"is not valid YAML ({where}): {problem}"
