"""Text to token ids: the WordPiece vocabulary, the documents of the input files (streamed), and a tokenizer that
encodes each distinct word once (HF tokenizers' full BertWordPieceTokenizer pipeline, which never looks across
whitespace, so the ids of a line are its words' ids concatenated)."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import operator
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from .params import InputError


@dataclasses.dataclass
class Vocab:
    path: Path
    size: int
    cls_id: int
    sep_id: int
    mask_id: int
    continuation: np.ndarray  # bool per id: a "##" piece (whole-word masking groups it with the previous)
    sha256: str


def load_vocab(path: Path) -> Vocab:
    try:
        data = path.read_bytes()
        words = data.decode("utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the vocabulary ({exc})") from exc
    if words and words[-1] == "":
        words.pop()
    if b"\r" in data:
        words = [w.rstrip("\r") for w in words]
    present = set(words)
    missing = [t for t in ("[CLS]", "[SEP]", "[MASK]", "[UNK]") if t not in present]
    if missing:
        raise InputError(f"{path}: not a BERT WordPiece vocabulary (no {', '.join(missing)} among {len(words)} lines)")
    # "##" pieces, found on the raw bytes: line starts followed by "##"
    raw = np.frombuffer(data + b"\n\0\0", np.uint8)
    starts = np.concatenate(([0], np.flatnonzero(raw[:len(data)] == 10) + 1))[:len(words)]
    continuation = (raw[starts] == 35) & (raw[starts + 1] == 35)
    return Vocab(path, len(words), words.index("[CLS]"), words.index("[SEP]"), words.index("[MASK]"), continuation,
                 hashlib.sha256(data).hexdigest())


# Characters Python's str.split() treats as whitespace but BERT's clean_text deletes (controls): removing them
# first makes "split on whitespace, tokenise each word" equal to tokenising the whole line.
# \0 (deleted by BERT too) is removed so that it can mark line ends in a batch of words.
_SPLIT_ONLY_WS = re.compile("[\x00\x0b\x0c\x1c\x1d\x1e\x1f\x85]")
_LINE_END = "\x00"
_ASCII_PUNCT = re.compile(r"([!-/:-@\[-`{-~])")


class WordTokenizer:
    """HF BertWordPieceTokenizer applied once per distinct word, with a bounded word -> ids cache.

    BERT's normaliser and pre-tokeniser act within whitespace-separated words (cleaning, accents, lower case,
    punctuation splits), so the ids of a line are the concatenated ids of its words; encoding each distinct
    word once (one pretokenised call per batch) saves most of the tokeniser's work on real text."""

    def __init__(self, vocab: Path, lower_case: bool, cache_words: int = 1 << 19) -> None:
        from tokenizers import BertWordPieceTokenizer
        self.tokenizer = BertWordPieceTokenizer(str(vocab), lowercase=lower_case)
        self.lower_case = lower_case
        self.cache_words = cache_words
        self.seed_words, self.seed_ids = _whole_vocabulary_words(vocab, lower_case)
        self._reset()

    def _reset(self) -> None:
        # word 0 marks a line end and has no ids; words 1..n are the vocabulary's own (one id each)
        self.index: dict[str, int] = {_LINE_END: 0}
        self.index.update(zip(self.seed_words, range(1, len(self.seed_words) + 1), strict=True))
        # word i's ids are store[starts[i]:starts[i + 1]]; both grow by doubling (amortised appends)
        n = len(self.seed_ids)
        self.starts = np.zeros(max(1 << 12, n + 2), np.int64)
        self.starts[2:n + 2] = np.arange(1, n + 1)
        self.store = np.zeros(max(1 << 14, n), np.int32)
        self.store[:n] = self.seed_ids
        self.stored = n

    @staticmethod
    def _fit(array: np.ndarray, size: int) -> np.ndarray:
        if size <= len(array):
            return array
        grown = np.zeros(max(size, 2 * len(array)), array.dtype)
        grown[:len(array)] = array
        return grown

    def encode_lines(self, docs: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(all ids concatenated, ids per line) for documents from iter_documents (lines joined by "\\n", no \\0
        left in them)."""
        sep = f" {_LINE_END} "
        text = sep.join(docs).replace("\n", sep) + sep
        if self.lower_case:
            text = text.encode().lower().decode()  # ASCII letters only, as BERT's normaliser would
        # BERT's pre-tokeniser isolates every punctuation character; isolating the ASCII ones here leaves
        # fewer distinct words for the tokenizer, with the same ids
        # (re.split keeps the punctuation, in C; sub with a group template calls Python per match)
        words = " ".join(_ASCII_PUNCT.split(text)).split()  # one split for the batch; line ends are words too
        distinct = set(words)
        new = distinct.difference(self.index)
        if len(self.index) + len(new) > self.cache_words:
            self._reset()  # bounded memory: forget the cache rather than grow with the corpus' vocabulary
            new = distinct.difference(self.index)
        index = self.index
        new = list(new)
        if new:
            enc = self.tokenizer.encode(new, is_pretokenized=True, add_special_tokens=False)
            ids = np.asarray(enc.ids, np.int32)
            counts = np.bincount(np.asarray(enc.word_ids, np.int64), minlength=len(new)) if len(ids) else \
                np.zeros(len(new), np.int64)
            base = len(index)
            index.update(zip(new, range(base, base + len(new)), strict=True))
            self.starts = self._fit(self.starts, base + len(new) + 1)
            self.starts[base + 1:base + len(new) + 1] = self.stored + np.cumsum(counts)
            self.store = self._fit(self.store, self.stored + len(ids))
            self.store[self.stored:self.stored + len(ids)] = ids
            self.stored += len(ids)
        widx = np.array(operator.itemgetter(*words)(index), np.int64).reshape(-1)  # one C loop of lookups
        wstart = self.starts[widx]
        wlen = self.starts[widx + 1] - wstart
        ends = np.cumsum(wlen)
        # gather each word's ids: source offset of output position p = wstart[w] + (p - first output of w)
        src = np.repeat(wstart - (ends - wlen), wlen) + np.arange(int(ends[-1]))
        line_ends = ends[widx == 0]
        return self.store[src], np.diff(line_ends, prepend=0)


def _whole_vocabulary_words(vocab: Path, lower_case: bool) -> tuple[list[str], np.ndarray]:
    """Vocabulary entries that the tokenizer maps to themselves: letters and digits only (no normaliser or
    pre-tokeniser change, lower case when lower-casing) are one WordPiece, their own id (longest match first
    takes the whole word). Seeding the word cache with them leaves the tokenizer the rarer words only."""
    words = vocab.read_text(encoding="utf-8").replace("\r", "").split("\n")
    ids = dict(zip(words, range(len(words)), strict=True))
    simple = list(filter(re.compile("[a-z0-9]+" if lower_case else "[A-Za-z0-9]+").fullmatch, words))
    if len(ids) != len(words):  # a repeated entry: let the tokenizer decide
        counts = collections.Counter(words)
        simple = [w for w in simple if counts[w] == 1]
    return simple, np.fromiter(map(ids.__getitem__, simple), np.int32, len(simple))


_BLANK_LINES = re.compile(r"\n(?:[^\S\n]*\n)+")  # a line end followed by lines of whitespace only


def iter_documents(paths: list[Path], chunk_chars: int = 1 << 20) -> Iterator[str]:
    """Documents of the input files, streamed, each as its non-blank lines joined by "\\n" (split only for the
    documents a process tokenises); a blank line (whitespace only, as str.strip sees it) or a file's end ends a
    document. Bytes that are not UTF-8 become U+FFFD (which the tokenizer drops)."""
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace", newline="") as f:
                pending = ""  # the last document seen, which may go on in the next chunk
                while chunk := f.read(chunk_chars):
                    blocks = _BLANK_LINES.split(pending + _SPLIT_ONLY_WS.sub("", chunk))
                    pending = blocks.pop()
                    for block in blocks:
                        if block := block.strip():
                            yield block
                if pending := pending.strip():
                    yield pending
        except OSError as exc:
            raise InputError(f"{path}: cannot read ({exc})") from exc


def token_dtype(vocab: Vocab) -> np.dtype:
    return np.dtype("<u2" if vocab.size <= 1 << 16 else "<i4")

