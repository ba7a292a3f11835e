"""Phase 1: the input's documents, tokenised, into spill files (one per process and shard, in document order),
and the reading of a shard's spill files back, merged in document order, in blocks of documents."""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

from .params import Params
from .tokens import Vocab, WordTokenizer, iter_documents, token_dtype

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

