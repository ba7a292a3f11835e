"""Building shards: phase 1 (spill.py: the main process reads the input, the workers tokenise it), then phase 2,
one task per shard: every dupe pass over the shard's documents, in blocks with their neighbours as the pool of
"random next" documents, through the shuffle buffer into the shard's writer."""

from __future__ import annotations

import concurrent.futures
import gc
import multiprocessing
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dlbench.harness import lifeline

from .instances import InstanceMaker, ShuffleBuffer
from .params import STAT_KEYS, Params
from .spill import PHASE1_STATS, Spiller, document_batches, spill_blocks
from .tokens import Vocab, token_dtype
from .writer import ShardWriter, import_writers


def build_shard(
    out: Path, params: Params, vocab: Vocab, shard: int, spill_dir: Path, parts: list[int], base_stats: dict[str, int]
) -> dict:
    """Phase 2 for one shard: every dupe pass over its documents, blocks of documents with their neighbours
    as the pool of "random next" documents, through the shuffle buffer into the writers."""
    t0 = time.perf_counter()
    dtype = token_dtype(vocab)
    stats = {**dict.fromkeys(STAT_KEYS, 0), **base_stats}
    rng, mask_rng = (
        np.random.Generator(np.random.PCG64(np.random.SeedSequence(params.seed, spawn_key=key)))
        for key in ((shard,), (shard, 1))
    )
    maker = InstanceMaker(params, vocab, rng, mask_rng, stats)
    shuffle = ShuffleBuffer(params.shuffle_buffer, rng)
    writer = ShardWriter(out, params, shard, vocab.size)
    try:
        for _ in range(params.dupe_factor):
            blocks = spill_blocks(spill_dir, parts, shard, dtype, params.random_doc_block)
            prev, cur = None, next(blocks, None)
            while cur is not None:
                nxt = next(blocks, None)
                window = [b for b in (prev, cur, nxt) if b is not None]
                pool_counts, pool_lengths, pool_tokens = (np.concatenate([w[i] for w in window]) for i in range(3))
                for batch in maker.block(
                    pool_counts, pool_lengths, pool_tokens, 0 if prev is None else len(prev[0]), len(cur[0])
                ):
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
    return {
        "index": shard,
        "instances": writer.count,
        **entries,
        "stats": stats,
        "_seconds": time.perf_counter() - t0,
        "_max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


# a worker process's own, set when it starts: the vocabulary it inherited from the main process (the tasks do
# not carry it: its word -> id dict is ~1 MB pickled) and its phase-1 tokenizer
_VOCAB: Vocab | None = None
_SPILLER: Spiller | None = None


def _start_worker(vocab: Vocab, params: Params, spill_dir: Path, die_with_parent: Callable[[], None]) -> None:
    """Worker start: it dies with the main process (killed, it would leave the workers waiting for tasks
    forever); its tokenizer is built while the main process reads the first batches."""
    die_with_parent()
    global _VOCAB, _SPILLER
    _VOCAB = vocab
    _SPILLER = Spiller(vocab, params, spill_dir, os.getpid())


def _spill(batch: list[tuple[int, str, int]]) -> tuple[int, dict[int, dict[str, int]]]:
    assert _SPILLER is not None
    return _SPILLER.part, _SPILLER.add(batch)


def _build(
    out: Path, params: Params, shard: int, spill_dir: Path, parts: list[int], base_stats: dict[str, int]
) -> dict:
    assert _VOCAB is not None
    return build_shard(out, params, _VOCAB, shard, spill_dir, parts, base_stats)


def run(
    inputs: list[Path], vocab: Vocab, params: Params, shards: list[int], out: Path, tmp_root: Path, workers: int
) -> tuple[list[dict], dict]:
    """Phase 1 (the main process reads the input; the workers tokenise it, a batch at a time, into spill files),
    then phase 2 (one task per shard, largest first, on the same processes). Returns the shards' manifest
    entries and timings."""
    spill_dir = Path(tempfile.mkdtemp(prefix="bert-spill-", dir=tmp_root))
    pool = None
    base = {s: dict.fromkeys(PHASE1_STATS, 0) for s in shards}
    parts: set[int] = set()

    def count(part: int, stats: dict[int, dict[str, int]]) -> None:
        parts.add(part)
        for shard, st in stats.items():
            for key, value in st.items():
                base[shard][key] += value

    try:
        t0 = time.perf_counter()
        batches = document_batches(inputs, params, shards)
        if workers == 1:
            spiller = Spiller(vocab, params, spill_dir, 0)
            for batch in batches:
                count(0, spiller.add(batch))
        else:
            import_writers(params)  # once, here: the workers inherit it
            # the objects so far (modules, the vocabulary) out of the garbage collector's sight: its passes in a
            # worker would touch, and so copy, the pages the worker shares with this process (gc.freeze's
            # documented use before fork: ~1,500 fewer page faults, ~2% less CPU on the 1x BERT input)
            gc.freeze()
            pool = concurrent.futures.ProcessPoolExecutor(
                workers,
                mp_context=multiprocessing.get_context("fork"),
                initializer=_start_worker,
                initargs=(vocab, params, spill_dir, lifeline.die_with_parent()),
            )
            pool.submit(int)  # the first task forks the workers: now, not after the first batch is read
            pending: set[concurrent.futures.Future] = set()
            for batch in batches:
                if len(pending) >= 2 * workers:  # bounded: the input is read as fast as it is tokenised
                    done, pending = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
                    for f in done:
                        count(*f.result())
                pending.add(pool.submit(_spill, batch))
            for f in concurrent.futures.as_completed(pending):
                count(*f.result())
        t1 = time.perf_counter()
        order = sorted(shards, key=lambda s: (-base[s]["document_tokens"], s))  # largest first: balanced
        part_list = sorted(parts)
        if pool is None:
            results = [build_shard(out, params, vocab, s, spill_dir, part_list, base[s]) for s in order]
        else:
            futures = [pool.submit(_build, out, params, s, spill_dir, part_list, base[s]) for s in order]
            results = [f.result() for f in futures]
        timing = {
            "tokenize_s": round(t1 - t0, 3),
            "build_s": round(time.perf_counter() - t1, 3),
            "shard_s": [round(r.pop("_seconds"), 3) for r in results],
            "max_rss_mb_workers": round(max((r.pop("_max_rss_mb") for r in results), default=0), 1),
        }
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        gc.unfreeze()  # (nothing frozen with one worker)
        shutil.rmtree(spill_dir, ignore_errors=True)
    return results, timing
