"""Real-data input pipelines for the TensorFlow backend (tf.data), as the TF Model Garden and Google's BERT build them.

ImageNet (`imagenet_pipeline`; official/vision/dataloaders/classification_input.py with the legacy
resnet/imagenet_preprocessing.py feature spec): the train shards of datasets.imagenet_train_shards, this rank's
1/world of them (Dataset.shard on the file names when there are at least `world` shards, else on the records of
all of them, read in a fixed order), shuffled file order, TFRecordDataset interleaved over the files (parallel
reads), a shuffle buffer of SHUFFLE_BUFFER records, repeat; then a parallel map: parse (image/encoded,
image/class/label, the image/object/bbox/* VarLenFeatures), decode_and_random_crop
(tf.image.sample_distorted_bounding_box over the JPEG's shape from extract_jpeg_shape, the record's boxes or the
whole image, min_object_covered 0.1, aspect 3/4..4/3, area 0.08..1, 10 attempts, then decode_and_crop_jpeg: only the
window is decoded), bilinear resize to spec.image_size, random horizontal flip, (x - mean) / std with
datasets.IMAGENET_MEAN/STD, cast to the compute dtype, label - datasets.LABEL_OFFSET as int32; batch (drop the
remainder: every batch has the static shape the step was traced with), prefetch(AUTOTUNE).
Batches: (images [B, S, S, 3] NHWC in the compute dtype, labels [B] int32 0..999).

BERT (`bert_pipeline`; google-research/bert run_pretraining.py's input_fn_builder): the tfrecord/ shards of
datasets.bert_shards, this rank's share as above, repeat, shuffled file order, interleave (cycle length
min(threads, files)), shuffle(100), _decode_record (FixedLenFeature of exactly [seq_length] / [predictions] / [1],
int64 -> int32), batch(drop_remainder), prefetch. Batches: bert.synthetic_batch's structure (the dict of
bert.FEATURES, int32 ids, float32 weights, next_sentence_labels [B]).

Several ranks (MultiWorkerMirroredStrategy): the dataset is made per worker by
strategy.distribute_datasets_from_function (per-replica batch, our own sharding, no auto-shard), whose iterator
puts each batch on the worker's device; one rank on a GPU: OneDeviceStrategy(device)'s distributed dataset (the
Model Garden's one_device strategy; prefetch_to_device alone does not keep batches on the GPU in eager TF 2).
The iterator is created once, when the pipeline is built; `next()` gives the following batch (a host call of a
few microseconds; the tf.function step is traced once, since every batch has the same shapes and dtypes).

Runs inside the TensorFlow environment: imports only the standard library and TensorFlow.
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "tensorflow"  # tf.keras is Keras 3: make sure it runs on TensorFlow

import tensorflow as tf  # noqa: E402

from ... import bert, datasets  # noqa: E402
from ...spec import RunSpec  # noqa: E402

AUTOTUNE = tf.data.AUTOTUNE
SHUFFLE_BUFFER = 10_000  # records: the Model Garden's ImageNet shuffle_buffer_size
BERT_SHUFFLE_BUFFER = 100  # run_pretraining.py's d.shuffle(buffer_size=100)
CYCLE_LENGTH = 10  # files read at once: the Model Garden's interleave cycle_length
# Model Garden preprocess_ops.random_crop_image_v2 / imagenet_preprocessing._decode_crop_and_flip
CROP_AREA = (0.08, 1.0)
CROP_ASPECT = (3.0 / 4.0, 4.0 / 3.0)
CROP_MIN_OBJECT_COVERED = 0.1
CROP_ATTEMPTS = 10
BOX_KEYS = ("image/object/bbox/ymin", "image/object/bbox/xmin", "image/object/bbox/ymax", "image/object/bbox/xmax")


class Pipeline(datasets.InputPipeline):
    """An iterator over a tf.data pipeline's batches, created once; `next()` returns the next batch."""

    def __init__(
        self, make_dataset, world: int, strategy: tf.distribute.Strategy | None, device: str | None, description: str
    ) -> None:
        if world > 1 and strategy is not None:
            # per worker: its own dataset (batch per replica, our sharding), batches put on its device
            self.dataset = strategy.distribute_datasets_from_function(lambda _context: make_dataset())
        elif device:
            # one rank on a device: batches prefetched onto it (see the module's docstring)
            self.dataset = tf.distribute.OneDeviceStrategy(device).experimental_distribute_dataset(make_dataset())
        else:
            self.dataset = make_dataset()
        self.iterator = iter(self.dataset)
        self.description = description

    def next(self):
        return next(self.iterator)


def _options(threads: int) -> tf.data.Options:
    options = tf.data.Options()
    options.threading.private_threadpool_size = max(1, threads)  # this rank's cores (rank.pin_cores)
    options.threading.max_intra_op_parallelism = 1  # one op per element at a time; elements run in parallel
    return options


def _share(files: list[str], rank: int, world: int) -> str:
    """How this rank's records are chosen (for the environment line)."""
    if world == 1:
        return f"{len(files)} files"
    if len(files) < world:
        return f"records sharded 1/{world} over {len(files)} files"
    return f"{len(files[rank::world])} of {len(files)} files"


def _records(
    files: list[str], rank: int, world: int, threads: int, shuffle_buffer: int, bert_order: bool = False
) -> tf.data.Dataset:
    """This rank's serialized records, shuffled, repeated forever."""
    if world > 1 and len(files) < world:
        # fewer files than ranks: every rank reads all files in one fixed (deterministic) order, keeps 1/world
        reads = min(len(files), CYCLE_LENGTH)
        dataset = tf.data.TFRecordDataset(files, num_parallel_reads=reads).shard(world, rank)
        dataset = dataset.shuffle(shuffle_buffer, reshuffle_each_iteration=True).repeat()
        return dataset
    names = tf.data.Dataset.from_tensor_slices(files)
    if world > 1:
        names = names.shard(world, rank)  # before any shuffle: the ranks' shares are disjoint
    count = len(files[rank::world]) if world > 1 else len(files)
    cycle = min(count, threads if bert_order else CYCLE_LENGTH)
    if bert_order:  # run_pretraining.py: repeat, shuffle the files, interleave, shuffle(100)
        names = names.repeat().shuffle(count)
        dataset = names.interleave(
            tf.data.TFRecordDataset, cycle_length=cycle, num_parallel_calls=cycle, deterministic=False
        ).shuffle(shuffle_buffer)
    else:  # Model Garden: shuffle the files, interleave, shuffle buffer, repeat
        names = names.shuffle(count, reshuffle_each_iteration=True)
        dataset = names.interleave(
            tf.data.TFRecordDataset, cycle_length=cycle, num_parallel_calls=AUTOTUNE, deterministic=False
        )
        dataset = dataset.shuffle(shuffle_buffer, reshuffle_each_iteration=True).repeat()
    return dataset


# ------------------------------------------------------------------------- ImageNet
IMAGENET_FEATURES = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string, default_value=""),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64, default_value=-1),
    **{key: tf.io.VarLenFeature(tf.float32) for key in BOX_KEYS},
}


def parse_imagenet(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(JPEG bytes, label as stored (1..1000), boxes [1, N, 4] as ymin, xmin, ymax, xmax in 0..1)."""
    features = tf.io.parse_single_example(record, IMAGENET_FEATURES)
    boxes = tf.stack([features[key].values for key in BOX_KEYS], axis=-1)  # [N, 4]
    return features["image/encoded"], features["image/class/label"], boxes[None]


def decode_and_random_crop(jpeg: tf.Tensor, boxes: tf.Tensor) -> tf.Tensor:
    """A random window (covering >= 10% of a box, or of the image when it has none), decoded alone: uint8 HWC."""
    begin, size, _ = tf.image.sample_distorted_bounding_box(
        tf.image.extract_jpeg_shape(jpeg),
        bounding_boxes=boxes,
        min_object_covered=CROP_MIN_OBJECT_COVERED,
        aspect_ratio_range=CROP_ASPECT,
        area_range=CROP_AREA,
        max_attempts=CROP_ATTEMPTS,
        use_image_if_no_bounding_boxes=True,
    )
    offset_y, offset_x, _ = tf.unstack(begin)
    height, width, _ = tf.unstack(size)
    return tf.image.decode_and_crop_jpeg(jpeg, tf.stack([offset_y, offset_x, height, width]), channels=3)


def imagenet_train_map(size: int, dtype: tf.DType):
    mean = tf.constant(datasets.IMAGENET_MEAN, tf.float32)
    std = tf.constant(datasets.IMAGENET_STD, tf.float32)

    def preprocess(record):
        jpeg, label, boxes = parse_imagenet(record)
        image = tf.image.resize(decode_and_random_crop(jpeg, boxes), (size, size), method="bilinear")
        image = tf.image.random_flip_left_right(image)
        image = tf.cast((image - mean) / std, dtype)
        image.set_shape((size, size, 3))
        return image, tf.cast(label, tf.int32) - datasets.LABEL_OFFSET

    return preprocess


EVAL_RESIZE = 256 / 224  # evaluation: shorter side to 1.14 x the crop, centre crop (the reference's)


def imagenet_eval_dataset(spec: RunSpec, rank: int, world: int, threads: int, dtype=None) -> tf.data.Dataset:
    """The held-out split for time to quality: this rank's 1/world of the validation records, once, in file order
    (shorter side resized to EVAL_RESIZE x image_size, centre crop, normalised; no augmentation), batched with the
    last batch partial: (images [b, S, S, 3], labels [b] int32 0..999)."""
    files, _ = datasets.imagenet_shards(spec, "validation")
    size, dtype = spec.image_size, _compute_dtype(dtype)
    mean = tf.constant(datasets.IMAGENET_MEAN, tf.float32)
    std = tf.constant(datasets.IMAGENET_STD, tf.float32)
    shorter = round(size * EVAL_RESIZE)

    def preprocess(record):
        jpeg, label, _ = parse_imagenet(record)
        image = tf.image.decode_jpeg(jpeg, channels=3)
        shape = tf.cast(tf.shape(image)[:2], tf.float32)
        scale = shorter / tf.reduce_min(shape)
        image = tf.image.resize(image, tf.cast(tf.round(shape * scale), tf.int32), method="bilinear")
        image = tf.image.resize_with_crop_or_pad(image, size, size)
        image = tf.cast((image - mean) / std, dtype)
        return image, tf.cast(label, tf.int32) - datasets.LABEL_OFFSET

    dataset = tf.data.TFRecordDataset(files).shard(world, rank) if world > 1 else tf.data.TFRecordDataset(files)
    dataset = dataset.map(preprocess, num_parallel_calls=AUTOTUNE).batch(spec.batch_size).prefetch(AUTOTUNE)
    return dataset.with_options(_options(threads))


def _compute_dtype(dtype) -> tf.DType:
    if dtype is None:
        dtype = tf.keras.mixed_precision.global_policy().compute_dtype
    return tf.as_dtype(dtype)


def imagenet_pipeline(
    spec: RunSpec,
    rank: int,
    world: int,
    threads: int,
    device: str | None = None,
    *,
    strategy: tf.distribute.Strategy | None = None,
    dtype=None,
) -> Pipeline:
    """This rank's ImageNet training batches: (images [B, S, S, 3] NHWC, labels [B] int32 0..999).

    device: a TensorFlow device name ("/GPU:0") or None for the CPU; strategy: the backend's (several ranks);
    dtype: the images' dtype, by default the Keras global policy's compute dtype (the model's first layer's)."""
    files, _ = datasets.imagenet_train_shards(spec)
    dtype = _compute_dtype(dtype)
    share = _share(files, rank, world)

    def make_dataset():
        dataset = _records(files, rank, world, threads, SHUFFLE_BUFFER)
        dataset = dataset.map(
            imagenet_train_map(spec.image_size, dtype), num_parallel_calls=AUTOTUNE, deterministic=False
        )
        dataset = dataset.batch(spec.batch_size, drop_remainder=True)
        return dataset.prefetch(AUTOTUNE).with_options(_options(threads))

    description = (
        f"tf.data TFRecordDataset ({share}, interleaved), shuffle {SHUFFLE_BUFFER}, "
        f"parallel map AUTOTUNE (JPEG decode_and_crop, random crop + flip, resize, normalise, "
        f"{dtype.name}), prefetch AUTOTUNE, {max(1, threads)} threads"
    )
    return Pipeline(make_dataset, world, strategy, device, description)


# ------------------------------------------------------------------------- BERT
def bert_features(seq_length: int, predictions: int) -> dict[str, tf.io.FixedLenFeature]:
    """run_pretraining.py's name_to_features."""
    return {
        "input_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
        "masked_lm_positions": tf.io.FixedLenFeature([predictions], tf.int64),
        "masked_lm_ids": tf.io.FixedLenFeature([predictions], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([predictions], tf.float32),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }


def decode_record(record: tf.Tensor, name_to_features: dict) -> dict[str, tf.Tensor]:
    """run_pretraining.py's _decode_record: parse, int64 -> int32 (tf.Example has only int64)."""
    example = tf.io.parse_single_example(record, name_to_features)
    return {name: tf.cast(t, tf.int32) if t.dtype == tf.int64 else t for name, t in example.items()}


def _bert_step_layout(batch: dict) -> dict[str, tf.Tensor]:
    """A parsed batch in the step's layout: bert.FEATURES, next_sentence_labels [B, 1] -> [B]."""
    batch = dict(batch)
    batch["next_sentence_labels"] = tf.reshape(batch["next_sentence_labels"], [-1])
    return {name: batch[name] for name in bert.FEATURES}


def bert_eval_dataset(spec: RunSpec, threads: int) -> tf.data.Dataset:
    """Time to quality: the held-out TFRecord shard (datasets.bert_split), in order, once per evaluation, in
    batches of spec.batch_size (the last one partial). One worker (setup_quality refuses several)."""
    name_to_features = bert_features(spec.seq_length, spec.predictions)
    dataset = tf.data.TFRecordDataset(datasets.bert_shards(spec, "tfrecord", "heldout"))
    dataset = dataset.map(lambda record: decode_record(record, name_to_features), num_parallel_calls=AUTOTUNE)
    return dataset.batch(spec.batch_size).map(_bert_step_layout).prefetch(AUTOTUNE).with_options(_options(threads))


def bert_pipeline(
    spec: RunSpec,
    rank: int,
    world: int,
    device: str | None = None,
    *,
    threads: int = 4,
    strategy: tf.distribute.Strategy | None = None,
) -> Pipeline:
    """This rank's BERT batches: a dict of bert.FEATURES as bert.synthetic_batch gives them (int32 ids,
    float32 masked_lm_weights, next_sentence_labels [B]). threads: run_pretraining.py's num_cpu_threads."""
    files = datasets.bert_shards(spec, "tfrecord")
    name_to_features = bert_features(spec.seq_length, spec.predictions)
    share = _share(files, rank, world)

    def make_dataset():
        dataset = _records(files, rank, world, threads, BERT_SHUFFLE_BUFFER, bert_order=True)
        dataset = dataset.map(
            lambda record: decode_record(record, name_to_features), num_parallel_calls=AUTOTUNE, deterministic=False
        )
        dataset = dataset.batch(spec.batch_size, drop_remainder=True).map(_bert_step_layout)
        return dataset.prefetch(AUTOTUNE).with_options(_options(threads))

    description = (
        f"tf.data TFRecordDataset ({share}, interleaved), shuffle {BERT_SHUFFLE_BUFFER}, "
        f"_decode_record (run_pretraining.py) AUTOTUNE, prefetch AUTOTUNE, {max(1, threads)} threads"
    )
    return Pipeline(make_dataset, world, strategy, device, description)
