"""The documentation's house rules: a short README that is a front door, links that lead somewhere, a benchmarks
page of tables rather than a diary, and a project that speaks of itself, not of how it was made."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README_MAX_BYTES = 12 * 1024
BENCHMARKS_README_MAX_BYTES = 20 * 1024

# an inline link or image, [text](target) or ![alt](target), its target up to a space, a quote or the bracket
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# how the project was made: an issue or pull request by its number, a work sitting by its number or its place in
# a series, a dated diary line
HISTORY = [
    re.compile(r"\b(?:issues?|pull requests?|PRs?)\s*#?\s*\d+", re.IGNORECASE),
    re.compile(
        r"\b(?:(?:twenty|thirty|forty|fifty)-)?(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth"
        r"|eleventh|twelfth|\w+teenth|twentieth|thirtieth|fortieth|fiftieth|\d+(?:st|nd|rd|th))"
        r"(?:\s+(?:to|and)\s+\S+)?\s+(?:work\s+)?(?:session|sitting)s?\b",
        re.IGNORECASE,
    ),
    re.compile(r"\bsittings?\b", re.IGNORECASE),
    re.compile(r"\b(?:measured|taken|run|seen)\s+(?:again\s+)?on\s+20\d\d-\d\d-\d\d\b", re.IGNORECASE),
]
URL = re.compile(r"https?://\S+")
SCANNED = (".py", ".md", ".js", ".c", ".css", ".toml", ".cfg")


def markdown_pages() -> list[Path]:
    return [REPO / "README.md", REPO / "benchmarks" / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def project_files() -> list[Path]:
    """The files of the project, tracked or new (not ignored), that hold code, comments or prose."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    names = [REPO / name for name in listed if name.endswith(SCANNED) or name in ("Makefile", ".ci/run")]
    return sorted(path for path in names if path.is_file())


def heading_anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    anchors = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def test_the_readme_is_a_front_door() -> None:
    size = len((REPO / "README.md").read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes: move the detail to a page of docs/"


def test_the_benchmarks_page_holds_the_current_tables_only() -> None:
    page = REPO / "benchmarks" / "README.md"
    size = len(page.read_bytes())
    assert size < BENCHMARKS_README_MAX_BYTES, (
        f"benchmarks/README.md is {size} bytes: keep each benchmark's current table"
    )
    text = page.read_text(encoding="utf-8")
    scripts = sorted(p.name for p in (REPO / "benchmarks").glob("*.py") if p.name.startswith(("bench_", "profile_")))
    for script in scripts:
        assert f"python benchmarks/{script}" in text, f"benchmarks/README.md gives no command line for {script}"


@pytest.mark.parametrize("page", markdown_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_leads_somewhere(page: Path) -> None:
    """A relative link of the README, the benchmarks page or a page of docs/ names a file that exists, and a
    heading of it where the link names one."""
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.relative_to(REPO)} links to {target}, which does not exist"
        if anchor and linked.suffix == ".md":
            assert anchor in heading_anchors(linked), f"{page.relative_to(REPO)} links to {target}: no such heading"


def test_the_readme_points_to_every_page_of_docs() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for page in sorted((REPO / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in readme, f"README.md does not point to docs/{page.name}"


def history_in(text: str) -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        bare = URL.sub("", line)
        found += [f"{number}: {m.group(0)!r}" for pattern in HISTORY for m in pattern.finditer(bare)]
    return found


# the model card of the shipped checkpoints: what each model is, how it is trained and what it measures
MODEL_CARD = REPO / "checkpoints" / "README.md"
# a calendar date (2026-11-28): the model card names none, since what it tells holds for the files as they are
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def test_the_project_speaks_of_itself_not_of_how_it_was_made() -> None:
    """No code, comment, docstring or page cites an issue by its number, a numbered work sitting, or a dated diary
    entry: it says what the project does and why."""
    found = {}
    for path in project_files():
        if path == Path(__file__).resolve():  # this file's own examples of what the rule finds
            continue
        where = history_in(path.read_text(encoding="utf-8", errors="replace"))
        if where:
            found[str(path.relative_to(REPO))] = where[:3]
    assert not found, f"accounts of how the project was made: {found}"


def test_the_model_card_speaks_of_its_models_not_of_how_they_were_made() -> None:
    """The model card says what each shipped model is, how it is trained and what it measures: no issue, no work
    sitting or session, no dated line (its history is git's)."""
    text = MODEL_CARD.read_text(encoding="utf-8")
    assert MODEL_CARD in project_files(), "checkpoints/README.md is not among the files the history check reads"
    found = history_in(text)
    found += [f"{n}: {m.group(0)!r}" for n, line in enumerate(text.splitlines(), 1) for m in DATE.finditer(line)]
    found += [f"{n}: {line.strip()[:60]!r}" for n, line in enumerate(text.splitlines(), 1) if "session" in line.lower()]
    assert not found, f"checkpoints/README.md tells how its models were made: {found[:5]}"


def test_the_history_detector_finds_each_kind() -> None:
    """The rule above sees an issue's number, a numbered or dated sitting, and leaves Streamlit's session state, a
    browser session, a test image's number and a link to another project's issue alone."""
    caught = [
        "the fix for issue 31, item 1",
        "as asked in issue #54",
        "measured in the thirty-fifth session",
        "since the twenty-eighth session's change",
        "shipped in the eleventh to fifteenth sessions",
        "numbered work sittings",
        "Measured on 2026-11-22 on one H100",
    ]
    for line in caught:
        assert history_in(line), line
    passed = [
        "st.session_state['checkpoint']",
        "the large arrays go once per browser session",
        "the typed session state of the dashboard",
        "the pages opened in this session",
        "made once for the whole test session",
        "test image #674",
        "see https://github.com/streamlit/streamlit/issues/8798",
    ]
    for line in passed:
        assert not history_in(line), line
