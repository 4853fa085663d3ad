"""The documentation can be trusted to point somewhere: every relative link of README.md,
ARCHITECTURE.md, CHANGELOG.md and docs/ resolves (its file, and the heading its #anchor
names), every repository path the docs cite exists, every code name ARCHITECTURE.md cites
is defined where it says, every "docs/...: Section" a comment cites is a heading there,
and the README stays short. Each check is also run on a broken sample, so it can fail."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 450

#: Markdown pages a reader follows links through.
PAGES = sorted([ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "CHANGELOG.md",
                *(ROOT / "docs").rglob("*.md")])
#: Where code may cite a documentation page.
CODE = ("libs", "services", "tests", "bench", "deploy", "examples")

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)")
BACKTICKED = re.compile(r"`([^`\n]+)`")
#: The top directories of the repository a backticked path may start with.
TOPS = ("libs/", "services/", "docs/", "deploy/", "tests/", "bench/", "examples/",
        "proto-schemas/")


def prose(text: str) -> str:
    """The text outside fenced code blocks (their lines blanked, so numbers hold)."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else line)
    return "\n".join(out)


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a page's headings produce (a repeated heading gets -1, -2...)."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose(text).splitlines():
        match = re.match(r"^#{1,6} (.*)$", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path, text: str) -> Iterator[str]:
    """Each relative link of ``text`` (the page ``page``) that leads nowhere."""
    for target in LINK.findall(prose(text)):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:...
            continue
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists():
            yield f"{target}: no such file"
        elif anchor and where.suffix == ".md" and anchor not in anchors(where.read_text()):
            yield f"{target}: no heading makes #{anchor}"


def test_every_relative_link_of_the_docs_resolves() -> None:
    assert len(PAGES) > 20
    broken = [f"{page.relative_to(ROOT)}: {problem}"
              for page in PAGES for problem in broken_links(page, page.read_text())]
    assert broken == []


def test_a_broken_link_or_anchor_is_found() -> None:
    page = ROOT / "docs" / "README.md"
    sample = ("[a](operations.md#configuration) [b](nowhere.md) [c](operations.md#nope) "
              "[d](#nope) ![e](console/live.png) [f](https://example.com/x)")
    assert list(broken_links(page, sample)) == [
        "nowhere.md: no such file", "operations.md#nope: no heading makes #nope",
        "#nope: no heading makes #nope"]


def test_anchors_follow_githubs_rules() -> None:
    text = "# `clearance.v1.review.subject` — SubjectAccessReview\n## RFC 0009's examples\n" \
           "## Events\n## Events\n```\n# not a heading\n```\n"
    assert anchors(text) == {"clearancev1reviewsubject--subjectaccessreview",
                             "rfc-0009s-examples", "events", "events-1"}


def cited_paths(text: str) -> Iterator[str]:
    """The repository paths a page cites in backticks (`libs/...`, `docs/...`)."""
    for quoted in BACKTICKED.findall(text):
        for raw in quoted.split():
            word = raw.strip(",;:()").rstrip(".")
            if word.startswith(TOPS) and not re.search(r"[<>*{}…]|\.\.\.", word):
                yield word.split("::")[0]


def missing_paths(text: str) -> list[str]:
    return sorted({path for path in cited_paths(text) if not (ROOT / path).exists()})


def test_every_path_the_docs_cite_exists() -> None:
    missing = {page.relative_to(ROOT).as_posix(): missing_paths(page.read_text())
               for page in PAGES}
    assert {page: paths for page, paths in missing.items() if paths} == {}


def test_a_missing_cited_path_is_found() -> None:
    assert missing_paths("see `libs/clearance_core/nope.py` and `docs/operations.md`, "
                         "`services/<name>/`") == ["libs/clearance_core/nope.py"]


# ARCHITECTURE.md's short paths: `clearance_core/x.py` and the files of a service named
# bare (`folder.py`) are looked up under these directories.
PACKAGES = [ROOT / "libs", *sorted((ROOT / "services").glob("*"))]


def module_files(name: str) -> list[Path]:
    """The files a short module path (`clearance_runtime/messaging/pull.py`, `folder.py`) may be."""
    return [path for package in PACKAGES for path in package.rglob(name)
            if path.as_posix().endswith("/" + name)]


def defined(files: list[Path], name: str) -> bool:
    """Whether ``name`` is a class, function, method or top-level name in ``files``."""
    pattern = re.compile(rf"^\s*(?:async\s+def|def|class)\s+{re.escape(name)}\b"
                         rf"|^\s*{re.escape(name)}\s*[:=]", re.MULTILINE)
    return any(pattern.search(path.read_text()) for path in files)


def architecture_problems(text: str) -> list[str]:
    """Short paths that are no file, and `Class.method` or `module.name` that are not
    defined there."""
    problems = []
    for raw in BACKTICKED.findall(prose(text)):
        quoted = raw.strip()
        if re.fullmatch(r"[\w/]+\.(py|lua|yaml|conf)", quoted) and not quoted.startswith(
                TOPS):
            if not module_files(quoted):
                problems.append(f"{quoted}: no such file")
            continue
        dotted = re.fullmatch(r"(?:[\w/]+/)?([A-Za-z_]\w*)\.(_?[A-Za-z]\w*)", quoted)
        if dotted is None or quoted.startswith(TOPS):
            continue
        owner, name = dotted.groups()
        if owner[0].isupper():  # Class.method: the class, and the method in its file
            files = [path for package in PACKAGES for path in package.rglob("*.py")
                     if re.search(rf"^class {owner}\b", path.read_text(), re.MULTILINE)]
            if not files:
                problems.append(f"{quoted}: no class {owner}")
            elif not defined(files, name):
                problems.append(f"{quoted}: {owner} defines no {name}")
        elif (files := module_files(f"{owner}.py")) and not defined(files, name):
            problems.append(f"{quoted}: {owner}.py defines no {name}")  # module.name
    return problems


def test_every_file_and_name_architecture_cites_is_there() -> None:
    assert architecture_problems((ROOT / "ARCHITECTURE.md").read_text()) == []


def test_a_renamed_file_or_function_is_found() -> None:
    sample = ("`folder.py`, `Folder.fold`, `pull.py`, `clearance_runtime/storage/commits.py`, "
              "`Committer.commit`, `bus.position`, `nope.py`, `Folder.unfold`, "
              "`Nobody.home`, `commits.nothing`, `clearance.v1.check`")
    assert architecture_problems(sample) == [
        "nope.py: no such file", "Folder.unfold: Folder defines no unfold",
        "Nobody.home: no class Nobody", "commits.nothing: commits.py defines no nothing"]


#: A page, and a section when written ``(page: Section)``.
CITATION = re.compile(r"(docs/[\w/.-]+\.md|ARCHITECTURE\.md)(?::\s+([^,;()\n\"]+)\))?")


def citation_problems(text: str) -> Iterator[str]:
    """Each page a comment cites that does not exist, and each "page: Section" whose
    page has no heading that starts with that section's words (``(page: Section)``)."""
    for path, section in CITATION.findall(text):
        page = ROOT / path
        if not page.exists():
            yield f"{path}: no such page"
            continue
        if not section:
            continue
        words = slug(section.strip().rstrip(".").split(" (")[0])
        if not any(anchor.startswith(words) for anchor in anchors(page.read_text())):
            yield f"{path}: no section {section.strip()!r}"


def test_every_page_and_section_the_code_cites_exists() -> None:
    problems = [f"{path.relative_to(ROOT)}: {problem}"
                for top in CODE for path in sorted((ROOT / top).rglob("*"))
                if path != Path(__file__).resolve()
                if path.suffix in (".py", ".yaml", ".yml", ".json", ".conf", ".lua")
                for problem in citation_problems(path.read_text())]
    assert problems == []


def test_a_wrong_citation_is_found() -> None:
    sample = ("(docs/api/README.md: Conventions) (docs/api/README.md: Nothing here) "
              "(docs/nowhere.md) (docs/guide/inherited.md: The example fleet's policies)")
    assert list(citation_problems(sample)) == [
        "docs/api/README.md: no section 'Nothing here'", "docs/nowhere.md: no such page"]


def test_no_code_cites_a_readme_section_that_moved() -> None:
    """Code cites the page that documents it; the README keeps only the quick start."""
    stale = [f"{path.relative_to(ROOT)}:{number}"
             for top in CODE for path in sorted((ROOT / top).rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"README[:,]? \"?[A-Z]", line) and "docs/" not in line]
    assert stale == []


@pytest.mark.parametrize("page", [ROOT / "README.md", ROOT / "ARCHITECTURE.md"],
                         ids=lambda page: page.name)
def test_no_document_outside_the_repository_is_cited(page: Path) -> None:
    for text in [page.read_text(), *(p.read_text() for p in (ROOT / "docs").rglob("*.md"))]:
        assert "../shared" not in text and "CONTRACT" not in text


def test_the_readme_stays_short() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < README_MAX_LINES, len(lines)
