"""Text to token ids: the WordPiece vocabulary, the documents of the input files (streamed), and a tokenizer that
encodes each distinct word once (the ids of HF tokenizers' full BertWordPieceTokenizer pipeline, which never
looks across whitespace, so the ids of a line are its words' ids concatenated)"""

from __future__ import annotations

import dataclasses
import hashlib
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
    # word -> id as HF's WordPiece reads the file (a line's trailing whitespace dropped; a repeated entry: its last
    # line). Built once here, by the main process: the workers inherit it (each built its own, ~12 ms)
    ids: dict[str, int]


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
    ids = dict(zip([w.rstrip() for w in words], range(len(words)), strict=True))
    ids.pop("", None)
    missing = [t for t in ("[CLS]", "[SEP]", "[MASK]", "[UNK]") if t not in ids]
    if missing:
        raise InputError(f"{path}: not a BERT WordPiece vocabulary (no {', '.join(missing)} among {len(words)} lines)")
    # "##" pieces, found on the raw bytes: line starts followed by "##"
    raw = np.frombuffer(data + b"\n\0\0", np.uint8)
    starts = np.concatenate(([0], np.flatnonzero(raw[: len(data)] == 10) + 1))[: len(words)]
    continuation = (raw[starts] == 35) & (raw[starts + 1] == 35)
    return Vocab(
        path, len(words), ids["[CLS]"], ids["[SEP]"], ids["[MASK]"], continuation, hashlib.sha256(data).hexdigest(), ids
    )


# Characters Python's str.split() treats as whitespace but BERT's clean_text deletes (controls): removing them
# first makes "split on whitespace, tokenise each word" equal to tokenising the whole line. (\0 too.)
_SPLIT_ONLY = "\x00\x0b\x0c\x1c\x1d\x1e\x1f\x85"
_SPLIT_ONLY_WS = re.compile(f"[{_SPLIT_ONLY}]")


def _drop_split_only(text: str) -> str:
    """text without the _SPLIT_ONLY characters. Looking for each (str's own search) first: a fifth of the
    time of the regular expression's scan on text that has none (2.5 vs 11.8 ms on the 1x input)."""
    return _SPLIT_ONLY_WS.sub("", text) if any(c in text for c in _SPLIT_ONLY) else text


# The bytes of a batch's UTF-8 text by kind (every byte of a multi-byte character is >= 0x80, so the ASCII
# kinds never cut one): word bytes; whitespace; ASCII punctuation (BERT's pre-tokeniser isolates every
# punctuation character; isolating the ASCII ones here leaves fewer distinct words for the tokenizer, with the
# same ids); and lead bytes that may start one of the non-ASCII characters that both str.split() and HF's
# normaliser take for whitespace (U+0085 is gone already), checked in full where they occur.
_WORD, _SPACE, _PUNCT, _LEAD = 0, 1, 2, 3
_UNICODE_SPACES = [
    chr(c).encode() for c in (0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000)
]
_KIND = bytearray(256)  # a bytes.translate table: byte -> its kind
for _c in b"\t\n\v\f\r ":
    _KIND[_c] = _SPACE
for _c in range(33, 127):
    if not chr(_c).isalnum():
        _KIND[_c] = _PUNCT
for _s in _UNICODE_SPACES:
    _KIND[_s[0]] = _LEAD
# a multi-byte space as an int: its bytes, big endian
_UNICODE_SPACE_CODES = {n: np.array([int.from_bytes(s, "big") for s in _UNICODE_SPACES if len(s) == n]) for n in (2, 3)}
# the low k bytes of a uint64, k = 0..8
_LOW_BYTES = np.array([(1 << (8 * k)) - 1 for k in range(9)], np.uint64)
_MIX = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F], np.uint64)  # odd constants: spread the keys' bits


def split_words(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the words of UTF-8 text, as str.split() after isolating ASCII punctuation would give
    them (a word: a punctuation character, or a run of other non-space characters), found on the bytes."""
    kind = np.frombuffer(bytearray(data.translate(_KIND)), np.uint8)
    lead = np.flatnonzero(kind == _LEAD)
    if len(lead):  # rare: mark the multi-byte spaces (lead bytes of other characters are word bytes)
        kind[lead] = _WORD
        b = np.frombuffer(data + bytes(2), np.uint8)  # a lead byte's next two are always there
        code2 = b[lead].astype(np.int64) << 8 | b[lead + 1]
        code3 = code2 << 8 | b[lead + 2]
        for n, code in ((2, code2), (3, code3)):
            # (np.isin would import numpy.ma: ~9 ms in each worker process, for a handful of codes)
            at = lead[(code[:, None] == _UNICODE_SPACE_CODES[n][None, :]).any(axis=1)]
            for k in range(n):
                kind[at + k] = _SPACE
    word, punct = kind == _WORD, kind == _PUNCT
    first = np.empty(len(kind), bool)  # first byte of a run of word bytes, or punctuation
    first[:1] = word[:1]
    np.greater(word[1:], word[:-1], out=first[1:])
    last = np.empty(len(kind), bool)  # last byte of a run, or punctuation
    last[-1:] = word[-1:]
    np.greater(word[:-1], word[1:], out=last[:-1])
    return np.flatnonzero(first | punct), np.flatnonzero(last | punct) + 1


def group_words(data: bytes, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Equal words of `data` together without a Python object per word: (group of each word, one word of each
    group). Words are keyed by their first and last 8 bytes and their length (the whole word up to 16 bytes);
    a word that differs from its group's word (a key collision, or a longer word differing in the middle)
    becomes a group of its own: the groups are exact."""
    n = len(starts)
    lens = ends - starts
    at = np.ndarray((len(data),), "<u8", data + bytes(8), 0, (1,))  # at[i]: bytes i..i+7 (unaligned view)
    head = at[starts] & _LOW_BYTES[np.minimum(lens, 8)]
    tail = np.where(lens > 8, at[np.maximum(ends - 8, 0)], np.uint64(0))
    # the key in the high bits, the word's index in the low ones: one plain sort (several times faster than
    # argsort) orders the words by key and says where each one was
    shift = np.uint64(max(n.bit_length(), 1))
    key = head * _MIX[0] ^ tail * _MIX[1] ^ lens.astype(np.uint64)
    ordered = np.sort(key >> shift << shift | np.arange(n, dtype=np.uint64))
    order = (ordered & ((np.uint64(1) << shift) - np.uint64(1))).astype(np.int64)
    ordered >>= shift
    new = np.empty(n, bool)
    new[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    first = order[new]
    group = np.empty(n, np.int64)
    group[order] = np.cumsum(new) - 1
    rep = first[group]
    same = (head == head[rep]) & (tail == tail[rep]) & (lens == lens[rep])
    for w in np.flatnonzero(same & (lens > 16) & (rep != np.arange(n))).tolist():
        same[w] = data[starts[w] : ends[w]] == data[starts[rep[w]] : ends[rep[w]]]
    odd = np.flatnonzero(~same)
    group[odd] = len(first) + np.arange(len(odd))
    return group, np.concatenate([first, odd])


class WordTokenizer:
    """HF BertWordPieceTokenizer applied once per distinct word, with a bounded word -> ids cache.

    BERT's normaliser and pre-tokeniser act within whitespace-separated words (cleaning, accents, lower case,
    punctuation splits), so the ids of a line are the concatenated ids of its words, and each distinct word
    needs tokenising once. A batch's words are found and grouped with numpy on its bytes (split_words,
    group_words): Python sees one string per distinct word of the batch, not one per word. Words of ASCII
    letters and digits, which the normaliser and pre-tokeniser leave as they are, go straight to the tokenizer's
    WordPiece model (a vocabulary entry: one dict look-up); the others to the tokenizer's whole pipeline, in one
    pretokenised call per batch."""

    def __init__(self, vocab: Vocab, lower_case: bool, cache_words: int = 1 << 19) -> None:
        from tokenizers import BertWordPieceTokenizer

        self.tokenizer = BertWordPieceTokenizer(str(vocab.path), lowercase=lower_case)
        self.model = self.tokenizer.model
        self.vocab = vocab.ids  # the model's vocabulary: a word that is an entry is one dict look-up
        self.lower_case = lower_case
        self.cache_words = cache_words
        self._reset()

    def _reset(self) -> None:
        self.index: dict[str, int] = {}
        # word i's ids are store[starts[i]:starts[i + 1]]; both grow by doubling (amortised appends)
        self.starts = np.zeros(1 << 12, np.int64)
        self.store = np.zeros(1 << 14, np.int32)
        self.stored = 0

    @staticmethod
    def _fit(array: np.ndarray, size: int) -> np.ndarray:
        if size <= len(array):
            return array
        grown = np.zeros(max(size, 2 * len(array)), array.dtype)
        grown[: len(array)] = array
        return grown

    def _tokenize(self, words: set[str]) -> tuple[list[str], list[int], list[int]]:
        """(the words in the order of the ids, ids of all the words, ids per word). Words of ASCII letters and
        digits: a vocabulary entry by one look-up, any other by the WordPiece model alone (the normaliser and
        pre-tokeniser would leave it as it is): half the time of the greedy longest match written in Python
        (the 30,047 distinct words of the 1x input: 26 ms against 72). The other words: the whole pipeline."""
        get, tokenize = self.vocab.get, self.model.tokenize
        simple: list[str] = []
        others: list[str] = []
        ids: list[int] = []
        counts: list[int] = []
        for w in words:  # one loop, not one comprehension per step: a quarter less time
            if w.isascii() and w.isalnum():
                simple.append(w)
                i = get(w)
                if i is not None:
                    ids.append(i)
                    counts.append(1)
                else:
                    pieces = [t.id for t in tokenize(w)]
                    ids += pieces
                    counts.append(len(pieces))
            else:
                others.append(w)
        if others:
            enc = self.tokenizer.encode(others, is_pretokenized=True, add_special_tokens=False)
            ids += enc.ids
            counts += (
                np.bincount(np.asarray(enc.word_ids, np.int64), minlength=len(others)).tolist()
                if enc.ids
                else [0] * len(others)
            )
        return simple + others, ids, counts

    def _word_indices(self, words: list[str]) -> np.ndarray:
        """The cache's index of each word, tokenising the words it does not hold."""
        new = set(words).difference(self.index)
        if len(self.index) + len(new) > self.cache_words:
            self._reset()  # bounded memory: forget the cache rather than grow with the corpus' vocabulary
            new = set(words)
        if new:
            new_words, ids, counts = self._tokenize(new)
            base = len(self.index)
            self.index.update(zip(new_words, range(base, base + len(new_words)), strict=True))
            self.starts = self._fit(self.starts, base + len(new_words) + 1)
            self.starts[base + 1 : base + len(new_words) + 1] = self.stored + np.cumsum(counts)
            self.store = self._fit(self.store, self.stored + len(ids))
            self.store[self.stored : self.stored + len(ids)] = ids
            self.stored += len(ids)
        return np.fromiter(map(self.index.__getitem__, words), np.int64, len(words))

    def encode_lines(self, docs: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(all ids concatenated, ids per line) for documents from iter_documents (lines joined by "\\n")."""
        data = ("\n".join(docs) + "\n").encode()
        if self.lower_case:
            data = data.lower()  # ASCII letters only, as BERT's normaliser would (it does the others)
        starts, ends = split_words(data)
        group, reps = group_words(data, starts, ends)
        words = [data[s:e].decode() for s, e in zip(starts[reps].tolist(), ends[reps].tolist(), strict=True)]
        widx = self._word_indices(words)[group]
        wstart = self.starts[widx]
        wlen = self.starts[widx + 1] - wstart
        cum = np.concatenate(([0], np.cumsum(wlen)))
        # gather each word's ids: source offset of output position p = wstart[w] + (p - first output of w)
        src = np.repeat(wstart - cum[:-1], wlen) + np.arange(int(cum[-1]))
        line_ends = cum[np.searchsorted(starts, np.flatnonzero(np.frombuffer(data, np.uint8) == 10))]
        return self.store[src], np.diff(line_ends, prepend=0)


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
                    blocks = _BLANK_LINES.split(pending + _drop_split_only(chunk))
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
