"""BERT pretraining shards from plain text: google-research/bert create_pretraining_data.py semantics, streamed.

Input: text files with one sentence per line and a blank line between documents (wikitext.py makes them from
a Wikipedia dump), a WordPiece vocab.txt. Output, under --out:
    tfrecord/<name>-00000-of-NNNNN        Google's features (run_pretraining.py _decode_record)
    hdf5/<name>-00000-of-NNNNN.hdf5       NVIDIA's layout (DeepLearningExamples BERT, gzip)
    manifest.json                         per shard instances, bytes, sha256; the parameters; statistics

Semantics (as create_pretraining_data.py): per document and dupe pass a target length max_seq_length - 3, or
with short_seq_prob a random one in [2, max]; sentences accumulate into chunks up to the target; a chunk
splits into A/B at a random sentence; B is, with probability 1/2 (always for one-sentence chunks), text from
another document (unused sentences go back); the pair is truncated from a random end of the longer side;
[CLS] A [SEP] B [SEP]; num_to_predict = min(P, max(1, round(len * masked_lm_prob))) among the non-special
tokens (whole words with --whole-word-mask), 80% [MASK] / 10% kept / 10% a random vocabulary id; positions
sorted; zero padding; next_sentence_labels 1 = random next.

Differences from the reference. Required by streaming with bounded memory (the reference holds every
instance in memory):
  * documents go to shard (document index mod --shards); each shard is built on its own, with its own
    random stream (seed, shard): output depends on the input, --seed and --shards only (not --workers,
    not --shard-group);
  * the "random next" document is drawn from a window of nearby documents of the same shard (the previous,
    the current and the next block of --random-doc-block documents), not from the whole corpus;
  * the dupe passes run one after the other over each shard, and instances are shuffled in a buffer of
    --shuffle-buffer instances (a full shuffle when the shard has fewer), not globally.
Smaller ones: a document also ends at the end of an input file; with --whole-word-mask a "##" piece right
after [SEP] starts a word of its own (the reference appends it to A's last word); literal "[MASK]"-like text
is split into "[", "mask", "]" as the reference's tokenizer does (HF's would map it to the special id); the
random draws are numpy's (PCG64), the reference's Python's.

Statistics (manifest.json): masked fraction (predictions / tokens, specials included, as num_to_predict),
the 80/10/10 split, the random-next fraction overall (above 50% in the reference too: one-sentence chunks,
frequent with short targets, always take a random next) and for the coin alone, the short-target fraction of
document passes (10%) and of instances.

Speed: words are tokenised once per distinct whitespace-separated word (HF tokenizers, the full
BertWordPieceTokenizer pipeline on each word, which is what it does to a line: its normaliser and
pre-tokeniser never look across whitespace), instances are built with numpy over batches (gathers,
truncation in closed form, masking, padding) and Example records are encoded for a whole batch at once.
Parallel over processes: phase 1, each process reads the input and tokenises every n-th batch of lines into
spill files (one per process and shard, with document indices); phase 2, one task per shard (largest
first) merges its spill files in document order and builds the shard.
"""

from __future__ import annotations

import argparse
import bisect
import concurrent.futures
import dataclasses
import functools
import hashlib
import heapq
import json
import multiprocessing
import operator
import os
import re
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import google_crc32c
import numpy as np

MANIFEST_FORMAT = "dlbench-bert-shards/1"
INT_FEATURES_L = ("input_ids", "input_mask", "segment_ids")
INT_FEATURES_P = ("masked_lm_positions", "masked_lm_ids")
HDF5_DTYPES = {"input_ids": "i4", "input_mask": "i1", "segment_ids": "i1", "masked_lm_positions": "i4",
               "masked_lm_ids": "i4", "next_sentence_labels": "i1"}
STAT_KEYS = ("documents", "sentences", "document_tokens", "document_passes", "short_target_passes",
             "instances", "short_target_instances", "truncated_instances", "tokens", "predictions",
             "mask_token", "kept", "random_token", "random_next", "forced_random_next")
_MASK32 = 0xFFFFFFFF


class InputError(ValueError):
    """Bad input or arguments: the message names the file and what is wrong (no traceback)."""


@dataclasses.dataclass(frozen=True)
class Params:
    max_seq_length: int = 128
    max_predictions: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    dupe_factor: int = 10
    seed: int = 12345
    do_lower_case: bool = True
    whole_word_mask: bool = False
    shards: int = 8
    formats: tuple[str, ...] = ("tfrecord", "hdf5")
    name: str = "pretraining"
    random_doc_block: int = 512
    shuffle_buffer: int = 10000
    hdf5_gzip_level: int = 4

    def manifest(self) -> dict:
        out = dataclasses.asdict(self)
        out["formats"] = list(self.formats)
        return out


# ----------------------------------------------------------------------------- vocabulary and tokenisation
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
        self._reset()

    def _reset(self) -> None:
        self.index: dict[str, int] = {_LINE_END: 0}  # word 0 marks a line end and has no ids
        # word i's ids are store[starts[i]:starts[i + 1]]; both grow by doubling (amortised appends)
        self.starts = np.zeros(1 << 12, np.int64)
        self.store = np.zeros(1 << 14, np.int32)
        self.stored = 0

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


# ----------------------------------------------------------------------------- reading documents
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


# ----------------------------------------------------------------------------- phase 1: tokens -> spill files
_DOC_HEADER = np.dtype([("doc", "<i8"), ("sentences", "<i8"), ("tokens", "<i8")])


def spill_path(spill_dir: Path, worker: int, shard: int) -> Path:
    return spill_dir / f"w{worker:03d}-s{shard:05d}.spill"


def tokenize_part(inputs: list[Path], vocab: Vocab, params: Params, shards: list[int], part: int, parts: int,
                  spill_dir: Path, batch_lines: int = 1024, max_open: int = 128) -> dict[int, dict[str, int]]:
    """Phase 1, one of `parts` processes: stream the input; of the documents of `shards`, tokenise every
    parts-th batch of ~batch_lines lines (batches cut at document ends: every process cuts the same) and append
    each document to the spill file (part, shard): [doc index, sentences, tokens][lengths][token ids].
    Which process tokenises a document changes nothing in the output (phase 2 merges by document index)."""
    os.environ.setdefault("RAYON_NUM_THREADS", "1")  # one process per core already
    tokenizer = WordTokenizer(vocab.path, params.do_lower_case)
    dtype = token_dtype(vocab)
    mine = set(shards)
    stats = {s: dict.fromkeys(("documents", "sentences", "document_tokens"), 0) for s in shards}
    files: dict[int, BinaryIO] = {}
    pending: list[tuple[int, str, int]] = []
    pending_lines, batch = 0, 0

    def flush() -> None:
        tokens, lengths = tokenizer.encode_lines([doc for _, doc, _ in pending])
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        first = 0
        for index, _, n_lines in pending:
            shard = index % params.shards
            lens = lengths[first:first + n_lines]
            lo, hi = offsets[first], offsets[first + n_lines]
            first += n_lines
            lens = lens[lens > 0]  # the reference drops lines without tokens, then empty documents
            if lens.size == 0:
                continue
            if shard not in files:
                if len(files) >= max_open:  # bounded open files whatever the shard count
                    for f in files.values():
                        f.close()
                    files.clear()
                files[shard] = open(spill_path(spill_dir, part, shard), "ab")  # noqa: SIM115 - closed below
            f = files[shard]
            f.write(np.array([(index, lens.size, hi - lo)], _DOC_HEADER).tobytes())
            f.write(lens.astype("<i4").tobytes())
            f.write(tokens[lo:hi].astype(dtype).tobytes())
            st = stats[shard]
            st["documents"] += 1
            st["sentences"] += int(lens.size)
            st["document_tokens"] += int(hi - lo)
        pending.clear()

    try:
        for index, doc in enumerate(iter_documents(inputs)):
            if index % params.shards not in mine:
                continue
            n_lines = doc.count("\n") + 1
            if batch % parts == part:
                pending.append((index, doc, n_lines))
            pending_lines += n_lines
            if pending_lines >= batch_lines:
                if pending:
                    flush()
                pending_lines = 0
                batch += 1
        if pending:
            flush()
    finally:
        for f in files.values():
            f.close()
    return stats


def token_dtype(vocab: Vocab) -> np.dtype:
    return np.dtype("<u2" if vocab.size <= 1 << 16 else "<i4")


def _spill_docs(path: Path, dtype: np.dtype) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(doc index, sentence lengths, tokens) of every document in one spill file, in order."""
    if not path.exists():
        return
    with open(path, "rb") as f:
        while header := f.read(_DOC_HEADER.itemsize):
            index, n_sent, n_tok = np.frombuffer(header, _DOC_HEADER)[0].tolist()
            lengths = np.frombuffer(f.read(4 * n_sent), "<i4")
            tokens = np.frombuffer(f.read(dtype.itemsize * n_tok), dtype)
            yield index, lengths, tokens


def spill_blocks(spill_dir: Path, parts: int, shard: int, dtype: np.dtype,
                 docs_per_block: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """A shard's documents in document-index order (merging the phase-1 parts), in blocks:
    (sentences per document, tokens per sentence, tokens as int32)."""
    streams = [_spill_docs(spill_path(spill_dir, p, shard), dtype) for p in range(parts)]
    block: list[tuple[int, np.ndarray, np.ndarray]] = []
    for doc in heapq.merge(*streams, key=lambda d: d[0]):
        block.append(doc)
        if len(block) == docs_per_block:
            yield _block(block)
            block = []
    if block:
        yield _block(block)


def _block(docs: list[tuple[int, np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    counts = np.array([len(d[1]) for d in docs], np.int64)
    return counts, np.concatenate([d[1] for d in docs]), np.concatenate([d[2] for d in docs]).astype(np.int32)


# ----------------------------------------------------------------------------- phase 2: instances
class Uniforms:
    """Uniform [0, 1) floats drawn from the shard's generator in blocks, for the per-instance Python loop
    (which indexes the list itself: cheaper than a call per draw)."""

    def __init__(self, rng: np.random.Generator, block: int = 1 << 14) -> None:
        self.rng, self.block = rng, block
        self.buf: list[float] = []
        self.pos = 0

    def refill(self, pos: int) -> list[float]:
        self.buf = self.buf[pos:] + self.rng.random(self.block).tolist()
        self.pos = 0
        return self.buf


@dataclasses.dataclass
class Batch:
    """Instances ready to write (rows aligned)."""
    input_ids: np.ndarray        # int32 [n, L]
    input_mask: np.ndarray       # int8 [n, L]
    segment_ids: np.ndarray      # int8 [n, L]
    positions: np.ndarray        # int32 [n, P]
    masked_ids: np.ndarray       # int32 [n, P]
    num_predictions: np.ndarray  # int32 [n]
    next_sentence: np.ndarray    # int8 [n]

    def __len__(self) -> int:
        return len(self.next_sentence)

    def take(self, rows: np.ndarray) -> Batch:
        return Batch(*(getattr(self, f.name)[rows] for f in dataclasses.fields(self)))

    @staticmethod
    def concat(batches: list[Batch]) -> Batch:
        return Batch(*(np.concatenate([getattr(b, f.name) for b in batches]) for f in dataclasses.fields(Batch)))


def pair_spans(doc_ranges: list[tuple[int, int]], targets: list[int], pool_docs: list[tuple[int, int]],
               doc_pool_index: list[int], cum: list[int], uniforms: Uniforms) -> list[tuple[int, ...]]:
    """The reference's chunking loop for a block of documents. Per instance: (A start, A length, B start,
    B length, random next: 0 no, 1 by the coin, 2 forced (a one-sentence chunk), document), starts being
    offsets into the pool's token array; `cum` holds the sentence start offsets. At most 4 draws per instance."""
    out: list[tuple[int, ...]] = []
    append, bisect_left = out.append, bisect.bisect_left
    n_other = len(pool_docs) - 1
    U, k = uniforms.buf, uniforms.pos
    limit = len(U) - 4
    for d, ((s0, s1), target, me) in enumerate(zip(doc_ranges, targets, doc_pool_index, strict=True)):
        i = s0
        while i < s1:
            if k > limit:
                U, k = uniforms.refill(k), 0
                limit = len(U) - 4
            ci = cum[i]
            # sentences i..e-1: until their length reaches the target, or the document ends
            e = bisect_left(cum, ci + target, i + 1, s1)
            if e - i < 2:
                a_end, random_next = i + 1, 2  # one sentence: B must come from elsewhere
            else:
                a_end = i + 1 + int(U[k] * (e - i - 1))
                random_next = U[k + 1] < 0.5
                k += 2
            ca = cum[a_end]
            if random_next:
                if n_other:
                    other = int(U[k] * n_other)
                    other += other >= me
                    k += 1
                else:
                    other = me  # a shard with one document: the reference falls back to the same one
                r0, r1 = pool_docs[other]
                start = r0 + int(U[k] * (r1 - r0))
                k += 1
                cs = cum[start]
                end = bisect_left(cum, cs + target - (ca - ci), start + 1, r1)
                append((ci, ca - ci, cs, cum[end] - cs, random_next, d))
                i = a_end  # the chunk's B sentences are used again
            else:
                append((ci, ca - ci, ca, cum[e] - ca, 0, d))
                i = e
    uniforms.buf, uniforms.pos = U, k
    return out


class InstanceMaker:
    """Builds a shard's instances: chunking (Python), truncation, [CLS]/[SEP] layout and masking (numpy)."""

    def __init__(self, params: Params, vocab: Vocab, rng: np.random.Generator, stats: dict[str, int]) -> None:
        self.p, self.vocab, self.rng, self.stats = params, vocab, rng, stats
        self.u = Uniforms(rng)
        self.max_num_tokens = params.max_seq_length - 3
        if self.max_num_tokens < 2:
            raise InputError(f"--max-seq-length {params.max_seq_length} is too small (at least 5)")

    def block(self, pool_counts: np.ndarray, pool_lengths: np.ndarray, pool_tokens: np.ndarray,
              first_doc: int, n_docs: int, batch_size: int = 4096) -> Iterator[Batch]:
        """Instances of documents first_doc..first_doc+n_docs-1 of the pool (one dupe pass), in batches of at
        most batch_size (the numpy work's memory does not depend on how long the documents are)."""
        cum = np.concatenate(([0], np.cumsum(pool_lengths))).tolist()
        sent_bounds = np.concatenate(([0], np.cumsum(pool_counts))).tolist()
        pool_docs = list(zip(sent_bounds[:-1], sent_bounds[1:], strict=True))
        mnt, rng = self.max_num_tokens, self.rng
        short = rng.random(n_docs) < self.p.short_seq_prob
        targets = np.where(short, 2 + (rng.random(n_docs) * (mnt - 1)).astype(np.int64), mnt)
        docs = list(range(first_doc, first_doc + n_docs))
        spans = pair_spans(pool_docs[first_doc:first_doc + n_docs], targets.tolist(), pool_docs, docs, cum,
                           self.u)
        st = self.stats
        st["document_passes"] += n_docs
        st["short_target_passes"] += int(short.sum())
        for lo in range(0, len(spans), batch_size):
            a_lo, a_len, b_lo, b_len, rand_next, doc_of = np.array(spans[lo:lo + batch_size], np.int64).T.copy()
            st["short_target_instances"] += int(short[doc_of].sum())
            self._truncate(a_lo, a_len, b_lo, b_len)
            yield self._layout_and_mask(pool_tokens, a_lo, a_len, b_lo, b_len, rand_next)

    def _truncate(self, a_lo: np.ndarray, a_len: np.ndarray, b_lo: np.ndarray, b_len: np.ndarray) -> None:
        """truncate_seq_pair in closed form: the longer side loses a token (B on ties) until the pair fits;
        each removed token comes from the front or the back with probability 1/2."""
        excess = a_len + b_len - self.max_num_tokens
        cut = excess > 0
        self.stats["truncated_instances"] += int(cut.sum())
        if not cut.any():
            return
        e, d = excess[cut], a_len[cut] - b_len[cut]
        first_a = np.clip(np.minimum(e, d), 0, None)
        first_b = np.clip(np.minimum(e, -d), 0, None)
        rest = e - first_a - first_b  # then alternately, B first (equal lengths)
        ra, rb = first_a + rest // 2, first_b + (rest + 1) // 2
        fa, fb = self.rng.binomial(ra, 0.5), self.rng.binomial(rb, 0.5)
        a_lo[cut] += fa
        a_len[cut] -= ra
        b_lo[cut] += fb
        b_len[cut] -= rb

    def _layout_and_mask(self, tokens: np.ndarray, a_lo: np.ndarray, a_len: np.ndarray, b_lo: np.ndarray,
                         b_len: np.ndarray, rand_next: np.ndarray) -> Batch:
        L, P, V, rng = self.p.max_seq_length, self.p.max_predictions, self.vocab, self.rng
        n = len(a_lo)
        pos = np.arange(L, dtype=np.int64)[None, :]
        la, lb = a_len[:, None], b_len[:, None]
        total = a_len + b_len + 3
        in_a = (pos >= 1) & (pos <= la)
        in_b = (pos >= la + 2) & (pos <= la + lb + 1)
        src = np.where(in_a, a_lo[:, None] + pos - 1, b_lo[:, None] + pos - la - 2)
        cand = in_a | in_b
        ids = np.where(cand, tokens[np.where(cand, src, 0)], 0).astype(np.int32)
        rows = np.arange(n)
        ids[:, 0] = V.cls_id
        ids[rows, a_len + 1] = V.sep_id
        ids[rows, total - 1] = V.sep_id
        input_mask = (pos < total[:, None]).astype(np.int8)
        segment_ids = ((pos >= la + 2) & (pos < total[:, None])).astype(np.int8)

        k = np.minimum(P, np.maximum(1, np.rint(total * self.p.masked_lm_prob).astype(np.int64)))
        k = np.minimum(k, a_len + b_len)  # never more than the candidates (high --masked-lm-prob)
        chosen = self._whole_words(ids, cand, k) if self.p.whole_word_mask else self._tokens(cand, k)
        r, c = np.nonzero(chosen)  # row-major: positions come out sorted within each row
        counts = np.bincount(r, minlength=n)
        slot = np.arange(len(r)) - np.repeat(np.cumsum(counts) - counts, counts)
        positions = np.zeros((n, P), np.int32)
        masked_ids = np.zeros((n, P), np.int32)
        positions[r, slot] = c
        original = ids[r, c]
        masked_ids[r, slot] = original
        draw = rng.random(len(r))
        to_mask, to_random = draw < 0.8, draw >= 0.9
        ids[r, c] = np.where(to_mask, V.mask_id,
                             np.where(to_random, rng.integers(0, V.size, len(r)), original)).astype(np.int32)
        st = self.stats
        st["instances"] += n
        st["tokens"] += int(total.sum())
        st["predictions"] += len(r)
        st["mask_token"] += int(to_mask.sum())
        st["random_token"] += int(to_random.sum())
        st["kept"] += int(len(r) - to_mask.sum() - to_random.sum())
        st["random_next"] += int((rand_next > 0).sum())
        st["forced_random_next"] += int((rand_next == 2).sum())
        return Batch(ids, input_mask, segment_ids, positions, masked_ids, counts.astype(np.int32),
                     (rand_next > 0).astype(np.int8))

    def _keys(self, shape: tuple[int, int]) -> np.ndarray:
        """Random sort keys, distinct within a row (the column index sits in the low bits)."""
        return (self.rng.integers(0, 1 << 40, shape, dtype=np.int64) << 12) | np.arange(shape[1])[None, :]

    def _tokens(self, cand: np.ndarray, k: np.ndarray) -> np.ndarray:
        """The k candidates with the smallest random keys per row (= the first k of a shuffle)."""
        keys = self._keys(cand.shape)
        keys[~cand] = np.iinfo(np.int64).max
        width = min(self.p.max_predictions, cand.shape[1] - 1)
        smallest = np.sort(np.partition(keys, width - 1, axis=1)[:, :width], axis=1)
        threshold = smallest[np.arange(len(k)), np.minimum(k, width) - 1]
        return keys <= threshold[:, None]

    def _whole_words(self, ids: np.ndarray, cand: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Whole-word masking: a word is a candidate token plus the "##" pieces after it; words in random order
        are taken while they fit in k (a word that would overflow is skipped), as the reference does."""
        n, L = cand.shape
        prev = np.zeros_like(cand)
        prev[:, 1:] = cand[:, :-1]
        starts = cand & ~(self.vocab.continuation[ids] & prev)
        gid = np.cumsum(starts, axis=1) - 1  # word index of each candidate token
        n_words = starts.sum(axis=1)
        flat = (np.arange(n)[:, None] * L + gid)[cand]
        sizes = np.bincount(flat, minlength=n * L).reshape(n, L)
        keys = self._keys((n, L))
        keys[np.arange(L)[None, :] >= n_words[:, None]] = np.iinfo(np.int64).max
        order = np.argsort(keys, axis=1)
        sizes_in_order = np.take_along_axis(sizes, order, axis=1)
        taken = np.zeros((n, L), bool)
        count = np.zeros(n, np.int64)
        for t in range(int(n_words.max(initial=0))):
            s = sizes_in_order[:, t]
            ok = (s > 0) & (count + s <= k)
            count += np.where(ok, s, 0)
            taken[:, t] = ok
            if (count >= k).all():
                break
        word_taken = np.zeros((n, L), bool)
        np.put_along_axis(word_taken, order, taken, axis=1)
        return cand & np.take_along_axis(word_taken, np.where(cand, gid, 0), axis=1)


# ----------------------------------------------------------------------------- TFRecord batch encoding
def _varint_len(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, np.int64)
    return 1 + (v >= 1 << 7) + (v >= 1 << 14) + (v >= 1 << 21)


def _varint_bytes(v: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Varints of non-negative values < 2**(7*width) in fixed `width`-byte slots: (bytes [..., width], valid)."""
    v = np.asarray(v, np.int64)
    shifts = 7 * np.arange(width)
    groups = (v[..., None] >> shifts) & 0x7F
    valid = np.arange(width) < _varint_len(v)[..., None]
    more = np.zeros_like(valid)
    more[..., :-1] = valid[..., 1:]
    return (groups | (more << 7)).astype(np.uint8), valid


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _entry_header(key: str, kind: int, payload_len: int) -> bytes:
    """A Features map entry up to its packed payload: entry tag and length, key, Feature tag and length, list
    tag (int64_list 0x1A, float_list 0x12) and length, packed-values tag and length."""
    kb = key.encode()
    list_len = 1 + len(_varint(payload_len)) + payload_len
    feat_len = 1 + len(_varint(list_len)) + list_len
    entry = b"\x0a" + _varint(len(kb)) + kb + b"\x12" + _varint(feat_len) + bytes([kind]) + _varint(list_len) + \
        b"\x0a" + _varint(payload_len)
    return b"\x0a" + _varint(len(entry) + payload_len) + entry


class ExampleEncoder:
    """Framed tf.train.Example records for a whole batch at once.

    Each record is laid out as a row of fixed-width slots (record header, example header, per feature its
    framing and its packed payload, record footer); varints sit in slots of their maximum width with a validity
    mask. Compacting the valid bytes of all rows gives every record, already concatenated; only the data CRCs
    are then computed per record (google-crc32c) and written into the footers in place."""

    def __init__(self, L: int, P: int, vocab_size: int) -> None:
        self.L, self.P = L, P
        # the varint of every possible id / position in a 4-byte slot, and which of its bytes are used:
        # looked up with one gather per array rather than computed per value
        data, valid = _varint_bytes(np.arange(max(vocab_size, L)), 3)
        self.table = np.zeros((len(data), 4), np.uint8)
        self.table[:, :3] = data
        self.table = self.table.view("<u4").ravel()
        self.table_valid = np.zeros((len(data), 4), bool)
        self.table_valid[:, :3] = valid
        self.table_valid = self.table_valid.view("<u4").ravel()
        self.table_len = valid.sum(axis=1).astype(np.uint8)
        # framing of the variable-length features, by payload length (a varint is 1..3 bytes per value)
        self.headers = {key: self._header_table(key, 3 * width)
                        for key, width in (("input_ids", L), ("masked_lm_positions", P), ("masked_lm_ids", P))}
        # the fixed-length features: constant framing
        self.fixed = {key: np.frombuffer(_entry_header(key, kind, size), np.uint8)
                      for key, kind, size in (("input_mask", 0x1A, L), ("segment_ids", 0x1A, L),
                                              ("masked_lm_weights", 0x12, 4 * P), ("next_sentence_labels", 0x1A, 1))}

    @staticmethod
    def _header_table(key: str, max_payload: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(bytes [m, w], valid [m, w], total entry length [m]) of the entry framing for payload lengths 0..m-1."""
        headers = [_entry_header(key, 0x1A, n) for n in range(max_payload + 1)]
        width = max(map(len, headers))
        data = np.zeros((len(headers), width), np.uint8)
        valid = np.zeros((len(headers), width), bool)
        for n, h in enumerate(headers):
            data[n, :len(h)] = np.frombuffer(h, np.uint8)
            valid[n, :len(h)] = True
        return data, valid, np.array([len(h) + n for n, h in enumerate(headers)], np.int64)

    def _varints(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(bytes [n, 4k], valid [n, 4k], payload length [n]) of rows of small non-negative ints."""
        n = len(values)
        data = self.table[values].view(np.uint8).reshape(n, -1)
        valid = self.table_valid[values].view(bool).reshape(n, -1)
        return data, valid, self.table_len[values].sum(axis=1, dtype=np.int64)

    def encode(self, b: Batch) -> np.ndarray:
        """All records of the batch, framed and concatenated."""
        n, P = len(b), self.P
        weights = (np.arange(P)[None, :] < b.num_predictions[:, None]).astype("<f4")
        slots: list[tuple[np.ndarray, np.ndarray | None]] = []  # (bytes [n or 1, w], valid or None)
        features_len = np.zeros(n, np.int64)
        for key, values in (("input_ids", b.input_ids), ("input_mask", b.input_mask),
                            ("segment_ids", b.segment_ids), ("masked_lm_positions", b.positions),
                            ("masked_lm_ids", b.masked_ids), ("masked_lm_weights", weights),
                            ("next_sentence_labels", b.next_sentence)):
            if key in self.headers:
                data, valid, payload_len = self._varints(values)
                head, head_valid, entry_len = self.headers[key]
                slots += [(head[payload_len], head_valid[payload_len]), (data, valid)]
                features_len += entry_len[payload_len]
            else:
                payload = values.view(np.uint8).reshape(n, -1)  # 0/1 ints are one-byte varints; floats raw
                slots += [(self.fixed[key][None, :], None), (payload, None)]
                features_len += len(self.fixed[key]) + payload.shape[1]
        example_head, example_head_valid = _varint_bytes(features_len, 3)
        example_len = 1 + example_head_valid.sum(axis=1) + features_len
        slots = [(self._headers(example_len), None), (np.array([[0x0A]], np.uint8), None),
                 (example_head, example_head_valid), *slots, (np.zeros((1, 4), np.uint8), None)]

        # lay the slots side by side, then compact the valid bytes
        edges = np.concatenate(([0], np.cumsum([data.shape[1] for data, _ in slots])))
        rows = np.empty((n, int(edges[-1])), np.uint8)
        valid = np.ones((n, int(edges[-1])), bool)
        for (data, ok), lo, hi in zip(slots, edges[:-1], edges[1:], strict=True):
            rows[:, lo:hi] = data
            if ok is not None:
                valid[:, lo:hi] = ok
        records = rows[valid]
        ends = np.cumsum(example_len + 16)
        self._footers(records, ends - example_len - 4, ends - 4)
        return records

    @staticmethod
    def _headers(example_len: np.ndarray) -> np.ndarray:
        """12-byte record headers: uint64 length, masked CRC of those 8 bytes (one CRC per distinct length)."""
        lengths = example_len.astype("<u8")
        out = np.empty((len(lengths), 12), np.uint8)
        out[:, :8] = lengths[:, None].view(np.uint8)
        uniq, inverse = np.unique(lengths, return_inverse=True)
        crcs = np.array([google_crc32c.value(x.tobytes()) for x in uniq], np.uint64)
        out[:, 8:] = _mask_crc(crcs)[inverse].astype("<u4")[:, None].view(np.uint8)
        return out

    @staticmethod
    def _footers(records: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        """Write each record's masked data CRC into its 4-byte footer (data = records[start:end])."""
        data = records.tobytes()  # google_crc32c takes bytes only (not memoryviews)
        value = google_crc32c.value
        crcs = np.array([value(data[s:e]) for s, e in zip(starts.tolist(), ends.tolist(), strict=True)], np.uint64)
        footer = _mask_crc(crcs).astype("<u4").view(np.uint8).reshape(-1, 4)
        records[ends[:, None] + np.arange(4)] = footer


@functools.lru_cache(maxsize=4)
def example_encoder(L: int, P: int, vocab_size: int) -> ExampleEncoder:
    """One encoder per process (its tables take a few milliseconds to build; a process builds many shards)."""
    return ExampleEncoder(L, P, vocab_size)


def _mask_crc(crc: np.ndarray) -> np.ndarray:
    crc = crc.astype(np.uint64)
    return (((crc >> np.uint64(15)) | (crc << np.uint64(17))) + np.uint64(0xA282EAD8)) & np.uint64(_MASK32)


# ----------------------------------------------------------------------------- shard writers
class ShardWriter:
    """The TFRecord and/or HDF5 file of one shard, written under temporary names and renamed when complete."""

    def __init__(self, out: Path, params: Params, shard: int, vocab_size: int) -> None:
        self.params, self.count = params, 0
        base = shard_name(params, shard)
        self.final: dict[str, Path] = {}
        self.tmp: dict[str, Path] = {}
        self.sha: dict[str, Any] = {}
        if "tfrecord" in params.formats:
            self.final["tfrecord"] = out / "tfrecord" / base
            self.encoder = example_encoder(params.max_seq_length, params.max_predictions, vocab_size)
        if "hdf5" in params.formats:
            self.final["hdf5"] = out / "hdf5" / f"{base}.hdf5"
        for fmt, path in self.final.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            self.tmp[fmt] = path.with_name(path.name + ".partial")
        if "tfrecord" in self.final:
            self.tf_file: BinaryIO = open(self.tmp["tfrecord"], "wb")  # noqa: SIM115 - closed in close()
            self.sha["tfrecord"] = hashlib.sha256()
        if "hdf5" in self.final:
            self._open_hdf5()

    def _open_hdf5(self) -> None:
        import h5py
        L, P = self.params.max_seq_length, self.params.max_predictions
        self.h5 = h5py.File(self.tmp["hdf5"], "w")
        self.chunk_rows = max(64, (1 << 19) // (4 * L))
        self.h5_pending: list[Batch] = []
        self.h5_pending_rows = 0
        self.h5_rows = 0
        level = self.params.hdf5_gzip_level
        for key, dtype in HDF5_DTYPES.items():
            width = () if key == "next_sentence_labels" else ((L,) if key in INT_FEATURES_L else (P,))
            self.h5.create_dataset(key, shape=(0, *width), maxshape=(None, *width), dtype=dtype,
                                   chunks=(self.chunk_rows, *width), compression="gzip",
                                   compression_opts=level, track_times=False)

    def write(self, batch: Batch) -> None:
        if not len(batch):
            return
        self.count += len(batch)
        if "tfrecord" in self.final:
            for lo in range(0, len(batch), 4096):
                buf = self.encoder.encode(batch.take(slice(lo, lo + 4096))).data
                self.tf_file.write(buf)
                self.sha["tfrecord"].update(buf)
        if "hdf5" in self.final:
            self.h5_pending.append(batch)
            self.h5_pending_rows += len(batch)
            if self.h5_pending_rows >= self.chunk_rows:
                self._flush_hdf5(final=False)

    def _flush_hdf5(self, final: bool) -> None:
        """Write whole chunks only (each chunk compressed once), the remainder at the end."""
        if not self.h5_pending:
            return
        batch = Batch.concat(self.h5_pending)
        rows = len(batch) if final else (len(batch) // self.chunk_rows) * self.chunk_rows
        head, tail = batch.take(slice(0, rows)), batch.take(slice(rows, None))
        self.h5_pending = [tail] if len(tail) else []
        self.h5_pending_rows = len(tail)
        if not rows:
            return
        lo, hi = self.h5_rows, self.h5_rows + rows
        columns = {"input_ids": head.input_ids, "input_mask": head.input_mask, "segment_ids": head.segment_ids,
                   "masked_lm_positions": head.positions, "masked_lm_ids": head.masked_ids,
                   "next_sentence_labels": head.next_sentence}
        for key, data in columns.items():
            dset = self.h5[key]
            dset.resize(hi, axis=0)
            dset[lo:hi] = data
        self.h5_rows = hi

    def close(self) -> dict:
        """Rename the complete files into place; their manifest entries."""
        entries: dict[str, dict] = {}
        if "tfrecord" in self.final:
            self.tf_file.close()
        if "hdf5" in self.final:
            self._flush_hdf5(final=True)
            self.h5.close()
            self.sha["hdf5"] = sha256_file(self.tmp["hdf5"])
        out_root = self.final[next(iter(self.final))].parent.parent
        for fmt, path in self.final.items():
            os.replace(self.tmp[fmt], path)
            entries[fmt] = {"path": str(path.relative_to(out_root)), "bytes": path.stat().st_size,
                            "sha256": self.sha[fmt].hexdigest()}
        return entries

    def abort(self) -> None:
        if "tfrecord" in self.final:
            self.tf_file.close()
        if "hdf5" in self.final:
            self.h5.close()
        for path in self.tmp.values():
            path.unlink(missing_ok=True)


def sha256_file(path: Path) -> Any:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h


def shard_name(params: Params, shard: int) -> str:
    return f"{params.name}-{shard:05d}-of-{params.shards:05d}"


class ShuffleBuffer:
    """Holds up to `size` instances; each addition emits the surplus, drawn at random from everything held."""

    def __init__(self, size: int, rng: np.random.Generator) -> None:
        self.size, self.rng = size, rng
        self.held: Batch | None = None

    def add(self, batch: Batch) -> Batch | None:
        held = batch if self.held is None else Batch.concat([self.held, batch])
        order = self.rng.permutation(len(held))
        surplus = len(held) - self.size
        if surplus <= 0:
            self.held = held
            return None
        self.held = held.take(order[surplus:])
        return held.take(order[:surplus])

    def drain(self) -> Batch | None:
        if self.held is None:
            return None
        held, self.held = self.held, None
        return held.take(self.rng.permutation(len(held)))


def build_shard(out: Path, params: Params, vocab: Vocab, shard: int, spill_dir: Path, parts: int,
                base_stats: dict[str, int]) -> dict:
    """Phase 2 for one shard: every dupe pass over its documents, blocks of documents with their neighbours
    as the pool of "random next" documents, through the shuffle buffer into the writers."""
    t0 = time.perf_counter()
    dtype = token_dtype(vocab)
    stats = {**dict.fromkeys(STAT_KEYS, 0), **base_stats}
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(params.seed, spawn_key=(shard,))))
    maker = InstanceMaker(params, vocab, rng, stats)
    shuffle = ShuffleBuffer(params.shuffle_buffer, rng)
    writer = ShardWriter(out, params, shard, vocab.size)
    try:
        for _ in range(params.dupe_factor):
            blocks = spill_blocks(spill_dir, parts, shard, dtype, params.random_doc_block)
            prev, cur = None, next(blocks, None)
            while cur is not None:
                nxt = next(blocks, None)
                window = [b for b in (prev, cur, nxt) if b is not None]
                pool = [np.concatenate([w[i] for w in window]) for i in range(3)]
                for batch in maker.block(*pool, 0 if prev is None else len(prev[0]), len(cur[0])):
                    emitted = shuffle.add(batch)
                    if emitted is not None:
                        writer.write(emitted)
                prev, cur = cur, nxt
        emitted = shuffle.drain()
        if emitted is not None:
            writer.write(emitted)
        entries = writer.close()
    except BaseException:
        writer.abort()
        raise
    return {"index": shard, "instances": writer.count, **entries, "stats": stats,
            "_seconds": time.perf_counter() - t0,
            "_max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


# ----------------------------------------------------------------------------- workers and the manifest
def run(inputs: list[Path], vocab: Vocab, params: Params, shards: list[int], out: Path, tmp_root: Path,
        workers: int) -> tuple[list[dict], dict]:
    """Phase 1 (tokenise into spill files) on `workers` processes, then phase 2 (one task per shard, largest
    first, on the same processes). Returns the shards' manifest entries and timings."""
    spill_dir = Path(tempfile.mkdtemp(prefix="bert-spill-", dir=tmp_root))
    pool = None
    try:
        t0 = time.perf_counter()
        if workers == 1:
            part_stats = [tokenize_part(inputs, vocab, params, shards, 0, 1, spill_dir)]
        else:
            pool = concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
            part_stats = [f.result() for f in [pool.submit(tokenize_part, inputs, vocab, params, shards, p,
                                                           workers, spill_dir) for p in range(workers)]]
        t1 = time.perf_counter()
        base = {s: {k: sum(ps[s][k] for ps in part_stats) for k in part_stats[0][s]} for s in shards}
        order = sorted(shards, key=lambda s: (-base[s]["document_tokens"], s))  # largest first: balanced
        if pool is None:
            results = [build_shard(out, params, vocab, s, spill_dir, 1, base[s]) for s in order]
        else:
            futures = [pool.submit(build_shard, out, params, vocab, s, spill_dir, workers, base[s]) for s in order]
            results = [f.result() for f in futures]
        timing = {"tokenize_s": round(t1 - t0, 3), "build_s": round(time.perf_counter() - t1, 3),
                  "shard_s": [round(r.pop("_seconds"), 3) for r in results],
                  "max_rss_mb_workers": round(max((r.pop("_max_rss_mb") for r in results), default=0), 1)}
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        shutil.rmtree(spill_dir, ignore_errors=True)
    return results, timing


def parse_group(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not m or not 0 <= int(m.group(1)) < int(m.group(2)):
        raise InputError(f"--shard-group {text!r}: expected i/n with 0 <= i < n, e.g. 0/4")
    return int(m.group(1)), int(m.group(2))


def group_manifest_name(group: tuple[int, int]) -> str:
    return f"manifest.group-{group[0]:05d}-of-{group[1]:05d}.json"


def summarise(shards: list[dict]) -> tuple[dict, dict]:
    totals = dict.fromkeys(STAT_KEYS, 0)
    for s in shards:
        for key in STAT_KEYS:
            totals[key] += s["stats"][key]

    def frac(a: str, b: str) -> float | None:
        return round(totals[a] / totals[b], 6) if totals[b] else None

    statistics = {
        "masked_fraction": frac("predictions", "tokens"),
        "mask_token_fraction": frac("mask_token", "predictions"),
        "kept_fraction": frac("kept", "predictions"),
        "random_token_fraction": frac("random_token", "predictions"),
        "nsp_random_fraction": frac("random_next", "instances"),
        # the coin alone: instances whose chunk had two sentences or more (one-sentence chunks are always random)
        "nsp_coin_random_fraction": round((totals["random_next"] - totals["forced_random_next"])
                                          / (totals["instances"] - totals["forced_random_next"]), 6)
        if totals["instances"] > totals["forced_random_next"] else None,
        "short_target_fraction": frac("short_target_passes", "document_passes"),
        "short_target_instance_fraction": frac("short_target_instances", "instances"),
        "truncated_fraction": frac("truncated_instances", "instances"),
        "mean_tokens_per_instance": frac("tokens", "instances"),
    }
    return totals, statistics


def make_manifest(params: Params, vocab: Vocab, inputs: list[Path], shards: list[dict],
                  group: tuple[int, int] | None) -> dict:
    totals, statistics = summarise(shards)
    L, P = params.max_seq_length, params.max_predictions
    manifest = {
        "format": MANIFEST_FORMAT,
        "parameters": params.manifest(),
        "vocab": {"path": str(vocab.path), "size": vocab.size, "sha256": vocab.sha256},
        "inputs": [{"path": str(p), "bytes": p.stat().st_size} for p in inputs],
        "features": {
            "tfrecord": {**{k: ["int64", L] for k in INT_FEATURES_L}, **{k: ["int64", P] for k in INT_FEATURES_P},
                         "masked_lm_weights": ["float", P], "next_sentence_labels": ["int64", 1]},
            "hdf5": {k: [d, [L] if k in INT_FEATURES_L else [P] if k in INT_FEATURES_P else []]
                     for k, d in HDF5_DTYPES.items()},
        },
        "shards": sorted(shards, key=lambda s: s["index"]),
        "instances": totals["instances"],
        "totals": totals,
        "statistics": statistics,
    }
    if group is not None:
        manifest["shard_group"] = f"{group[0]}/{group[1]}"
    return manifest


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def create(args: argparse.Namespace) -> int:
    formats = tuple(f.strip() for f in args.formats.split(",") if f.strip())
    bad = [f for f in formats if f not in ("tfrecord", "hdf5")]
    if bad or not formats:
        raise InputError(f"--formats {args.formats!r}: choose from tfrecord, hdf5 (comma separated)")
    params = Params(max_seq_length=args.max_seq_length, max_predictions=args.max_predictions,
                    masked_lm_prob=args.masked_lm_prob, short_seq_prob=args.short_seq_prob,
                    dupe_factor=args.dupe_factor, seed=args.seed, do_lower_case=args.do_lower_case,
                    whole_word_mask=args.whole_word_mask, shards=args.shards, formats=formats, name=args.name,
                    random_doc_block=args.random_doc_block, shuffle_buffer=args.shuffle_buffer,
                    hdf5_gzip_level=args.hdf5_gzip_level)
    checks = [(params.max_seq_length >= 5, "--max-seq-length must be >= 5"),
              (params.max_predictions >= 1, "--max-predictions must be >= 1"),
              (params.max_predictions < params.max_seq_length - 2, "--max-predictions must be < max-seq-length - 2"),
              (0 < params.masked_lm_prob < 1, "--masked-lm-prob must be in (0, 1)"),
              (0 <= params.short_seq_prob <= 1, "--short-seq-prob must be in [0, 1]"),
              (params.dupe_factor >= 1, "--dupe-factor must be >= 1"),
              (params.shards >= 1, "--shards must be >= 1"),
              (params.random_doc_block >= 1, "--random-doc-block must be >= 1"),
              (params.shuffle_buffer >= 0, "--shuffle-buffer must be >= 0"),
              (0 <= params.hdf5_gzip_level <= 9, "--hdf5-gzip-level must be 0..9"),
              (args.workers >= 1, "--workers must be >= 1"),
              (params.max_seq_length <= 1 << 12, "--max-seq-length must be <= 4096"),
              (re.fullmatch(r"[\w.-]+", params.name) is not None, "--name: letters, digits, '.', '_', '-' only")]
    for ok, message in checks:
        if not ok:
            raise InputError(message)
    for path in args.input:
        if not path.is_file():
            raise InputError(f"{path}: no such input file")
    vocab = load_vocab(args.vocab)
    if vocab.size >= 1 << 21:
        raise InputError(f"{args.vocab}: {vocab.size} words; at most 2**21 supported")
    group = parse_group(args.shard_group) if args.shard_group else (0, 1)
    mine = [s for s in range(params.shards) if s % group[1] == group[0]]
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    tmp_root = args.tmp_dir or out
    tmp_root.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    shards, timing = run(args.input, vocab, params, mine, out, tmp_root, args.workers)
    whole = group[1] == 1
    manifest = make_manifest(params, vocab, args.input, shards, None if whole else group)
    manifest_path = out / ("manifest.json" if whole else group_manifest_name(group))
    write_json(manifest_path, manifest)
    seconds = time.perf_counter() - start
    print(json.dumps({"manifest": str(manifest_path), "shards": len(shards), "instances": manifest["instances"],
                      "seconds": round(seconds, 3),
                      "instances_per_s": round(manifest["instances"] / seconds, 1) if seconds else None,
                      "workers": args.workers, **timing,
                      "max_rss_mb_main": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                      "statistics": manifest["statistics"]}))
    return 0


def merge_manifest(args: argparse.Namespace) -> int:
    out: Path = args.out
    paths = sorted(out.glob("manifest.group-*-of-*.json"))
    if not paths:
        raise InputError(f"{out}: no group manifests (manifest.group-IIIII-of-NNNNN.json) to merge")
    manifests = []
    for path in paths:
        try:
            manifests.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"{path}: unreadable manifest ({exc})") from exc
    n = int(manifests[0]["shard_group"].split("/")[1])
    groups = sorted(int(m["shard_group"].split("/")[0]) for m in manifests)
    if any(int(m["shard_group"].split("/")[1]) != n for m in manifests) or groups != list(range(n)):
        found = [m["shard_group"] for m in manifests]
        raise InputError(f"{out}: group manifests {found} do not form 0/{n}..{n - 1}/{n}")
    first = manifests[0]
    for path, m in zip(paths, manifests, strict=True):
        for key in ("format", "parameters", "vocab", "inputs", "features"):
            if m[key] != first[key]:
                raise InputError(f"{path}: {key} differ from {paths[0].name}'s; the groups are not one run")
    shards = [s for m in manifests for s in m["shards"]]
    indices = sorted(s["index"] for s in shards)
    if indices != list(range(first["parameters"]["shards"])):
        raise InputError(f"{out}: the groups hold shards {indices}, not 0..{first['parameters']['shards'] - 1}")
    totals, statistics = summarise(shards)
    merged = {key: first[key] for key in ("format", "parameters", "vocab", "inputs", "features")}
    merged.update(shards=sorted(shards, key=lambda s: s["index"]), instances=totals["instances"], totals=totals,
                  statistics=statistics)
    write_json(out / "manifest.json", merged)
    print(json.dumps({"manifest": str(out / "manifest.json"), "groups": n, "shards": len(shards),
                      "instances": totals["instances"]}))
    return 0


# ----------------------------------------------------------------------------- verification
class VerifyError(ValueError):
    pass


def verify(args: argparse.Namespace) -> int:
    from dlbench.dataprep import tfrecord as tfr
    out: Path = args.out
    manifest_path = args.manifest or out / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{manifest_path}: unreadable manifest ({exc})") from exc
    params = manifest["parameters"]
    L, P = params["max_seq_length"], params["max_predictions"]
    expected_tf = {**{k: L for k in INT_FEATURES_L}, **{k: P for k in INT_FEATURES_P}, "masked_lm_weights": P,
                   "next_sentence_labels": 1}
    checked = 0
    for shard in manifest["shards"]:
        n = shard["instances"]
        if "tfrecord" in shard:
            path = out / shard["tfrecord"]["path"]
            if not path.is_file():
                raise VerifyError(f"{path}: missing")
            count = 0
            try:
                for index, (_, data) in enumerate(tfr.read_records(path)):
                    if index == 0 or index == n - 1:
                        features = tfr.parse_example(data)
                        got = {k: len(v) for k, v in features.items()}
                        if got != expected_tf:
                            raise VerifyError(f"{path}: record {index}: features {got}, expected {expected_tf}")
                    count += 1
            except tfr.CorruptRecord as exc:
                raise VerifyError(str(exc)) from exc
            if count != n:
                raise VerifyError(f"{path}: {count} records, the manifest says {n}")
            _check_file(path, shard["tfrecord"])
        if "hdf5" in shard:
            import h5py
            path = out / shard["hdf5"]["path"]
            if not path.is_file():
                raise VerifyError(f"{path}: missing")
            try:
                with h5py.File(path, "r") as f:
                    for key, dtype in HDF5_DTYPES.items():
                        shape = (n,) if key == "next_sentence_labels" else (n, L if key in INT_FEATURES_L else P)
                        if key not in f:
                            raise VerifyError(f"{path}: no dataset {key}")
                        d = f[key]
                        if d.shape != shape or d.dtype != np.dtype(dtype):
                            raise VerifyError(f"{path}: {key} is {d.dtype}{list(d.shape)}, expected "
                                              f"{np.dtype(dtype)}{list(shape)}")
                        if n:
                            d[n - 1]  # reads (and decompresses) the last chunk
            except OSError as exc:
                raise VerifyError(f"{path}: not a readable HDF5 file ({exc})") from exc
            _check_file(path, shard["hdf5"])
        checked += 1
    print(json.dumps({"verified": str(manifest_path), "shards": checked, "instances": manifest["instances"]}))
    return 0


def _check_file(path: Path, entry: dict) -> None:
    size = path.stat().st_size
    if size != entry["bytes"]:
        raise VerifyError(f"{path}: {size} bytes, the manifest says {entry['bytes']}")
    if sha256_file(path).hexdigest() != entry["sha256"]:
        raise VerifyError(f"{path}: sha256 differs from the manifest's")


# ----------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> int:
    prog = "python -m dlbench.dataprep.bert_shards"
    parser = argparse.ArgumentParser(prog=prog, description="BERT pretraining shards (TFRecord / HDF5) from text.")
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("create", help="text + vocab -> shards and manifest")
    c.add_argument("--input", type=Path, nargs="+", required=True,
                   help="text files: one sentence per line, blank line between documents")
    c.add_argument("--vocab", type=Path, required=True, help="WordPiece vocab.txt")
    c.add_argument("--out", type=Path, required=True, help="output directory")
    c.add_argument("--name", default="pretraining", help="shard name prefix (default: pretraining)")
    c.add_argument("--max-seq-length", type=int, default=128)
    c.add_argument("--max-predictions", type=int, default=20)
    c.add_argument("--masked-lm-prob", type=float, default=0.15)
    c.add_argument("--short-seq-prob", type=float, default=0.1)
    c.add_argument("--dupe-factor", type=int, default=10)
    c.add_argument("--seed", type=int, default=12345)
    c.add_argument("--do-lower-case", action=argparse.BooleanOptionalAction, default=True,
                   help="lower-case and strip accents (--no-do-lower-case for cased vocabularies)")
    c.add_argument("--no-lower-case", dest="do_lower_case", action="store_false", help="same as --no-do-lower-case")
    c.add_argument("--whole-word-mask", action="store_true", help="mask whole words (## pieces with their word)")
    c.add_argument("--shards", type=int, default=8, help="number of shards in all (default 8)")
    c.add_argument("--shard-group", default=None,
                   help="i/n: build only shards s with s %% n == i and write manifest.group-i-of-n.json "
                        "(one SLURM job per group; then `merge-manifest`)")
    c.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)),
                   help="processes (default: usable cores); each owns whole shards")
    c.add_argument("--formats", default="tfrecord,hdf5", help="tfrecord, hdf5 or both (default)")
    c.add_argument("--random-doc-block", type=int, default=512,
                   help="documents per block; a random next sentence comes from the previous, same or next "
                        "block of the shard (default 512)")
    c.add_argument("--shuffle-buffer", type=int, default=10000, help="instances shuffled together (default 10000)")
    c.add_argument("--hdf5-gzip-level", type=int, default=4, help="gzip level of the HDF5 datasets (h5py's 4)")
    c.add_argument("--tmp-dir", type=Path, default=None,
                   help="where the tokenised spill files go (default: the output directory)")
    m = sub.add_parser("merge-manifest", help="merge the group manifests of --shard-group runs into manifest.json")
    m.add_argument("--out", type=Path, required=True)
    v = sub.add_parser("verify", help="check every record (length, CRC), the HDF5 datasets and the manifest")
    v.add_argument("--out", type=Path, required=True)
    v.add_argument("--manifest", type=Path, default=None, help="default: <out>/manifest.json")
    args = parser.parse_args(argv)
    try:
        return {"create": create, "merge-manifest": merge_manifest, "verify": verify}[args.command](args)
    except (InputError, VerifyError) as exc:
        print(f"bert_shards {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
