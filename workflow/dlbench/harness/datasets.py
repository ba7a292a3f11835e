"""Where a real-data run finds its prepared shards (standard library only). The file names are
dlbench/layout.py's, shared with the converters in workflow/dlbench/dataprep/ that write them and their
`verify` steps, which check them before any run starts.

ImageNet (dataprep/imagenet/): <dir>/train-00000-of-NNNNN ... (tf.train.Example, build_imagenet_data.py's
schema, labels 1..1000) and <dir>/dali_index/<shard>.idx (DALI's `<offset> <bytes>` lines).
BERT (dataprep/bert_shards/): <dir>/tfrecord/<name>-00000-of-NNNNN (Google's features) and
<dir>/hdf5/<name>-00000-of-NNNNN.hdf5 (NVIDIA's layout), for one sequence length / masked positions.

Every rank reads the whole training set in its own shuffled order (DALI: its 1/world of the records), as the
reference input pipelines do; the time to read, decode and augment is part of every measured step.
"""

from __future__ import annotations

import json
from pathlib import Path

from .. import layout
from .spec import RunSpec, Unsupported

# Per-channel ImageNet mean and standard deviation of 0..255 RGB pixels (the usual normalisation).
IMAGENET_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
IMAGENET_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
# build_imagenet_data.py's labels are 1..1000 (0 = background); the models have 1000 classes 0..999.
LABEL_OFFSET = 1


def data_dir(spec: RunSpec) -> Path:
    if not spec.data_dir:
        raise Unsupported("data 'real' needs --data-dir (the workflow passes the prepared dataset's directory)")
    path = Path(spec.data_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"--data-dir {path}: no such directory (prepare it with the workflow's data rules)")
    return path


def imagenet_train_shards(spec: RunSpec) -> tuple[list[str], list[str]]:
    """(TFRecord shards, their DALI index files), sorted by name."""
    return imagenet_shards(spec, "train")


def imagenet_shards(spec: RunSpec, split: str) -> tuple[list[str], list[str]]:
    """(TFRecord shards of a split, train or validation, their DALI index files), sorted by name."""
    root = data_dir(spec)
    shards = layout.imagenet_shards(root, split)
    if not shards:
        raise FileNotFoundError(f"{root}: no ImageNet {split} shards ({split}-00000-of-NNNNN)")
    indexes = [root / layout.dali_index(p.name) for p in shards]
    missing = [str(i) for i in indexes if not i.is_file()]
    if missing:
        raise FileNotFoundError(f"{root}: DALI index files missing: {', '.join(missing[:3])}")
    return [str(p) for p in shards], [str(i) for i in indexes]


def imagenet_records(spec: RunSpec, split: str) -> int:
    """Records of a split: the lines of its shards' DALI index files (one per record)."""
    return sum(len(Path(index).read_text().splitlines()) for index in imagenet_shards(spec, split)[1])


def bert_shards(spec: RunSpec, fmt: str, split: str = "train") -> list[str]:
    """BERT shards of one format: 'tfrecord' (Google's features) or 'hdf5' (NVIDIA's), sorted by name; their
    sequence length and masked positions must be the run's. split: the shards a run trains on ('train') or, for
    time to quality, the held-out one ('heldout'; bert_split)."""
    manifest = data_dir(spec) / layout.MANIFEST
    if manifest.is_file():
        params = json.loads(manifest.read_text()).get("parameters", {})
        shape = (params.get("max_seq_length"), params.get("max_predictions"))
        if shape != (spec.seq_length, spec.predictions):
            raise Unsupported(
                f"{manifest}: shards of {shape[0]} tokens / {shape[1]} masked positions; this run "
                f"needs {spec.seq_length} / {spec.predictions}"
            )
    shards = layout.bert_shards(data_dir(spec), fmt)
    if not shards:
        raise FileNotFoundError(f"{data_dir(spec) / fmt}: no BERT {fmt} shards (<name>-00000-of-NNNNN)")
    return bert_split([str(p) for p in shards], bool(spec.quality), split)


def bert_split(shards: list, quality: bool, split: str) -> list:
    """Time to quality holds out the last shard (MLPerf's BERT evaluates on its own held-out set): the data prep puts
    a document, its duplicates and its "random next" sentences in one shard (index modulo the shard count), so no
    held-out text is trained on. Throughput runs train on every shard."""
    if not quality:
        if split != "train":
            raise ValueError("a throughput run has no held-out BERT split")
        return shards
    if len(shards) < 2:
        raise Unsupported(
            f"time to quality for BERT holds out the last shard, and there is only {len(shards)} "
            "(prepare at least 2: datasets.bert.shards)"
        )
    return shards[-1:] if split == "heldout" else shards[:-1]


def bert_records(spec: RunSpec, split: str) -> int:
    """Sequences in a split's shards (bert_shards), from the manifest the data preparation wrote."""
    manifest = data_dir(spec) / layout.MANIFEST
    if not manifest.is_file():
        raise Unsupported(
            f"{manifest}: missing; time to quality counts BERT's sequences from it (prepare the data "
            "with the workflow's rules)"
        )
    shards = sorted(json.loads(manifest.read_text())["shards"], key=lambda shard: shard["index"])
    return sum(bert_split([shard["instances"] for shard in shards], bool(spec.quality), split))


class InputPipeline:
    """What every backend's real-data pipeline offers: `next()` (the next batch, on the device, in the layout the
    step takes), the iterator protocol, `describe()` for the environment line, and `close()`."""

    description = ""

    def next(self):
        raise NotImplementedError

    def __next__(self):
        return self.next()

    def __iter__(self):
        return self

    def describe(self) -> str:
        return self.description

    def close(self) -> None:
        """Stop background readers (nothing to do by default)."""
