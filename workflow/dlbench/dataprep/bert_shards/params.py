"""What every part of the BERT shard builder shares: the parameters of a run, the features it writes, the
statistics it counts, and the error for bad input."""

from __future__ import annotations

import dataclasses

MANIFEST_FORMAT = "dlbench-bert-shards/1"
INT_FEATURES_L = ("input_ids", "input_mask", "segment_ids")
INT_FEATURES_P = ("masked_lm_positions", "masked_lm_ids")
HDF5_DTYPES = {
    "input_ids": "i4",
    "input_mask": "i1",
    "segment_ids": "i1",
    "masked_lm_positions": "i4",
    "masked_lm_ids": "i4",
    "next_sentence_labels": "i1",
}
STAT_KEYS = (
    "documents",
    "sentences",
    "document_tokens",
    "document_passes",
    "short_target_passes",
    "instances",
    "short_target_instances",
    "short_length_instances",
    "truncated_instances",
    "tokens",
    "predictions",
    "mask_token",
    "kept",
    "random_token",
    "random_next",
    "forced_random_next",
)


# an instance is "short" below this share of max_seq_length tokens (the fidelity measure of benchmarks/dataprep_bert.py)
SHORT_LENGTH_SHARE = 0.9


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
    # gzip 1 after HDF5's byte shuffle: smaller files than NVIDIA's gzip 4 alone at ~60% of its CPU; h5py and
    # every HDF5 reader undo both filters transparently (uncompressed, HDF5 writing was half of a small run's
    # time). Level 1 deflates with Intel's ISA-L (writer.py: 3.8x faster than zlib's level 1, 2.6% larger)
    hdf5_gzip_level: int = 1
    hdf5_shuffle: bool = True

    def manifest(self) -> dict:
        out = dataclasses.asdict(self)
        out["formats"] = list(self.formats)
        return out
