"""The repository stands on its own: no tracked file refers to a file outside it or to a path of
one machine, and every citation of docs/sources.md names a section that exists there.

The forbidden strings are assembled from pieces, so this file is checked like every other."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = [
    "../" + "shared",  # the development setup's folder beside the checkout
    "hardware" + "-facts",  # its notes on the chips, now docs/sources.md
    "DESIGN" + ".md",  # its design notes, now docs/design.md
    "/" + "work/",  # absolute paths of a development machine
    "/" + "home/",
]
SOURCES = ROOT / "docs" / "sources.md"
CITATION = re.compile(r"sources\.md#([a-z0-9-]+)")


def tracked_files():
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: no list of tracked files")
    return [ROOT / name for name in out.decode().split("\0") if name]


def text_of(path):
    try:
        return path.read_bytes().decode("utf-8")
    except (UnicodeDecodeError, FileNotFoundError):  # a binary file (a plot), or one deleted but not yet committed
        return ""


def slug(heading):
    """GitHub's anchor of a markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^a-z0-9 -]", "", heading.strip().lower()).replace(" ", "-")


def test_no_file_refers_outside_the_repository():
    found = []
    for path in tracked_files():
        for number, line in enumerate(text_of(path).splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{number}: {word}" for word in FORBIDDEN if word in line]
    assert found == []


def test_every_citation_of_sources_names_a_section():
    anchors = {slug(line.lstrip("#")) for line in SOURCES.read_text().splitlines() if line.startswith("#")}
    assert {"confidence-tags", "bm1684", "op-set-documents", "known-slips"} <= anchors
    cited = {}
    for path in tracked_files():
        for anchor in CITATION.findall(text_of(path)):
            cited.setdefault(anchor, str(path.relative_to(ROOT)))
    assert len(cited) >= 10
    assert {a: where for a, where in cited.items() if a not in anchors} == {}


def test_the_slug_is_githubs():
    assert slug(" Ascend 310 and 910") == "ascend-310-and-910"
    assert slug("Peaks: the chips against the published figures") == "peaks-the-chips-against-the-published-figures"
