"""Render every benchmark results file (benchmarks/results/*.json, written by the scripts through resultfile.py)
into the docs, between the markers `<!-- figures:<stem> -->` and `<!-- /figures:<stem> -->`.

    .venv/bin/python benchmarks/figures.py           # rewrite the blocks in the docs (DOCS below)
    .venv/bin/python benchmarks/figures.py --check   # exit 1 if any block differs from its results file

A results file without a block anywhere gets one appended to benchmarks/README.md; a block without a results
file is an error. So the figures in the docs are the scripts' output, never typed in by hand.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = ("benchmarks/README.md", "docs/development.md")
BLOCK = re.compile(r"<!-- figures:(?P<stem>[\w.-]+) -->\n.*?<!-- /figures:(?P=stem) -->", re.S)


def cell(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,}"  # as the script rounded it
    return str(value).replace("|", "\\|").replace("\n", " ")


def render(stem: str, result: dict) -> str:
    """One results file as markdown: where and when it was measured, how to reproduce it, its tables, notes."""
    m = result["machine"]
    before, after = result["load"]
    lines = [
        f"<!-- figures:{stem} -->",
        f"*`{result['script']}`, {result['date'].replace('T', ' ').replace('+00:00', ' UTC')}; {m['cpu']}, "
        f"{m['cores']} cores, {m['memory_gib']} GiB, GPU: {m['gpu']}; 1-min load {cell(before)} before, "
        f"{cell(after)} after. Generated from `benchmarks/results/{stem}.json`: do not edit by hand.*",
        "",
        "```bash",
        result["command"],
        "```",
    ]
    for t in result["tables"]:
        lines += [
            "",
            f"**{t['title']}**",
            "",
            "| " + " | ".join(t["columns"]) + " |",
            "| " + " | ".join("---" for _ in t["columns"]) + " |",
        ]
        lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in t["rows"]]
    if result["notes"]:
        lines.append("")
        lines += [f"- {note}" for note in result["notes"]]
    lines.append(f"<!-- /figures:{stem} -->")
    return "\n".join(lines)


def results(root: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((root / "benchmarks" / "results").glob("*.json"))}


def regenerate(root: Path) -> tuple[dict[str, str], list[str]]:
    """The docs as they should be (path -> text, only those that exist) and the errors found."""
    found = results(root)
    texts = {doc: (root / doc).read_text() for doc in DOCS if (root / doc).exists()}
    shown: set[str] = set()
    errors: list[str] = []

    def fill(match: re.Match) -> str:
        stem = match["stem"]
        if stem not in found:
            errors.append(f"a figures block for {stem!r} but no benchmarks/results/{stem}.json")
            return match[0]
        shown.add(stem)
        return render(stem, found[stem])

    texts = {doc: BLOCK.sub(fill, text) for doc, text in texts.items()}
    missing = [stem for stem in found if stem not in shown]
    if missing and DOCS[0] in texts:
        texts[DOCS[0]] = (
            texts[DOCS[0]].rstrip("\n") + "\n" + "".join(f"\n{render(stem, found[stem])}\n" for stem in missing)
        )
    return texts, errors


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="exit 1 if the docs differ from the results files")
    p.add_argument("--root", type=Path, default=REPO, help="the checkout (default: this one)")
    args = p.parse_args(argv)
    texts, errors = regenerate(args.root)
    stale = [doc for doc, text in texts.items() if (args.root / doc).read_text() != text]
    for error in errors:
        print(f"figures: {error}", file=sys.stderr)
    if args.check:
        for doc in stale:
            print(f"figures: {doc} differs from benchmarks/results/ (run benchmarks/figures.py)", file=sys.stderr)
        return 1 if stale or errors else 0
    for doc in stale:
        (args.root / doc).write_text(texts[doc])
        print(f"figures: rewrote {doc}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
