"""Real-data input pipelines for the PaddlePaddle backend: NVIDIA DALI for ImageNet, h5py for BERT's HDF5 shards.

ImageNet (`imagenet_pipeline`): NVIDIA's DALI ResNet-50 training pipeline as harness/dali_imagenet.py builds it (the
train shards with their DALI index files, this rank's 1/world of the records, shuffled, decoded,
random-resized-cropped, flipped and normalised), in NCHW (Paddle's layout). DALI's own Paddle plugin builds
Paddle 1.x tensors (it cannot take a CPU-only pipeline with Paddle 3), so the batches are handed over as the
JAX backend does: on a CPU as_array() (numpy) -> paddle.to_tensor; on a GPU the dense batch by DLPack
(paddle.utils.dlpack.from_dlpack, no copy). Batches: (images float32 [B, 3, S, S], labels int64 [B],
image/class/label - datasets.LABEL_OFFSET).

BERT (`bert_pipeline`): the hdf5/ shards of datasets.bert_shards, this rank's shards (bert_hdf5.rank_shards),
batches from bert_hdf5.batches (each shard read whole by a background thread while the current one is used,
records shuffled per shard by a seeded generator (seed, rank)), as Paddle tensors in pretraining's dtypes
(backends/paddle/bert.py: batch_tensors).

Runs inside the Paddle environment: imports the standard library, numpy, Paddle, and DALI / h5py when built.
"""

from __future__ import annotations

import numpy as np
import paddle

from ... import bert_hdf5, dali_imagenet, datasets
from ...spec import RunSpec
from .bert import batch_tensors


class ImagenetPipeline(datasets.InputPipeline):
    """A built DALI pipeline (harness/dali_imagenet.py, CHW); `next()` returns (images, labels) as Paddle tensors
    on the rank's device."""

    def __init__(
        self, spec: RunSpec, rank: int, world: int, threads: int, gpu: int | None, shuffle: bool = True
    ) -> None:
        self.gpu = gpu
        self.pipe, description = dali_imagenet.train_pipeline(
            spec, rank, world, threads, gpu, "CHW", shuffle, "PaddlePaddle"
        )
        self.description = (
            f"{description} (NCHW); to Paddle by "
            f"{'DLPack (paddle.utils.dlpack.from_dlpack, no copy)' if gpu is not None else 'as_array() -> to_tensor'}"
        )

    def next(self) -> tuple[paddle.Tensor, paddle.Tensor]:
        images, labels = self.pipe.run()
        labels = paddle.to_tensor((labels.as_array().reshape(-1) - datasets.LABEL_OFFSET).astype(np.int64))
        if self.gpu is not None:
            return paddle.utils.dlpack.from_dlpack(images.as_tensor()), labels
        return paddle.to_tensor(images.as_array()), labels

    def close(self) -> None:
        self.pipe = None  # DALI stops its threads when the pipeline goes


def imagenet_pipeline(
    spec: RunSpec, rank: int, world: int, threads: int, gpu: int | None, shuffle: bool = True
) -> ImagenetPipeline:
    """ResNet-50 training batches from the ImageNet TFRecords (module docstring); gpu: the rank's GPU index, or
    None on a CPU; `shuffle=False` (tests): records in file order, no flip."""
    return ImagenetPipeline(spec, rank, world, threads, gpu, shuffle)


class BertPipeline(bert_hdf5.HostPipeline):
    """Batches from this rank's HDF5 shards (harness/bert_hdf5.py); `next()` returns the feature dict as tensors."""

    handover = "numpy batches -> to_tensor"

    def next(self) -> dict[str, paddle.Tensor]:
        return batch_tensors(self.next_numpy())


def bert_pipeline(spec: RunSpec, rank: int, world: int) -> BertPipeline:
    """BERT pretraining batches from the HDF5 shards (module docstring)."""
    return BertPipeline(spec, rank, world)
