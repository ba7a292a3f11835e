"""Real-data input pipelines for the MXNet backend: NVIDIA DALI for ImageNet, h5py for BERT.

ImageNet (`imagenet_pipeline`; NVIDIA's DALI ResNet-50 training pipeline, harness/dali_imagenet.py, in NCHW): DALI 2.4
ships no MXNet plugin, so the pipeline is run here and its outputs handed to MXNet.
Handing over: on CPU the batch's
as_array() copied into an mx.nd.array; on a GPU the dense batch is exported through DLPack and taken by
mx.nd.from_dlpack without a copy (DALI 2.4's default dynamic executor never reuses an output buffer that is
still referenced; `__dlpack__()` with no stream waits on the host until DALI's work on it is done). Labels:
image/class/label - datasets.LABEL_OFFSET as float32 [B] (the Gluon SoftmaxCrossEntropyLoss takes float
labels), on the context. Batches: (images float32 [B, 3, S, S], labels float32 [B]) as the synthetic ones.

BERT (`bert_pipeline`; NVIDIA's run_pretraining.py pretraining_dataset): the hdf5/ shards of
datasets.bert_shards, this rank's shards round-robin (shards[rank::world]; with fewer shards than ranks,
shard rank % count), each epoch in a seeded shuffled order; a shard is read whole (h5py) and its samples taken
in a seeded shuffled order, batches running on into the next shard; the next shard is read by a background
thread while the current one is used (as NVIDIA's loader does). NVIDIA's layout has no weights:
masked_lm_weights = (masked_lm_positions != 0) ([CLS] at position 0 is never masked, padding positions are 0).
Batches: bert.arrays (mxnet/bert.py) of bert.synthetic_batch's dtypes (int32 ids, mask, segments, positions, labels and
next_sentence_labels [B], float32 weights), i.e. (inputs, targets) in the order the BERT step takes them.

Runs inside the MXNet environment: imports the standard library, numpy, MXNet, and DALI / h5py when built.
"""

from __future__ import annotations

import mxnet as mx
import numpy as np

from ... import bert_hdf5, dali_imagenet, datasets
from ...spec import RunSpec
from . import bert as mx_bert


class ImagenetPipeline(datasets.InputPipeline):
    """A built DALI pipeline (harness/dali_imagenet.py, NCHW); `next()` returns (images, labels) on the context."""

    def __init__(
        self, spec: RunSpec, rank: int, world: int, threads: int, ctx: mx.Context, shuffle: bool = True
    ) -> None:
        self.ctx = ctx
        self.gpu = ctx.device_type == "gpu"
        self.pipe, description = dali_imagenet.train_pipeline(
            spec, rank, world, threads, ctx.device_id if self.gpu else None, "CHW", shuffle
        )
        self.records = self.pipe.epoch_size(dali_imagenet.READER)  # all shards' records (1/world per rank)
        self.description = (
            f"{description}; to MXNet by "
            f"{'DLPack (mx.nd.from_dlpack, no copy)' if self.gpu else 'as_array() -> mx.nd.array'}"
        )

    def next(self) -> tuple[mx.nd.NDArray, mx.nd.NDArray]:
        images, labels = self.pipe.run()
        labels = labels.as_array().reshape(-1) - datasets.LABEL_OFFSET
        labels = mx.nd.array(labels, ctx=self.ctx, dtype=np.float32)
        if self.gpu:
            # no stream given: DALI waits on the host until the batch is ready, then MXNet owns a reference
            return mx.nd.from_dlpack(images.as_tensor().__dlpack__()), labels
        return mx.nd.array(images.as_array(), ctx=self.ctx, dtype=np.float32), labels

    def close(self) -> None:
        self.pipe = None  # DALI stops its threads when the pipeline goes


def imagenet_pipeline(
    spec: RunSpec, rank: int, world: int, threads: int, device: mx.Context, shuffle: bool = True
) -> ImagenetPipeline:
    """ResNet-50 training batches from the ImageNet TFRecords (module docstring); `shuffle=False` (tests):
    records in file order, no flip."""
    return ImagenetPipeline(spec, rank, world, threads, device, shuffle)


class BertPipeline(bert_hdf5.HostPipeline):
    """Batches from this rank's HDF5 shards (harness/bert_hdf5.py); `next()` returns (inputs, targets) on the
    context."""

    handover = "numpy batches -> mx.nd.array"

    def __init__(self, spec: RunSpec, rank: int, world: int, ctx: mx.Context) -> None:
        super().__init__(spec, rank, world)
        self.ctx = ctx

    def next(self) -> tuple[list[mx.nd.NDArray], list[mx.nd.NDArray]]:
        return mx_bert.arrays(self.next_numpy(), self.ctx)


def bert_pipeline(spec: RunSpec, rank: int, world: int, device: mx.Context) -> BertPipeline:
    """BERT pretraining batches from the HDF5 shards (module docstring)."""
    return BertPipeline(spec, rank, world, device)
