"""NVIDIA DALI's ImageNet training pipeline, built once for the backends that hand its outputs over themselves
(MXNet, JAX: DALI ships no plugin for the first, and the second takes numpy or DLPack). Standard library only at
import: DALI is imported when a pipeline is built (an optional library, see ARCHITECTURE.md).

NVIDIA's DALI ResNet-50 training pipeline: fn.readers.tfrecord over the train shards of
datasets.imagenet_train_shards with their DALI index files (image/encoded, image/class/label), shard_id=rank of
num_shards=world (each rank its 1/world of the records), random_shuffle, repeating forever; fn.decoders.image to
RGB ('cpu', or 'mixed' = nvJPEG on a GPU); fn.random_resized_crop to spec.image_size (area 0.08..1, aspect
3/4..4/3); fn.crop_mirror_normalize to float32 in `layout` (CHW or HWC), (x - mean) / std with
datasets.IMAGENET_MEAN/STD, mirrored when fn.random.coin_flip says so (not with shuffle off: the tests' file
order). num_threads = the rank's threads, prefetch_queue_depth 2: pipe.run() schedules the next iteration and
DALI's worker threads decode it while the framework computes the step. Outputs: (images, image/class/label).
"""

from __future__ import annotations

from . import datasets
from .spec import RunSpec, Unsupported

PREFETCH_QUEUE_DEPTH = 2  # DALI's default: iterations run ahead of the one handed out
CROP_AREA = (0.08, 1.0)  # fn.random_resized_crop's defaults, torchvision's RandomResizedCrop
CROP_ASPECT = (3.0 / 4.0, 4.0 / 3.0)
# mixed (nvJPEG) decode with NVIDIA's ResNet-50 example's buffer paddings: no reallocation mid-run
MIXED_DECODE = {"device": "mixed", "device_memory_padding": 211025920, "host_memory_padding": 140544512}
READER = "reader"  # the reader's name (pipe.epoch_size(READER): every shard's records)


def dali(framework: str):
    """DALI's modules (dali, fn, tfrecord, types), or Unsupported naming the framework that needs it."""
    try:
        import nvidia.dali as dali_module
        from nvidia.dali import fn, tfrecord, types
    except ImportError as exc:
        raise Unsupported(
            f"data 'real' with {framework} reads ImageNet through NVIDIA DALI (nvidia-dali-cuda120), "
            f"which is not importable here: {exc}"
        ) from None
    return dali_module, fn, tfrecord, types


def train_pipeline(
    spec: RunSpec,
    rank: int,
    world: int,
    threads: int,
    device_id: int | None,
    layout: str,
    shuffle: bool = True,
    framework: str = "",
    labels_on_device: bool = False,
):
    """The built pipeline (module docstring) and a description of it: device_id None = a CPU-only pipeline;
    labels_on_device: the labels copied to the GPU too (a framework plugin's iterator takes both from there)."""
    dali_module, fn, tfrecord, types = dali(framework or spec.framework)
    from nvidia.dali.pipeline import Pipeline

    files, indexes = datasets.imagenet_train_shards(spec)
    gpu = device_id is not None
    threads = max(1, threads)
    pipe = Pipeline(
        batch_size=spec.batch_size,
        num_threads=threads,
        device_id=device_id,
        seed=spec.seed + rank,
        prefetch_queue_depth=PREFETCH_QUEUE_DEPTH,
    )
    with pipe:
        inputs = fn.readers.tfrecord(
            path=files,
            index_path=indexes,
            shard_id=rank,
            num_shards=world,
            random_shuffle=shuffle,
            name=READER,
            features={
                "image/encoded": tfrecord.FixedLenFeature((), tfrecord.string, ""),
                "image/class/label": tfrecord.FixedLenFeature([1], tfrecord.int64, -1),
            },
        )
        decode = MIXED_DECODE if gpu else {"device": "cpu"}
        images = fn.decoders.image(inputs["image/encoded"], output_type=types.RGB, **decode)
        images = fn.random_resized_crop(
            images,
            size=(spec.image_size, spec.image_size),
            random_area=list(CROP_AREA),
            random_aspect_ratio=list(CROP_ASPECT),
        )
        images = fn.crop_mirror_normalize(
            images,
            dtype=types.FLOAT,
            output_layout=layout,
            mean=list(datasets.IMAGENET_MEAN),
            std=list(datasets.IMAGENET_STD),
            mirror=fn.random.coin_flip(probability=0.5) if shuffle else 0,
        )
        labels = inputs["image/class/label"]
        pipe.set_outputs(images, labels.gpu() if gpu and labels_on_device else labels)
    pipe.build()
    share = f"shard {rank} of {world}" if world > 1 else "all records"
    threads_text = f"{threads} thread{'s' if threads > 1 else ''}"
    description = (
        f"DALI {dali_module.__version__} fn.readers.tfrecord ({len(files)} files, {share}, "
        f"{'shuffled' if shuffle else 'in order'}), {'mixed (nvJPEG)' if gpu else 'CPU'} decode, "
        f"random-resized-crop + flip + normalise, {threads_text}, prefetch {PREFETCH_QUEUE_DEPTH}"
    )
    return pipe, description
