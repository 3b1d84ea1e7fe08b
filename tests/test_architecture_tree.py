"""The source tree in docs/architecture.md ("## Layout", its first fenced block) matches ``src/`` both ways.

The block lists one entry a line: a name (``ops/``, ``utils.py``; several as ``__main__.py, utils.py``), then
two or more spaces and a description. An entry indented deeper than the directory entry above it lies in
that directory, whatever the step (spaces, tabs or tree-drawing characters such as ``├──`` and ``│``).
A line that starts at or right of the previous entry's description continues that description.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("src/exactfuse", "src/exactfuse_cli")

_PREFIX = re.compile(r"[\s│├└─┬┼|`+]*(?:--\s*)?")  # indentation and tree-drawing characters
_NAME = r"[\w.\-]+(?:/[\w.\-]+)*/?"
_ENTRY = re.compile(rf"(?P<names>{_NAME}(?:,\s*{_NAME})*)(?:\s+(?P<desc>\S.*))?$")


def layout_block(markdown: str) -> list[str]:
    """The lines of the first fenced block after the ``## Layout`` heading."""
    section = markdown.split("\n## Layout\n", 1)
    assert len(section) == 2, "docs/architecture.md has no '## Layout' section"
    fence = re.search(r"^```[^\n]*\n(.*?)^```", section[1], re.DOTALL | re.MULTILINE)
    assert fence, "docs/architecture.md: the '## Layout' section has no ``` block"
    return fence.group(1).splitlines()


def parse_tree(lines: list[str]) -> tuple[list[str], list[str]]:
    """(listed paths, unreadable lines): paths relative to the repository root, directories ending in '/'."""
    paths: list[str] = []
    unreadable: list[str] = []
    parents: list[tuple[int, str]] = []  # (indent, path) of the directories enclosing the next entry
    desc_col: int | None = None  # where the previous entry's description starts
    for raw in lines:
        line = raw.expandtabs(4).rstrip()
        if not line.strip():
            continue
        indent = _PREFIX.match(line).end()
        if desc_col is not None and indent >= desc_col:
            continue  # a wrapped description
        entry = _ENTRY.match(line, indent)
        names = [n.strip() for n in entry.group("names").split(",")] if entry else []
        if not names or not all(n.endswith("/") or "." in n.rsplit("/", 1)[-1] for n in names):
            unreadable.append(raw)
            desc_col = None
            continue
        desc_col = entry.start("desc") if entry.group("desc") else None
        while parents and parents[-1][0] >= indent:
            parents.pop()
        parent = parents[-1][1] if parents else ""
        paths.extend(parent + n for n in names)
        if len(names) == 1 and names[0].endswith("/"):
            parents.append((indent, parent + names[0]))
    return paths, unreadable


def files_on_disk() -> set[str]:
    """Every package directory ('/'-terminated) and .py file under the two source packages."""
    found: set[str] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            rel = path.relative_to(ROOT)
            found.add(rel.as_posix())
            found.update(parent.as_posix() + "/" for parent in rel.parents if parent.as_posix().startswith(PACKAGES))
    return found


def test_architecture_tree_matches_src():
    listed, unreadable = parse_tree(layout_block(DOC.read_text()))
    unreadable_lines = "\n".join(unreadable)
    assert not unreadable, (
        f"docs/architecture.md layout: lines read as neither entry nor description:\n{unreadable_lines}"
    )
    duplicates = sorted({p for p in listed if listed.count(p) > 1})
    absent = sorted(p for p in listed if not ((ROOT / p).is_dir() if p.endswith("/") else (ROOT / p).is_file()))
    unlisted = sorted(files_on_disk() - set(listed))
    problems = [
        f"{title}:\n  " + "\n  ".join(paths)
        for title, paths in (
            ("in src/ but not in the docs/architecture.md layout", unlisted),
            ("in the docs/architecture.md layout but not on disk", absent),
            ("listed more than once in the docs/architecture.md layout", duplicates),
        )
        if paths
    ]
    assert not problems, "\n".join(problems)


TWO_SPACES = """
src/pkg/                 the package
  __init__.py            its names, with a description
                         wrapped onto a second line
  sub/
    a.py                 module a
  b.py, c.py             two modules on one line
"""

BOX_DRAWING = """
src/
├── pkg/                 the package
│   ├── __init__.py      its names, with a description
│   │                    wrapped onto a second line
│   ├── sub/
│   │   └── a.py         module a
│   └── b.py, c.py       two modules on one line
"""

FOUR_SPACES_TABS = """
src/pkg/    the package
\t__init__.py    its names, with a description
\t               wrapped onto a second line
\tsub/
\t\ta.py    module a
\tb.py, c.py    two modules on one line
"""


@pytest.mark.parametrize("tree", [TWO_SPACES, BOX_DRAWING, FOUR_SPACES_TABS], ids=["2-spaces", "box", "tabs"])
def test_parse_tree_reads_any_indentation(tree):
    paths, unreadable = parse_tree(tree.splitlines())
    assert unreadable == []
    assert {p.removeprefix("src/") for p in paths} - {"src/", ""} == {
        "pkg/",
        "pkg/__init__.py",
        "pkg/sub/",
        "pkg/sub/a.py",
        "pkg/b.py",
        "pkg/c.py",
    }


def test_parse_tree_reports_unreadable_lines():
    paths, unreadable = parse_tree(["src/pkg/    the package", "  oops no path here"])
    assert paths == ["src/pkg/"]
    assert unreadable == ["  oops no path here"]
