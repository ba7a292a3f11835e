"""Real-data input pipelines for the PyTorch backend: NVIDIA DALI for ImageNet, h5py for NVIDIA's BERT HDF5 shards.

ImageNet (`imagenet_pipeline`; as NVIDIA DeepLearningExamples' PyTorch ResNet-50 with DALI): NVIDIA's DALI
ResNet-50 training pipeline as harness/dali_imagenet.py builds it (HWC on CUDA, CHW on the CPU, labels on the
device), endless (no reader name, size -1: the reader wraps around), handed to PyTorch by DALIGenericIterator.
Batches: (images float32 [B, 3, S, S] on the device, channels_last memory on CUDA as the backend's model,
contiguous NCHW on the CPU; labels int64 [B], the record's label - datasets.LABEL_OFFSET, 0..999).

BERT (`bert_pipeline`; as DeepLearningExamples' run_pretraining.py reads them): the hdf5/ shards of
datasets.bert_shards. With at least `world` shards, rank r reads shards r, r + world, ...; with fewer, every
rank reads all of them; either way in an order shuffled per rank and pass. Each shard's arrays are read
whole (the next shard is read by another thread while this one's batches are served), its records
shuffled by a seeded numpy Generator (seed, rank), and cut into batches (what is left of one shard goes on
with the next, so every batch is full and no record is dropped), endlessly. A background thread prepares
the next PREFETCH_DEPTH batches (pinned host memory on CUDA, copied with non_blocking).
masked_lm_weights = (masked_lm_positions != 0) as float32: NVIDIA's layout has no weights, padding positions
are 0 and [CLS] (position 0) is never masked. Batches: bert.synthetic_batch's structure as
bert.batch_tensors (pytorch/bert.py) makes it: the dict of bert.FEATURES, int64 ids, float32 weights,
next_sentence_labels [B].

Runs inside the PyTorch environment: imports only the standard library, numpy, torch, DALI and h5py (the
last two when a pipeline is built).
"""

from __future__ import annotations

import queue
import threading

import numpy as np
import torch

from ... import bert, bert_hdf5, dali_imagenet, datasets, token_shards
from ...spec import RunSpec

PREFETCH_DEPTH = 2  # BERT: batches prepared ahead of the step (as DALI's prefetch_queue_depth for ImageNet)


def _cuda_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


# ------------------------------------------------------------------------------------------------ ImageNet
class ImagenetPipeline(datasets.InputPipeline):
    """`next()` -> (images, labels) on the device: the next batch of the DALI pipeline."""

    def __init__(
        self,
        spec: RunSpec,
        rank: int,
        world: int,
        threads: int,
        device: torch.device,
        memory_format: torch.memory_format | None = None,
        shuffle: bool = True,
    ) -> None:
        from nvidia.dali.plugin.pytorch import DALIGenericIterator

        device = torch.device(device)
        cuda = device.type == "cuda"
        if memory_format is None:
            memory_format = torch.channels_last if cuda else torch.contiguous_format
        # channels_last = NHWC in memory: DALI writes HWC and a permute gives the NCHW view without a copy.
        self.channels_last = memory_format is torch.channels_last
        pipe, self.description = dali_imagenet.train_pipeline(
            spec,
            rank,
            world,
            threads,
            _cuda_index(device) if cuda else None,
            layout="HWC" if self.channels_last else "CHW",
            shuffle=shuffle,
            labels_on_device=True,
        )
        # No reader_name and size -1: no epoch end, the reader wraps around (infinite repeat).
        self.iterator = DALIGenericIterator([pipe], ["images", "labels"], size=-1)
        self.pipe = pipe

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        out = next(self.iterator)[0]
        images = out["images"]
        if self.channels_last:
            images = images.permute(0, 3, 1, 2)  # [B, S, S, 3] -> NCHW view, channels_last strides
        labels = out["labels"].view(-1) - datasets.LABEL_OFFSET
        return images, labels

    def close(self) -> None:
        self.iterator = None
        self.pipe = None


def imagenet_pipeline(
    spec: RunSpec,
    rank: int,
    world: int,
    threads: int,
    device: torch.device | str,
    memory_format: torch.memory_format | None = None,
    shuffle: bool = True,
) -> ImagenetPipeline:
    """ResNet-50 training batches from the ImageNet TFRecords (see the module docstring). memory_format: the
    model's (default: channels_last on CUDA, contiguous otherwise); shuffle=False reads the records in file
    order (tests)."""
    return ImagenetPipeline(spec, rank, world, threads, torch.device(device), memory_format, shuffle)


EVAL_RESIZE = 256 / 224  # evaluation: shorter side to 1.14 x the crop, centre crop (the reference's)


class ImagenetEval:
    """The held-out split for time to quality: `epoch()` yields (images, labels) over this rank's 1/world of the
    validation records once, in file order (shorter side resized to EVAL_RESIZE x image_size, centre crop,
    normalised; no augmentation), the last batch partial."""

    def __init__(
        self,
        spec: RunSpec,
        rank: int,
        world: int,
        threads: int,
        device: torch.device,
        memory_format: torch.memory_format,
    ) -> None:
        import nvidia.dali as dali
        import nvidia.dali.fn as fn
        import nvidia.dali.tfrecord as tfrec
        import nvidia.dali.types as types
        from nvidia.dali.plugin.base_iterator import LastBatchPolicy
        from nvidia.dali.plugin.pytorch import DALIGenericIterator

        cuda = device.type == "cuda"
        self.channels_last = memory_format is torch.channels_last
        paths, indexes = datasets.imagenet_shards(spec, "validation")
        size = spec.image_size
        pipe = dali.Pipeline(
            batch_size=spec.batch_size,
            num_threads=max(1, threads),
            device_id=_cuda_index(device) if cuda else None,
            seed=spec.seed + rank,
        )
        with pipe:
            inputs = fn.readers.tfrecord(
                path=paths,
                index_path=indexes,
                shard_id=rank,
                num_shards=world,
                random_shuffle=False,
                features={
                    "image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
                    "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1),
                },
                name="Reader",
            )
            images = fn.decoders.image(
                inputs["image/encoded"], output_type=types.RGB, device="mixed" if cuda else "cpu"
            )
            images = fn.resize(images, resize_shorter=round(size * EVAL_RESIZE))
            images = fn.crop_mirror_normalize(
                images,
                dtype=types.FLOAT,
                crop=(size, size),
                output_layout="HWC" if self.channels_last else "CHW",
                mean=list(datasets.IMAGENET_MEAN),
                std=list(datasets.IMAGENET_STD),
            )
            labels = inputs["image/class/label"]
            pipe.set_outputs(images, labels.gpu() if cuda else labels)
        self.iterator = DALIGenericIterator(
            [pipe],
            ["images", "labels"],
            reader_name="Reader",
            last_batch_policy=LastBatchPolicy.PARTIAL,
            auto_reset=True,
        )

    def epoch(self):
        for out in self.iterator:
            images = out[0]["images"]
            if self.channels_last:
                images = images.permute(0, 3, 1, 2)
            yield images, out[0]["labels"].view(-1) - datasets.LABEL_OFFSET


# ------------------------------------------------------------------------------------------------ BERT
def _to_tensor(value: np.ndarray, pin: bool) -> torch.Tensor:
    # the dtypes pytorch/bert.py's batch_tensors gives the step: int64 ids (gather, cross_entropy), float32 weights
    tensor = torch.from_numpy(np.ascontiguousarray(value, np.float32 if value.dtype.kind == "f" else np.int64))
    return tensor.pin_memory() if pin else tensor


class BertPipeline(datasets.InputPipeline):
    """`next()` -> the next batch (a dict of bert.FEATURES tensors on the device); a background thread reads
    the shards and prepares the following batches."""

    def __init__(self, spec: RunSpec, rank: int, world: int, device: torch.device) -> None:
        self.device = torch.device(device)
        self.shards = bert_hdf5.rank_shards(datasets.bert_shards(spec, "hdf5"), rank, world)
        self.records = bert_hdf5.check_shards(self.shards, spec.seq_length, spec.predictions)
        self.host_batches = bert_hdf5.batches(self.shards, spec.batch_size, np.random.default_rng([spec.seed, rank]))
        self.pin = self.device.type == "cuda"
        self.queue: queue.Queue = queue.Queue(maxsize=PREFETCH_DEPTH)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._produce, name=f"bert-hdf5-rank{rank}", daemon=True)
        self.thread.start()
        self.description = (
            f"h5py NVIDIA HDF5 shards ({len(self.shards)} for this rank), whole shard read "
            f"ahead, shuffled per shard, background thread, prefetch {PREFETCH_DEPTH} batches"
        )

    def _produce(self) -> None:
        try:
            for batch in self.host_batches:
                item = {name: _to_tensor(batch[name], self.pin) for name in bert.FEATURES}
                while not self.stop.is_set():
                    try:
                        self.queue.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if self.stop.is_set():
                    return
        except BaseException as exc:  # handed to the consumer: next() raises it
            self.queue.put(exc)

    def next(self) -> dict[str, torch.Tensor]:
        item = self.queue.get()
        if isinstance(item, BaseException):
            raise RuntimeError(f"BERT input pipeline failed: {item}") from item
        if self.device.type == "cpu":
            return item
        return {name: value.to(self.device, non_blocking=True) for name, value in item.items()}

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


def bert_pipeline(spec: RunSpec, rank: int, world: int, device: torch.device | str) -> BertPipeline:
    """BERT pretraining batches from the HDF5 shards (see the module docstring)."""
    return BertPipeline(spec, rank, world, torch.device(device))


def bert_eval_batches(spec: RunSpec, rank: int, world: int, device: torch.device) -> list[dict[str, torch.Tensor]]:
    """Time to quality: the held-out shard (datasets.bert_split), this rank's 1/world of its sequences (every
    world-th), in batches of spec.batch_size (the last one partial), resident on the device: read once."""
    shards = datasets.bert_shards(spec, "hdf5", "heldout")
    bert_hdf5.check_shards(shards, spec.seq_length, spec.predictions)
    arrays = [bert_hdf5.read_shard(path) for path in shards]
    mine = {name: np.concatenate([a[name] for a in arrays])[rank::world] for name in bert.FEATURES}
    count = len(mine["input_ids"])
    return [
        {name: _to_tensor(value[start : start + spec.batch_size], False).to(device) for name, value in mine.items()}
        for start in range(0, count, spec.batch_size)
    ]


class LlamaPipeline(datasets.InputPipeline):
    """Llama's packed token shards (token_shards.TokenShards, checked when built): `next()` -> tokens
    [batch, seq_length + 1] int64 on the device. Read in the step itself (a copy of batch x (seq_length + 1)
    tokens out of the memory maps: microseconds, no thread needed); on CUDA through pinned memory, non_blocking."""

    def __init__(self, spec: RunSpec, vocab_size: int, rank: int, world: int, device: torch.device) -> None:
        self.spec, self.device = spec, torch.device(device)
        self.shards = token_shards.TokenShards(
            datasets.data_dir(spec), spec.model, vocab_size, spec.seq_length, rank, world, spec.seed
        )
        self.description = self.shards.describe()

    def next(self) -> torch.Tensor:
        tokens = torch.from_numpy(self.shards.batch(self.spec.batch_size))
        if self.device.type == "cpu":
            return tokens
        return tokens.pin_memory().to(self.device, non_blocking=True)


def llama_pipeline(spec: RunSpec, cfg, rank: int, world: int, device: torch.device) -> LlamaPipeline:
    """Llama batches from the token shards (cfg: llama.LlamaConfig, whose vocabulary the data must fit)."""
    return LlamaPipeline(spec, cfg.vocab_size, rank, world, device)
