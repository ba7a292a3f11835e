"""Wikipedia XML dump (.xml.bz2 / .xml) -> plain text for BERT: one sentence per line, a blank line between
documents (the input format of google-research/bert create_pretraining_data.py and of bert_shards).

Streaming: the dump is read with ElementTree.iterparse page by page (memory independent of the dump's size);
the markup of each article is stripped with mwparserfromhell in worker processes, a bounded number of pages
in flight, and written in dump order (the output does not depend on --workers).

Kept: article prose (namespace 0, not a redirect). Dropped, as WikiExtractor does by default for BERT corpora:
templates, tables, references, galleries, math, comments, file/image/category/interlanguage links, headings,
list items and the trailing sections (See also, References, External links, ...).

    python -m dlbench.dataprep.wikitext --input enwiki.xml.bz2 --output wiki.txt [--workers N]
"""

from __future__ import annotations

import argparse
import bz2
import collections
import gzip
import io
import json
import multiprocessing
import os
import re
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import mwparserfromhell
from mwparserfromhell.nodes import Argument, Comment, ExternalLink, Heading, HTMLEntity, Tag, Template, Text, Wikilink

# Sections after which an article holds no prose worth training on.
END_SECTIONS = frozenset(
    {
        "see also",
        "references",
        "external links",
        "further reading",
        "notes",
        "bibliography",
        "sources",
        "footnotes",
        "citations",
        "notes and references",
        "works cited",
        "literature",
        "publications",
        "discography",
        "filmography",
        "selected works",
    }
)
# Tags whose contents are not prose (tables, references, formulas, code...).
DROPPED_TAGS = frozenset(
    {
        "ref",
        "references",
        "gallery",
        "math",
        "chem",
        "ce",
        "score",
        "timeline",
        "imagemap",
        "table",
        "tr",
        "td",
        "th",
        "caption",
        "syntaxhighlight",
        "source",
        "pre",
        "code",
        "nowiki",
        "templatedata",
        "graph",
        "hiero",
        "mapframe",
        "maplink",
        "poem",
        "inputbox",
        "categorytree",
        "div",
        "noinclude",
        "includeonly",
        "onlyinclude",
    }
)
LIST_TAGS = frozenset({"li", "dt", "dd"})
# Links whose target is not text (images, categories); other prefixed links keep their displayed text.
LINK_PREFIXES = ("file:", "image:", "category:", "media:")
_INTERWIKI = re.compile(r"^:?[a-z]{2,3}(-[a-z]+)?:")
_LIST_MARK = "\x00"  # put on a line that is a list item; such lines are dropped


# ----------------------------------------------------------------------------- sentence splitting
ABBREVIATIONS = frozenset(
    """mr mrs ms dr prof sr jr st mt ft no nos vol vols pp p fig figs al e.g i.e eg ie vs v ca
c approx inc ltd co corp gen col lt sgt capt cmdr adm gov sen rep rev hon pres jan feb apr jun jul aug sep sept oct nov
dec op ed eds est dept univ assn bros ch cf viz ibid ph.d u.s u.k u.n d.c a.d b.c mssrs messrs sq lb oz""".split()
)
# A sentence ends at ./!/? (plus closing quotes/brackets) followed by space and a capital, digit or opening quote.
_BOUNDARY = re.compile(r"([.!?]+[\"'\u201d\u2019)\]]*)\s+(?=[\"'\u201c\u2018(\[]?[A-Z0-9\u00c0-\u00de])")
_WORD_BEFORE = re.compile(r"(\S+)$")
_SPACES = re.compile(r"\s+")


def split_sentences(paragraph: str) -> list[str]:
    """Rule-based splitter: boundaries at terminal punctuation, except after known abbreviations, initials
    ("J. R. R. Tolkien") and dotted acronyms ("U.S.")."""
    paragraph = _SPACES.sub(" ", paragraph).strip()
    sentences, start = [], 0
    for m in _BOUNDARY.finditer(paragraph):
        punct = m.group(1)
        if punct[0] == "." and len(punct.rstrip("\"'\u201d\u2019)]")) == 1:
            before = _WORD_BEFORE.search(paragraph, start, m.start())
            word = before.group(1).lstrip("\"'(\u201c\u2018[").lower() if before else ""
            if (
                word in ABBREVIATIONS
                or (len(word) == 1 and word.isalpha())
                or ("." in word and all(len(p) <= 2 for p in word.split(".")))
            ):
                continue
        sentences.append(paragraph[start : m.end(1)])
        start = m.end()
    if start < len(paragraph):
        sentences.append(paragraph[start:])
    return [s for s in sentences if any(ch.isalnum() for ch in s)]


# ----------------------------------------------------------------------------- markup
def _strip(nodes: list, out: list[str]) -> bool:
    """Append the prose of `nodes` to out; False once an end section (See also, References...) starts."""
    for node in nodes:
        if isinstance(node, Text):
            out.append(node.value)
        elif isinstance(node, Wikilink):
            title = str(node.title).strip().lower()
            if title.startswith(LINK_PREFIXES):
                continue
            if node.text is not None:
                _strip(node.text.nodes, out)
            elif not _INTERWIKI.match(title):  # [[de:Anarchismus]]: a language link, not text
                _strip(node.title.nodes, out)
        elif isinstance(node, Heading):
            if str(node.title.strip_code()).strip().lower() in END_SECTIONS:
                return False
            out.append("\n")  # the heading itself is not a sentence
        elif isinstance(node, Tag):
            tag = str(node.tag).strip().lower()
            if tag in LIST_TAGS:
                out.append(_LIST_MARK)
            elif tag == "br":
                out.append(" ")
            elif tag not in DROPPED_TAGS and node.contents is not None and not node.self_closing:
                _strip(node.contents.nodes, out)
        elif isinstance(node, HTMLEntity):
            out.append(node.normalize())
        elif isinstance(node, ExternalLink):
            if node.brackets and node.title is not None:
                _strip(node.title.nodes, out)
        elif isinstance(node, (Template, Comment, Argument)):
            continue
    return True


_MAGIC = re.compile(r"__[A-Z]+__")
_EMPTY_BRACKETS = re.compile(r"\(\s*[,;]?\s*\)")
_SPACE_BEFORE_PUNCT = re.compile(r" +([,.;:])")


def article_sentences(wikitext: str) -> list[str]:
    """The sentences of one article's wikitext (markup stripped), in order."""
    out: list[str] = []
    _strip(mwparserfromhell.parse(wikitext, skip_style_tags=True).nodes, out)
    text = _MAGIC.sub("", "".join(out)).replace("'''", "").replace("''", "")
    sentences: list[str] = []
    for line in text.split("\n"):
        line = line.strip()
        if not line or _LIST_MARK in line or line[0] in "|{}!=<[:;*#":
            continue  # list items, leftovers of broken tables/templates
        line = _SPACE_BEFORE_PUNCT.sub(r"\1", _EMPTY_BRACKETS.sub("", line))
        sentences.extend(split_sentences(line))
    return sentences


# ----------------------------------------------------------------------------- the dump
class DumpError(ValueError):
    pass


def open_dump(path: Path) -> io.BufferedIOBase:
    if path.suffix == ".bz2":
        return bz2.open(path, "rb")
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return open(path, "rb")  # noqa: SIM115 - closed by the caller


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def iter_pages(path: Path, counts: collections.Counter) -> Iterator[tuple[str, str]]:
    """(title, wikitext) of every article page: namespace 0 and not a redirect; others only counted."""
    with open_dump(path) as stream:
        try:
            context = ET.iterparse(stream, events=("start", "end"))
            _, root = next(context)
            for event, elem in context:
                if event != "end" or _local(elem.tag) != "page":
                    continue
                counts["pages"] += 1
                fields = {_local(child.tag): child for child in elem}
                revision = fields.get("revision")
                text_elem = None
                if revision is not None:
                    text_elem = next((c for c in revision if _local(c.tag) == "text"), None)
                text = (text_elem.text if text_elem is not None else None) or ""
                ns = (fields["ns"].text or "").strip() if "ns" in fields else "0"
                if ns != "0":
                    counts["skipped_namespace"] += 1
                elif "redirect" in fields or text.lstrip()[:9].upper() == "#REDIRECT":
                    counts["skipped_redirect"] += 1
                else:
                    title = fields["title"].text if "title" in fields else ""
                    yield title or "", text
                root.clear()  # the parsed pages are not kept: memory stays flat over the dump
        except (ET.ParseError, EOFError, OSError) as exc:
            raise DumpError(f"{path}: not a readable MediaWiki XML dump ({exc})") from exc
    if counts["pages"] == 0:
        raise DumpError(f"{path}: no <page> elements (not a MediaWiki XML dump?)")


def _convert_batch(batch: list[tuple[str, str]]) -> list[list[str]]:
    return [article_sentences(text) for _, text in batch]


def _batches(pages: Iterator[tuple[str, str]], size: int) -> Iterator[list[tuple[str, str]]]:
    batch: list[tuple[str, str]] = []
    for page in pages:
        batch.append(page)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def convert(inputs: list[Path], output: Path, workers: int, batch_pages: int = 16) -> dict:
    """Write the text file (atomically: a temporary name renamed when complete); returns counts."""
    counts: collections.Counter = collections.Counter()
    tmp = output.with_name(output.name + ".partial")
    output.parent.mkdir(parents=True, exist_ok=True)
    pool = multiprocessing.get_context("fork").Pool(workers) if workers > 1 else None
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as out:

            def write(docs: list[list[str]]) -> None:
                for sentences in docs:
                    if not sentences:
                        counts["empty_articles"] += 1
                        continue
                    counts["documents"] += 1
                    counts["sentences"] += len(sentences)
                    out.write("\n".join(sentences))
                    out.write("\n\n")

            for path in inputs:
                batches = _batches(iter_pages(path, counts), batch_pages)
                if pool is None:
                    for batch in batches:
                        write(_convert_batch(batch))
                    continue
                # a bounded number of batches in flight: memory does not grow with the dump
                pending: collections.deque = collections.deque()
                for batch in batches:
                    pending.append(pool.apply_async(_convert_batch, (batch,)))
                    if len(pending) >= 4 * workers:
                        write(pending.popleft().get())
                while pending:
                    write(pending.popleft().get())
        os.replace(tmp, output)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        if pool is not None:
            pool.terminate()
    counts["bytes"] = output.stat().st_size
    return dict(counts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dlbench.dataprep.wikitext", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--input",
        type=Path,
        nargs="+",
        required=True,
        help="MediaWiki XML dump(s): .xml.bz2, .xml.gz or .xml (read in the order given)",
    )
    parser.add_argument("--output", type=Path, required=True, help="text file to write (one sentence per line)")
    parser.add_argument(
        "--workers",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="processes stripping markup (default: usable cores)",
    )
    args = parser.parse_args(argv)
    for path in args.input:
        if not path.is_file():
            print(f"wikitext: error: {path}: no such file", file=sys.stderr)
            return 2
    if args.workers < 1:
        print("wikitext: error: --workers must be >= 1", file=sys.stderr)
        return 2
    start = time.perf_counter()
    try:
        counts = convert(args.input, args.output, args.workers)
    except DumpError as exc:
        print(f"wikitext: error: {exc}", file=sys.stderr)
        return 1
    counts["seconds"] = round(time.perf_counter() - start, 3)
    print(json.dumps({"wikitext": str(args.output), **counts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
