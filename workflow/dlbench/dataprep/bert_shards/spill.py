"""Phase 1: the input's documents in batches, tokenised, into spill files (one per process and shard, in document
order), and the reading of a shard's spill files back, merged in document order, in blocks of documents."""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from .params import Params
from .tokens import Vocab, WordTokenizer, iter_documents, token_dtype

_DOC_HEADER = np.dtype([("doc", "<i8"), ("sentences", "<i8"), ("tokens", "<i8")])
PHASE1_STATS = ("documents", "sentences", "document_tokens")


def spill_path(spill_dir: Path, part: int, shard: int) -> Path:
    return spill_dir / f"w{part:03d}-s{shard:05d}.spill"


def document_batches(
    inputs: list[Path], params: Params, shards: list[int], batch_lines: int = 4096
) -> Iterator[list[tuple[int, str, int]]]:
    """The documents of `shards` as (document index, text, lines), in batches of about batch_lines lines (cut at
    document ends). A batch's distinct words are looked up once per batch: 4,096 lines (~0.5 MB of text) took
    7-8% off whole runs on the 1x and 4x inputs against 1,024 (interleaved runs, 2 workers)."""
    mine = set(shards)
    batch: list[tuple[int, str, int]] = []
    lines = 0
    for index, doc in enumerate(iter_documents(inputs)):
        if index % params.shards in mine:
            n_lines = doc.count("\n") + 1
            batch.append((index, doc, n_lines))
            lines += n_lines
            if lines >= batch_lines:
                yield batch
                batch, lines = [], 0
    if batch:
        yield batch


class Spiller:
    """Phase 1 in one process: tokenises batches of documents and appends each document to the process's spill
    file of its shard: [doc index, sentences, tokens][lengths][token ids]. Batches come in document order, so
    each spill file is in document order; which process takes a batch changes nothing in the output (phase 2
    merges the processes' files by document index)."""

    def __init__(self, vocab: Vocab, params: Params, spill_dir: Path, part: int) -> None:
        os.environ.setdefault("RAYON_NUM_THREADS", "1")  # one process per core already
        self.tokenizer = WordTokenizer(vocab, params.do_lower_case)
        self.dtype = token_dtype(vocab)
        self.params, self.spill_dir, self.part = params, spill_dir, part

    def add(self, batch: list[tuple[int, str, int]]) -> dict[int, dict[str, int]]:
        """Spill one batch; its documents, sentences and tokens per shard."""
        tokens, lengths = self.tokenizer.encode_lines([doc for _, doc, _ in batch])
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        by_shard: dict[int, list[bytes]] = {}
        stats: dict[int, dict[str, int]] = {}
        first = 0
        for index, _, n_lines in batch:
            lens = lengths[first : first + n_lines]
            lo, hi = offsets[first], offsets[first + n_lines]
            first += n_lines
            lens = lens[lens > 0]  # the reference drops lines without tokens, then empty documents
            if lens.size == 0:
                continue
            shard = index % self.params.shards
            by_shard.setdefault(shard, []).extend(
                (
                    np.array([(index, lens.size, hi - lo)], _DOC_HEADER).tobytes(),
                    lens.astype("<i4").tobytes(),
                    tokens[lo:hi].astype(self.dtype).tobytes(),
                )
            )
            st = stats.setdefault(shard, dict.fromkeys(PHASE1_STATS, 0))
            st["documents"] += 1
            st["sentences"] += int(lens.size)
            st["document_tokens"] += int(hi - lo)
        for shard, chunks in by_shard.items():
            with open(spill_path(self.spill_dir, self.part, shard), "ab") as f:
                f.write(b"".join(chunks))
        return stats


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


def spill_blocks(
    spill_dir: Path, parts: list[int], shard: int, dtype: np.dtype, docs_per_block: int
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """A shard's documents in document-index order (merging the phase-1 parts), in blocks:
    (sentences per document, tokens per sentence, tokens as int32)."""
    streams = [_spill_docs(spill_path(spill_dir, p, shard), dtype) for p in parts]
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
