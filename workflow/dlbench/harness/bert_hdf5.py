"""BERT batches from NVIDIA's HDF5 shards, framework-neutral (numpy; h5py is imported when a pipeline is built).

The layout (DeepLearningExamples, written by dataprep/bert_shards/): input_ids i4 [N, L], input_mask i1,
segment_ids i1, masked_lm_positions i4 [N, P], masked_lm_ids i4, next_sentence_labels i1 [N]; no weights:
a prediction is real where its position is not 0 ([CLS], position 0, is never masked), NVIDIA's convention.
Batches come as bert.synthetic_batch's dict of numpy arrays, so each backend converts them exactly as its
synthetic batch. As NVIDIA's loader: each rank reads its own shards, the next shard is read by another thread
while this one is served, records are shuffled per shard; a shard's leftover records open the next batch.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from . import bert, datasets
from .spec import RunSpec, Unsupported

INT_FEATURES = (
    "input_ids",
    "input_mask",
    "segment_ids",
    "masked_lm_positions",
    "masked_lm_ids",
    "next_sentence_labels",
)


def _h5py():
    try:
        import h5py
    except ImportError as exc:
        raise Unsupported(
            f"data 'real' reads BERT's HDF5 shards with h5py, which is not importable here: {exc}"
        ) from None
    return h5py


def rank_shards(shards: list[str], rank: int, world: int) -> list[str]:
    """Round-robin when there are enough shards for every rank to have its own; else all of them."""
    return shards[rank::world] if len(shards) >= world else list(shards)


def check_shards(paths: list[str], seq_length: int, predictions: int) -> int:
    """Records in the shards, after checking (metadata only) that they hold the run's shapes."""
    h5py, records = _h5py(), 0
    for path in paths:
        with h5py.File(path, "r") as f:
            missing = [k for k in INT_FEATURES if k not in f]
            if missing:
                raise ValueError(f"{path}: not an NVIDIA BERT shard (no {', '.join(missing)})")
            shape = f["input_ids"].shape + f["masked_lm_positions"].shape[1:]
        if shape[1:] != (seq_length, predictions):
            raise Unsupported(
                f"{path}: {shape[1]} tokens / {shape[2]} masked positions per sequence; this run "
                f"needs {seq_length} / {predictions}"
            )
        records += shape[0]
    if not records:
        raise ValueError(f"BERT HDF5 shards {paths}: no records")
    return records


def read_shard(path: str) -> dict[str, np.ndarray]:
    """One shard, whole, in bert.synthetic_batch's dtypes (int32 ids, float32 weights, labels [N])."""
    with _h5py().File(path, "r") as f:
        arrays = {name: np.asarray(f[name][()], dtype=np.int32) for name in INT_FEATURES}
    arrays["next_sentence_labels"] = arrays["next_sentence_labels"].reshape(-1)
    arrays["masked_lm_weights"] = (arrays["masked_lm_positions"] != 0).astype(np.float32)
    return arrays


def batches(
    shards: list[str], batch_size: int, rng: np.random.Generator
) -> Generator[dict[str, np.ndarray], None, None]:
    """Endless batches: shards in a new shuffled order per pass, records shuffled per shard."""

    def order() -> Iterator[str]:
        while True:
            yield from (shards[i] for i in rng.permutation(len(shards)))

    paths, left = order(), None
    with ThreadPoolExecutor(1, thread_name_prefix="bert-hdf5-read") as pool:
        pending = pool.submit(read_shard, next(paths))
        while True:
            arrays = pending.result()
            pending = pool.submit(read_shard, next(paths))
            shuffle = rng.permutation(len(arrays["input_ids"]))
            arrays = {name: arrays[name][shuffle] for name in bert.FEATURES}
            if left is not None:
                arrays = {name: np.concatenate([left[name], value]) for name, value in arrays.items()}
            full = len(arrays["input_ids"]) - len(arrays["input_ids"]) % batch_size
            for start in range(0, full, batch_size):
                yield {name: value[start : start + batch_size] for name, value in arrays.items()}
            left = {name: value[full:] for name, value in arrays.items()}


class HostPipeline(datasets.InputPipeline):
    """A rank's BERT batches from the HDF5 shards as numpy (`next_numpy()`: bert.synthetic_batch's dict), for a
    backend that hands them to its framework itself: its subclass's next() converts them as its synthetic batch;
    `handover` says how, for the description (e.g. "numpy batches -> device_put")."""

    handover = "numpy batches"

    def __init__(self, spec: RunSpec, rank: int, world: int) -> None:
        shards = datasets.bert_shards(spec, "hdf5")
        mine = rank_shards(shards, rank, world)
        check_shards(mine, spec.seq_length, spec.predictions)
        self.host_batches = batches(mine, spec.batch_size, np.random.default_rng([spec.seed, rank]))
        share = f"{len(mine)} of {len(shards)} shards" if world > 1 else f"{len(shards)} shards"
        self.description = (
            f"h5py NVIDIA HDF5 ({share}, shuffled per shard), next shard read by a background thread; {self.handover}"
        )

    def next_numpy(self) -> dict[str, np.ndarray]:
        return next(self.host_batches)

    def next(self):
        return self.next_numpy()

    def close(self) -> None:
        self.host_batches.close()
