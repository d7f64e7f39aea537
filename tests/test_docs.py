"""The README is a front door and docs/ is the manual: every relative link in README.md and docs/**/*.md resolves (its
file, and its #anchor as GitHub slugs the target's headings), every page is reachable from the README, every command
and subcommand of `compat` has its page naming each of its long options, and .ci/run runs the README's test command.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
COMMAND_PAGES = DOCS / "commands"
MAX_README_LINES = 300


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with inline code spans blanked (a `[x](y)` there is no link)."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip()
        marker = re.match(r"(`{3,}|~{3,})", stripped)
        if marker:
            if fence is None:
                fence = marker.group(1)[0] * len(marker.group(1))
            elif stripped.startswith(fence):
                fence = None
            continue
        if fence is None:
            yield number, line


def _without_code_spans(line: str) -> str:
    return re.sub(r"(`+)(?:(?!\1).)+?\1", lambda m: " " * len(m.group(0)), line)


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading (github-slugger): the text as rendered, lower-cased, every character that is not a
    letter, digit, space, hyphen or underscore dropped, each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())  # a link's text stays, its target goes
    text = re.sub(r"<[^>]+>", "", text).lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def headings(path: Path) -> list[str]:
    return [m.group(2).strip().rstrip("#").strip() for _, line in _prose_lines(path.read_text(encoding="utf-8"))
            if (m := re.match(r"(#{1,6})\s+(.*)", line))]


def anchors(path: Path) -> set[str]:
    """Every anchor GitHub makes for the file's headings; a repeated slug gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    made = set()
    for heading in headings(path):
        slug = github_slug(heading)
        if slug in seen:
            seen[slug] += 1
            made.add(f"{slug}-{seen[slug]}")
        else:
            seen[slug] = 0
            made.add(slug)
    return made


class Link(NamedTuple):
    page: Path
    line: int
    target: str


LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def links(page: Path) -> Iterator[Link]:
    for number, line in _prose_lines(page.read_text(encoding="utf-8")):
        for m in LINK.finditer(_without_code_spans(line)):
            yield Link(page, number, m.group(1))


def _relative(target: str) -> bool:
    return not re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target) and not target.startswith("//")


def _resolve(link: Link) -> tuple[Path, str]:
    path, _, anchor = link.target.partition("#")
    return ((link.page.parent / unquote(path)).resolve() if path else link.page), unquote(anchor)


def _link_problems(link: Link) -> list[str]:
    where = f"{_rel(link.page)}:{link.line}: [..]({link.target})"
    target, anchor = _resolve(link)
    if not target.exists():
        return [f"{where}: {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target} does not exist; "
                f"fix the path (relative to {_rel(link.page.parent) or '.'}/) or add the page"]
    if not target.is_relative_to(ROOT):
        return [f"{where}: points outside the repository"]
    if anchor and target.suffix == ".md" and anchor not in anchors(target):
        near = sorted(anchors(target))
        return [f"{where}: {_rel(target)} has no heading whose anchor is #{anchor}; its anchors: {', '.join(near)}"]
    return []


def test_every_relative_link_in_readme_and_docs_resolves():
    problems = [problem for page in _pages() for link in links(page) if _relative(link.target)
                for problem in _link_problems(link)]
    assert not problems, "broken links:\n" + "\n".join(problems)


NAMED_PAGE = re.compile(r"(?<![\w/.-])((?:\.\./)*docs/[\w./-]*?\.md)(?:#([\w-]+))?")


def _named_pages() -> Iterator[tuple[str, str, str]]:
    """(where, path, anchor) for every docs/....md a text names outside a link: the manual, the code's messages and
    schemas (what a user is told to read), and the benchmarks."""
    texts = [*_pages(), *sorted((ROOT / "compatmatrix").rglob("*.py")), *sorted((ROOT / "compatmatrix").rglob("*.json")),
             *sorted((ROOT / "bench").glob("*.py"))]
    for path in texts:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for m in NAMED_PAGE.finditer(LINK.sub(" ", line)):
                yield f"{_rel(path)}:{number}", m.group(1), m.group(2) or ""


def test_every_docs_page_a_text_names_exists():
    """Text that sends a reader to docs/X.md (a message, a schema, a page) names a page that exists, and its #anchor."""
    problems = []
    for where, name, anchor in _named_pages():
        page = ROOT / re.sub(r"^(\.\./)+", "", name)
        if not page.is_file():
            problems.append(f"{where}: names {name}, which does not exist: name the page it moved to")
        elif anchor and anchor not in anchors(page):
            problems.append(f"{where}: names {name}#{anchor}, but {name} has no such heading anchor")
    assert not problems, "\n".join(problems)


def test_every_docs_page_is_reachable_from_the_readme():
    seen, todo = {README.resolve()}, [README]
    while todo:
        page = todo.pop()
        for link in links(page):
            target, _ = _resolve(link)
            if _relative(link.target) and target.suffix == ".md" and target.is_file() and target not in seen:
                seen.add(target)
                todo.append(target)
    unreachable = [_rel(page) for page in _pages() if page.resolve() not in seen]
    assert not unreachable, (f"not linked from README.md, directly or through docs/README.md: {unreachable}; "
                             "add each to the index in docs/README.md")


def test_the_readme_is_a_front_door():
    text = README.read_text(encoding="utf-8")
    lines = text.count("\n")
    assert lines <= MAX_README_LINES, (f"README.md has {lines} lines, more than {MAX_README_LINES}: move the detail to "
                                       "a page under docs/ and link it")
    assert "## Quick start" in text and "## Test doubles" in text, "README.md lost its Quick start or Test doubles section"


def _readme_block_after(label: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    assert label in text, f"README.md has no '{label}' line"
    block = re.search(r"```sh\n(.*?)\n```", text.split(label, 1)[1], re.S)
    assert block, f"README.md has no ```sh block after '{label}'"
    return block.group(1).splitlines()


def test_the_readme_starts_with_the_two_commands_and_ci_runs_its_test_command_verbatim():
    setup = _readme_block_after("Set up and run the main job")
    tests = _readme_block_after("Run the tests:")
    assert len(setup) == 1 and "compat resolve" in setup[0], setup
    assert len(tests) == 1 and "pytest" in tests[0], tests
    ci_lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert tests[0] in ci_lines, (f"the README's test command is not a line of .ci/run: {tests[0]!r}; .ci/run must "
                                  "run it verbatim (change both together)")


# --- every command's --help is covered by a page ---

def _ensure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    ensure = getattr(parser, "ensure_arguments", None)  # compat's subcommands make their arguments on first use
    if ensure is not None:
        ensure()
    return parser


def commands() -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    from compatmatrix.cli import build_parser

    found: list[tuple[tuple[str, ...], argparse.ArgumentParser]] = []

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        _ensure(parser)
        if path:
            found.append((path, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))

    walk(build_parser(), ())
    return found


def long_options(parser: argparse.ArgumentParser) -> list[str]:
    return sorted({option for action in parser._actions if action.help != argparse.SUPPRESS
                   for option in action.option_strings if option.startswith("--") and option != "--help"})


def page_of(path: tuple[str, ...]) -> Path | None:
    """docs/commands/<a-b>.md, else the command page (then any docs page) with a heading that names `compat a b` (as
    words: `compat matrix` is not `compat matrix update`)."""
    own = COMMAND_PAGES / f"{'-'.join(path)}.md"
    if own.is_file():
        return own
    named = re.compile(r"(?<![\w-])compat " + re.escape(" ".join(path)) + r"(?![\w-])")
    for page in [*sorted(COMMAND_PAGES.glob("*.md")), *sorted(DOCS.rglob("*.md"))]:
        if any(named.search(heading.replace("`", "")) for heading in headings(page)):
            return page
    return None


def test_the_command_walk_finds_compats_commands():
    """The walk below is only as good as what it finds: the commands, a nested subcommand, and the options."""
    found = {path: parser for path, parser in commands()}
    assert {("resolve",), ("install",), ("doctor",), ("matrix",), ("matrix", "update"), ("matrix", "verify")} <= set(found)
    assert "--requirement" in long_options(found[("resolve",)]) and "--health" in long_options(found[("matrix", "update")])


@pytest.mark.parametrize("path", [path for path, _ in commands()], ids=lambda path: " ".join(path))
def test_every_command_has_a_page_naming_its_options(path):
    parser = dict(commands())[path]
    command = "compat " + " ".join(path)
    page = page_of(path)
    assert page is not None, (f"`{command}` has no docs page: add docs/commands/{'-'.join(path)}.md, or a heading "
                              f"'## `{command}`' on the page of `compat {path[0]}`, and link it from docs/README.md")
    text = page.read_text(encoding="utf-8")
    missing = [option for option in long_options(parser)
               if not re.search(r"(?<![\w-])" + re.escape(option) + r"(?![\w-])", text)]
    assert not missing, (f"{_rel(page)} (the page of `{command}`) does not name {', '.join(missing)}, which "
                         f"`{command} --help` lists: describe each there (its 'Options of `{command}`' list)")


# --- the checker itself, on pages made here ---

def test_github_slugs():
    assert github_slug("`compat doctor --live`") == "compat-doctor---live"
    assert github_slug("Fabric (`compat doctor --live --fabric`)") == "fabric-compat-doctor---live---fabric"
    assert github_slug("What was seen on a real oneCCL, and what only on fixtures") == \
        "what-was-seen-on-a-real-oneccl-and-what-only-on-fixtures"
    assert github_slug("Requirements files (`-r`)") == "requirements-files--r"
    assert github_slug("The overlay: `compat matrix update`") == "the-overlay-compat-matrix-update"
    assert github_slug("See [the page](x.md) — ok_1") == "see-the-page--ok_1"


def test_the_link_checker_finds_a_broken_file_and_a_broken_anchor(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\n## Same\n\n## Same\n\nsee [b](b.md#real) and [c](c.md) and [d](b.md#nope)\n"
                                   "and [self](#same-1), [gone](#same-2) `[code](nowhere.md)`\n\n```\n[fenced](nowhere.md)\n```\n")
    (tmp_path / "b.md").write_text("# Real\n")
    page = tmp_path / "a.md"
    found = {link.target: link for link in links(page)}
    assert set(found) == {"b.md#real", "c.md", "b.md#nope", "#same-1", "#same-2"}

    def broken(target: str) -> bool:
        resolved, anchor = _resolve(found[target])
        return not resolved.exists() or bool(anchor) and anchor not in anchors(resolved)

    assert [target for target in found if broken(target)] == ["c.md", "b.md#nope", "#same-2"]


def test_a_page_is_found_by_its_own_file_or_by_a_heading_naming_the_command():
    assert page_of(("matrix", "update")) == page_of(("matrix",)) == COMMAND_PAGES / "matrix.md"
    assert page_of(("no-such-command",)) is None
