"""The user pages stay true to the code and to each other: every condition/event reason has a
row in docs/troubleshooting.md, the README links every user page, every relative link of these
pages resolves (file and heading), and the README keeps the test command .ci/run runs."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from baton.model import status

REPO = Path(__file__).resolve().parents[2]
USER_PAGES = ["docs/install.md", "docs/upgrade.md", "docs/uninstall.md", "docs/troubleshooting.md",
              "docs/claims.md", "docs/api-reference.md"]
CHECKED = ["README.md", "CONTRIBUTING.md", *USER_PAGES]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", path.read_text(), re.M)}


def test_every_reason_has_a_row_in_troubleshooting() -> None:
    page = (REPO / "docs" / "troubleshooting.md").read_text()
    missing = [r.value for r in status.Reason if f"`{r.value}`" not in page]
    assert not missing, f"docs/troubleshooting.md says nothing about {missing}"


def test_the_readme_links_every_user_page_and_contributing() -> None:
    readme = (REPO / "README.md").read_text()
    targets = set(LINK.findall(readme))
    for page in [*USER_PAGES, "CONTRIBUTING.md"]:
        assert page in targets, f"README.md does not link {page}"


@pytest.mark.parametrize("page", CHECKED)
def test_relative_links_resolve(page: str) -> None:
    src = REPO / page
    broken = []
    text = re.sub(r"```.*?```|`[^`\n]*`", "", src.read_text(), flags=re.S)  # code is no link
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # an absolute URL
        path, _, anchor = target.partition("#")
        dest = (src.parent / path).resolve() if path else src
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(target)
    assert not broken, f"{page}: links that lead nowhere: {broken}"


def test_readme_keeps_the_test_command_ci_runs_and_the_entry_points_are_documented() -> None:
    """.ci/run runs the README's test command; the fixed entry points stay documented."""
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(r"^exec make test$", ci, re.M), ".ci/run no longer runs `make test`"
    assert re.search(r"^```\nmake test\n```$", readme, re.M), "README.md lost its test command block"
    both = readme + (REPO / "CONTRIBUTING.md").read_text()
    for entry in ("make test", "make demo", "make cluster-up", "make cluster-down", "python -m baton"):
        assert entry in both, f"{entry} is documented nowhere"
