"""The code blocks of README.md and docs/*.md marked runnable run as written.

The convention (docs/index.md, "Runnable blocks"): a line `<!-- run -->` right before a fenced
block. A ```python block is executed with exec in a fresh namespace; any other block holds
`npusim` commands, one a line (a trailing backslash continues a line, `#` starts a comment), each
run through the CLI's main() and expected to exit with status 0. Every block runs in its own
temporary folder, with `examples/` and `bench/` of the repository linked into it, so relative
paths read as in a checkout and what a block writes is thrown away.

A fenced block right after a line `<!-- output -->` shows what the last runnable block before it
prints: each of its non-blank lines is a line of that output, in order (a shown summary may leave
lines out), so the figures a page shows are the figures a run prints."""

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from sim import cli

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = "<!-- run -->"
OUTPUT = "<!-- output -->"
FENCE = re.compile(r"^(`{3,})(\w*)")
README_LINES = 160  # the "at most about 150"


def runnable_blocks(path):
    """(line of the fence, language, code, [shown outputs]) of every block after a MARKER line,
    each with the blocks after an OUTPUT line that show what it prints."""
    lines = path.read_text().splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() not in (MARKER, OUTPUT):
            continue
        fence = FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
        assert fence, f"{path.name}:{i + 1}: {line.strip()} must come right before a fenced block"
        end = next(j for j in range(i + 2, len(lines)) if lines[j].strip() == fence.group(1))
        code = "\n".join(lines[i + 2:end])
        if line.strip() == MARKER:
            blocks.append((i + 2, fence.group(2), code, []))
        else:
            assert blocks, f"{path.name}:{i + 1}: {OUTPUT} shows the output of a runnable block before it"
            blocks[-1][3].append((i + 2, code))
    return blocks


BLOCKS = [(path, *block) for path in PAGES for block in runnable_blocks(path)]


def commands(code):
    """The argument lists of a shell block's lines; each must be an npusim command."""
    joined = re.sub(r"\\\n", " ", code)
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            assert words[0] == "npusim", f"only npusim commands run in a shell block, not {line!r}"
            yield words[1:]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    for name in ("examples", "bench"):
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    return tmp_path


@pytest.mark.parametrize("path, line, language, code, shown", BLOCKS, ids=[f"{p.name}:{n}" for p, n, *_ in BLOCKS])
def test_runnable_block(path, line, language, code, shown, folder):
    out = io.StringIO()
    if language == "python":
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"{path.name}:{line}", "exec"), {"__name__": "__docs__"})  # noqa: S102 - the docs' runnable blocks
    for argv in commands(code) if language != "python" else ():
        err = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = cli.main(argv)
        assert status == 0, f"{path.name}:{line}: npusim {' '.join(argv)}: {err.getvalue()}"
    printed = [text.strip() for text in out.getvalue().splitlines()]
    for at, block in shown:
        _shows(printed, [text.strip() for text in block.splitlines() if text.strip()], f"{path.name}:{at}")


def _shows(printed, shown, where):
    """Each shown line is a printed line, in the printed order."""
    rest = iter(printed)
    for text in shown:
        assert any(text == p for p in rest), f"{where}: {text!r} is not printed (in this order) by the block it shows; it printed:\n" + \
            "\n".join(printed)


def test_the_pages_have_runnable_blocks():
    pages = {path.name for path, *_ in BLOCKS}
    assert {"README.md", "index.md"} <= pages
    assert any(language == "python" for _, _, language, *_ in BLOCKS)
    assert any(language != "python" for _, _, language, *_ in BLOCKS)
    assert any(shown for *_, shown in BLOCKS)


def test_a_shown_output_must_be_printed_in_order():
    _shows(["a", "b", "c"], ["a", "c"], "here")
    with pytest.raises(AssertionError, match="'b' is not printed"):
        _shows(["a", "b", "c"], ["c", "b"], "here")


def test_a_marker_without_a_block_is_an_error(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"{MARKER}\ntext\n")
    with pytest.raises(AssertionError, match="right before a fenced block"):
        runnable_blocks(page)


def test_a_shell_block_runs_npusim_only():
    assert list(commands("npusim chips   # the chips\nnpusim run a.yaml \\\n  --chip bm1684\n")) == [
        ["chips"], ["run", "a.yaml", "--chip", "bm1684"]]
    with pytest.raises(AssertionError, match="only npusim commands"):
        list(commands("rm -rf out"))


def test_the_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= README_LINES

