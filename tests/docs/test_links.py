"""Every relative link and #anchor in README.md, docs/ and the notebooks' markdown resolves (anchors as GitHub makes
them from headings), and docs/index.md, reached from README, lists every guide."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
INDEX = DOCS / "index.md"
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def markdown_of(path: Path) -> str:
    """A page's markdown: the file itself, or a jupytext notebook's markdown cells (their "# " taken off)."""
    text = path.read_text()
    if path.suffix != ".py":
        return text
    cells, inside = [], False
    for line in text.splitlines():
        if line.startswith("# %%"):
            inside = "[markdown]" in line
        elif inside:
            cells.append(line[2:] if line.startswith("# ") else line.lstrip("#"))
    return "\n".join(cells)


def prose(markdown: str, *, inline_code: bool = False) -> str:
    """The markdown without fenced code blocks, and without inline code unless asked (a link in code is
    only text; a heading's code is part of its anchor)."""
    lines, fenced = [], False
    for line in markdown.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        lines.append("" if fenced else line if inline_code else re.sub(r"`[^`]*`", "", line))
    return "\n".join(lines)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped (not - or _), spaces to -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a page's headings, a repeated heading's numbered -1, -2 ... as GitHub does."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose(markdown_of(path), inline_code=True).splitlines():
        m = re.match(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md")), *sorted((ROOT / "notebooks_src").glob("*.py"))]


def links(path: Path) -> list[str]:
    return LINK.findall(prose(markdown_of(path)))


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page):
    broken = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
            continue
        file, _, anchor = target.partition("#")
        where = (page.parent / file).resolve() if file else page
        if not where.exists():
            broken.append(f"{target}: no {where.relative_to(ROOT) if where.is_relative_to(ROOT) else where}")
        elif anchor and where.suffix in (".md", ".py") and anchor not in anchors(where):
            broken.append(f"{target}: no heading #{anchor} in {where.name}")
    assert not broken, broken


def test_the_index_lists_every_guide_and_readme_points_to_it():
    listed = {(DOCS / t.partition("#")[0]).resolve() for t in links(INDEX) if not t.startswith(("http", "#"))}
    guides = {p.resolve() for p in DOCS.rglob("*.md") if p != INDEX}
    assert not sorted(str(p.relative_to(DOCS)) for p in guides - listed)
    assert "docs/index.md" in links(ROOT / "README.md")


def test_slugs_follow_github():
    assert slug("`auto`'s look-up by size (2026-12-04, 19:50 UTC)") == "autos-look-up-by-size-2026-12-04-1950-utc"
    assert slug("Which algorithm `MPI_Bcast` runs") == "which-algorithm-mpi_bcast-runs"
    assert slug("(c) Flat against hierarchical, block against round-robin: 4 nodes x 2 ranks") == \
        "c-flat-against-hierarchical-block-against-round-robin-4-nodes-x-2-ranks"
    assert slug("Measured live: each strategy's best grid on 4 and 8 ranks") == \
        "measured-live-each-strategys-best-grid-on-4-and-8-ranks"
