"""``gpugate report -o html``: one self-contained file, screenshotted in headless Chromium (Debian's package)."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import RunningPrometheus, missing_tool
from .test_report import END_ISO, gpugate

WIDTH, HEIGHT = 1280, 1500
IDLE, BUSY, UNKNOWN = (0xD5, 0x5E, 0x00), (0x00, 0x72, 0xB2), (0xBB, 0xBB, 0xBB)
# Where a screenshot is kept for people to look at: SCREENSHOT_DIR=/some/dir pytest tests/report/test_html.py
KEEP = os.environ.get("SCREENSHOT_DIR")


def find_chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        missing_tool(
            "CHROMIUM NOT FOUND: the HTML report's screenshot test is NOT running. Run scripts/install-tools "
            "(it installs Debian's 'chromium' package) or put chromium on PATH."
        )
    return str(found)


def read_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and RGB rows of an 8-bit RGB or RGBA PNG (what Chromium writes); zlib is all it takes."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    offset, idat, header = 8, b"", b""
    while offset < len(data):
        (length,), kind = struct.unpack(">I", data[offset : offset + 4]), data[offset + 4 : offset + 8]
        body = data[offset + 8 : offset + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        offset += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour in (2, 6), (depth, colour)
    channels = 3 if colour == 2 else 4
    stride = width * channels
    raw = zlib.decompress(idat)
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - channels] if x >= channels else 0
            up = previous[x]
            upper_left = previous[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + left) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + up) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - upper_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - upper_left)
                line[x] = (line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc else upper_left)) & 0xFF
        previous = line
        rows.append(bytes(v for i, v in enumerate(line) if channels == 3 or i % 4 != 3))
    return width, height, rows


def rows_with(rows: list[bytes], colour: tuple[int, int, int]) -> list[int]:
    needle = bytes(colour)
    return [y for y, row in enumerate(rows) if any(row[x : x + 3] == needle for x in range(0, len(row), 3))]


@pytest.fixture(scope="module")
def page(prometheus: RunningPrometheus, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    chromium = find_chromium()
    directory = Path(KEEP) if KEEP else tmp_path_factory.mktemp("report-html")
    html = directory / "report.html"
    result = gpugate(
        "report",
        "--prometheus",
        prometheus.url,
        "--end",
        END_ISO,
        "-o",
        "html",
        "--out",
        str(html),
        "--prices",
        str(Path(__file__).with_name("prices.yaml")),
    )
    assert result.returncode == 0, result.stderr
    png = directory / "report.png"
    shot = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--window-size={WIDTH},{HEIGHT}",
            f"--screenshot={png}",
            html.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert shot.returncode == 0 and png.exists(), shot.stderr[-2000:]
    yield html, png


def test_the_page_is_self_contained(page: tuple[Path, Path]) -> None:
    text = page[0].read_text()
    assert "<script" not in text.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), "a resource from the network"
    assert not re.search(r"@import|url\(", text)
    for chart in ("idle-by-group", "utilisation-over-time", "top-offenders"):
        assert f'<svg id="{chart}"' in text


def test_the_screenshot_shows_the_charts(page: tuple[Path, Path]) -> None:
    width, height, rows = read_png(page[1].read_bytes())
    assert (width, height) == (WIDTH, HEIGHT)
    # Not blank: plenty of rows hold something other than the white background.
    white = bytes((255, 255, 255)) * width
    assert sum(row != white for row in rows) > height // 3
    # The idle colour marks three separate regions, top to bottom: the bars by team, the dashed threshold in
    # the utilisation chart, and the top offenders.
    idle = rows_with(rows, IDLE)
    regions = [y for i, y in enumerate(idle) if i == 0 or y - idle[i - 1] > 40]
    assert len(regions) >= 3, regions
    # Busy and no-telemetry segments in the bars; busy lies in the first region, beside the idle bars.
    busy = rows_with(rows, BUSY)
    assert busy and regions[0] <= busy[0] < regions[1]
    assert rows_with(rows, UNKNOWN)
    # The utilisation chart draws lines between the bars and the offenders (the vision line is BUSY's blue).
    assert any(regions[1] - 200 < y < regions[2] for y in busy)
