"""The README is the entry and stays short; the manual (docs/, built by MkDocs with --strict in .ci/lint) and the
README name only files that exist, so a reader following them never lands on nothing."""

from __future__ import annotations

import re
import subprocess

import pytest

from conftest import REPO

DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [REPO / "README.md", REPO / "ARCHITECTURE.md", REPO / "benchmarks" / "README.md", *DOCS]
# A repository path in backticks: starts with a top-level folder or file of the repository.
TOP_LEVEL = ("workflow/", "tests/", "benchmarks/", "envs/", "profiles/", ".test/", ".ci/", "docs/")
GENERATED = {REPO / "docs" / "configuration.md"}  # written at build time by docs/hooks/config_reference.py
PATH_IN_CODE = re.compile(r"`((?:" + "|".join(re.escape(t) for t in TOP_LEVEL) + r")[^`\s]*)`")


def test_readme_is_short_and_opens_with_the_two_commands():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 150, len(lines)
    head = "\n".join(lines[:20])
    assert "bash workflow/scripts/bootstrap.sh && .venv/bin/snakemake --cores all" in head
    assert "bash workflow/scripts/bootstrap.sh --test && .venv/bin/python -m pytest" in head
    # CI runs the README's test command.
    assert ".venv/bin/python -m pytest" in (REPO / ".ci" / "run").read_text()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_and_named_paths_exist(page):
    text = page.read_text()
    missing = []
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" in target or target.startswith("mailto:"):
            continue
        if not (page.parent / target).exists() and (page.parent / target) not in GENERATED:
            missing.append(f"link {target}")
    for path in PATH_IN_CODE.findall(text):
        path = path.rstrip(".,;:)")
        if any(c in path for c in "<>*{}$…") or "..." in path:
            continue  # a pattern, not a file
        if not (REPO / path).exists():
            missing.append(f"`{path}`")
    assert not missing, f"{page.relative_to(REPO)} names what does not exist: {missing}"


def test_every_docs_page_is_in_the_navigation():
    nav = (REPO / "mkdocs.yml").read_text()
    listed = set(re.findall(r":\s*([\w.-]+\.md)\s*$", nav, re.M))
    assert {p.name for p in DOCS} <= listed, {p.name for p in DOCS} - listed
    assert "configuration.md" in listed  # generated at build time by docs/hooks/config_reference.py


def test_configuration_reference_lists_every_study_key():
    page = subprocess.run(
        [str(REPO / ".venv" / "bin" / "python"), str(REPO / "docs" / "hooks" / "config_reference.py")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for key in ("study", "matrix.framework", "matrix.batch_size", "defaults", "platform.device", "imports"):
        assert f"| `{key}` |" in page, key
    for definition in ("settings", "runner", "selector"):
        assert f"### {definition}" in page, definition
