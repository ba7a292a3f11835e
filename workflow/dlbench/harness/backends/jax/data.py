"""Real-data input pipelines for the JAX backend: NVIDIA DALI for ImageNet, h5py for BERT; no TensorFlow.

ImageNet (`imagenet_pipeline`): NVIDIA's DALI ResNet-50 training pipeline as harness/dali_imagenet.py builds it
(the train shards with their DALI index files, this rank's 1/world of the records, shuffled, decoded,
random-resized-cropped, flipped and normalised), in NHWC (JAX's layout). Handing over: on a CPU as_array() (numpy),
placed on the device by the backend; on a GPU the dense batch by DLPack (jax.dlpack.from_dlpack, no copy).
Labels: image/class/label - datasets.LABEL_OFFSET as int32 [B]. Batches: (images float32 [B, S, S, 3], labels
int32 [B]) as the synthetic ones.

BERT (`bert_pipeline`): the hdf5/ shards of datasets.bert_shards, this rank's shards (bert_hdf5.rank_shards),
batches from bert_hdf5.batches (each shard read whole by a background thread while the current one is used,
records shuffled per shard by a seeded generator (seed, rank)); bert.synthetic_batch's dict of numpy arrays
(int32 ids, float32 weights), placed on the device by the backend.

Runs inside the JAX environment: imports the standard library, numpy, JAX, and DALI / h5py when built.
"""

from __future__ import annotations

import jax
import numpy as np

from ... import bert_hdf5, dali_imagenet, datasets
from ...spec import RunSpec


class ImagenetPipeline(datasets.InputPipeline):
    """A built DALI pipeline (harness/dali_imagenet.py, NHWC); `next()` returns (images, labels): numpy on a CPU,
    the images on the GPU on a GPU."""

    def __init__(
        self, spec: RunSpec, rank: int, world: int, threads: int, device: jax.Device, shuffle: bool = True
    ) -> None:
        self.gpu = device.platform == "gpu"
        self.pipe, description = dali_imagenet.train_pipeline(
            spec, rank, world, threads, device.local_hardware_id if self.gpu else None, "HWC", shuffle, "JAX"
        )
        self.description = (
            f"{description} (NHWC); to JAX by "
            f"{'DLPack (jax.dlpack.from_dlpack, no copy)' if self.gpu else 'as_array() -> device_put'}"
        )

    def next(self) -> tuple[np.ndarray | jax.Array, np.ndarray]:
        images, labels = self.pipe.run()
        labels = (labels.as_array().reshape(-1) - datasets.LABEL_OFFSET).astype(np.int32)
        if self.gpu:
            return jax.dlpack.from_dlpack(images.as_tensor()), labels
        return images.as_array(), labels

    def close(self) -> None:
        self.pipe = None  # DALI stops its threads when the pipeline goes


def imagenet_pipeline(
    spec: RunSpec, rank: int, world: int, threads: int, device: jax.Device, shuffle: bool = True
) -> ImagenetPipeline:
    """ResNet-50 training batches from the ImageNet TFRecords (module docstring); `shuffle=False` (tests):
    records in file order, no flip."""
    return ImagenetPipeline(spec, rank, world, threads, device, shuffle)


class BertPipeline(bert_hdf5.HostPipeline):
    """Batches from this rank's HDF5 shards (harness/bert_hdf5.py); `next()` returns the numpy feature dict."""

    handover = "numpy batches -> device_put"


def bert_pipeline(spec: RunSpec, rank: int, world: int) -> BertPipeline:
    """BERT pretraining batches from the HDF5 shards (module docstring)."""
    return BertPipeline(spec, rank, world)
