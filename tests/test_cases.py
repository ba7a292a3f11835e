"""The named end-to-end cases under .test/ (as the Snakemake catalog's workflows keep theirs: config_basic, ...):
each a study a user can run as it stands, and each run to its report by a test of the suite.

    .venv/bin/snakemake --cores all --configfile .test/config_<name>/config.yaml
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import CASES_DIR, REPO, planned_jobs

CASES = sorted(path.parent.name.removeprefix("config_") for path in CASES_DIR.glob("config_*/config.yaml"))
# the tests that run a case end to end name it: case_config("<name>"), or tiny_config() for the basic case
NAMED = re.compile(r"""case_config\(\s*["'](\w+)["']""")


def cases_run_by_tests() -> set[str]:
    texts = [path.read_text() for path in (REPO / "tests").glob("test_*.py")]
    return {name for text in texts for name in NAMED.findall(text)} | {"basic" for t in texts if "tiny_config(" in t}


def test_there_are_cases_and_each_is_run_by_a_test():
    assert "basic" in CASES and len(CASES) >= 3
    assert set(CASES) <= cases_run_by_tests(), f"no test runs {sorted(set(CASES) - cases_run_by_tests())}"


@pytest.mark.parametrize("name", CASES)
def test_a_case_says_how_to_run_it_and_plans_its_runs(name, tmp_path):
    """Each case's file says what it shows and the command that runs it; a dry run from a fresh directory plans
    its runs (every path in it is relative to the repository, as the command is typed there)."""
    path = CASES_DIR / f"config_{name}" / "config.yaml"
    text = path.read_text()
    assert text.startswith("# ") and f"--configfile .test/config_{name}/config.yaml" in text
    config = tmp_path / "config.yaml"
    config.write_text(text.replace("venv_dir: .venvs", f"venv_dir: {REPO / '.venvs'}"))
    runs = [job for job in planned_jobs(tmp_path, config) if job[0] == "benchmark_run"]
    assert runs, f"{Path(path).relative_to(REPO)} plans no run"
