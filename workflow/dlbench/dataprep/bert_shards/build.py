"""Building shards: phase 1 (spill.py) on the worker processes, then phase 2, one task per shard: every dupe pass
over the shard's documents, in blocks with their neighbours as the pool of "random next" documents, through
the shuffle buffer into the shard's writer."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from .instances import InstanceMaker, ShuffleBuffer
from .params import STAT_KEYS, Params
from .spill import spill_blocks, tokenize_part
from .tokens import Vocab, token_dtype
from .writer import ShardWriter


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

