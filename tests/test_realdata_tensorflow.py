"""Real data in the TensorFlow backend, for real on CPU: the tf.data pipelines of backends/tensorflow/data.py on shards
made by the workflow's own tools (conftest's real_data fixture: 4 ImageNet classes x 8 train images in 2
shards, BERT shards at 128 tokens / 20 masked positions), checked against the records themselves."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from conftest import env_python, run_json

pytestmark = (
    pytest.mark.slow
)  # TensorFlow's input pipeline on the prepared shards: test_dataprep_imagenet reads them with tf.data in the fast tier


IMAGES_PER_CLASS = 8  # the real_data fixture's --train-per-class
STEPS = ["--batch-size", "4", "--warmup-steps", "1", "--measured-steps", "3", "--device", "cpu"]


@pytest.fixture(scope="module")
def tf_python() -> Path:
    return env_python("tensorflow")


# ---- the facts, from one TensorFlow process: the backend with real data, then the pipelines directly

FACTS = """
    import json
    import os
    import sys
    import numpy as np
    from dlbench.harness.backends.tensorflow.backend import Backend  # first: it sets TensorFlow's threads
    import tensorflow as tf
    from dlbench.harness import bert, datasets
    from dlbench.harness.backends.tensorflow import data as tf_data
    from dlbench.harness.spec import RunSpec, Unsupported

    imagenet, bert_dir, tree = sys.argv[1:4]
    synsets = sorted(open(f"{tree}/synsets.txt").read().split())  # labels 1..1000 in sorted-synset order

    def spec(model, data_dir, **kw):
        return RunSpec.of(framework="tensorflow", model=model, nodes=1, devices_per_node=1, batch_size=4,
                       precision="fp32", compiler=False, data="real", image_size=32, warmup_steps=1,
                       measured_steps=3, repeat=1, config_id="x", log="unused.jsonl", device="cpu",
                       data_dir=data_dir, **kw)

    # the backend: setup() builds the pipeline, step() takes the next batch
    facts = {"backend": {}}
    for data_dir in ("", bert_dir):
        backend = Backend(spec("bert_tiny", data_dir, seq_length=128, max_predictions=20), rank=0, world=1,
                          local_rank=0, threads=len(os.sched_getaffinity(0)))
        try:
            backend.setup()
        except Unsupported as exc:
            facts["backend"]["no data dir"] = str(exc)
            continue
        losses = []
        for _ in range(4):
            backend.step()
            losses.append(backend.loss())
        facts["backend"] |= {"traces": backend._step.experimental_get_tracing_count(), "losses": losses,
                             "input_pipeline": backend.environment()["input_pipeline"]}

    rn = spec("resnet50", imagenet)
    files, _ = datasets.imagenet_train_shards(rn)
    records = [bytes(r.numpy()) for r in tf.data.TFRecordDataset(files)]
    facts["records"] = len(records)
    # every record through the pipeline's own map: its label is the index of the record's synset
    preprocess = tf_data.imagenet_train_map(32, tf.float32)
    pairs, shapes = [], set()
    for record in records:
        example = tf.train.Example.FromString(record).features.feature
        synset = example["image/class/synset"].bytes_list.value[0].decode()
        image, label = preprocess(tf.constant(record))
        shapes.add((tuple(image.shape), image.dtype.name, label.dtype.name))
        pairs.append((int(label), synsets.index(synset), bool(np.isfinite(image.numpy()).all())))
    facts["map"] = {"pairs": pairs, "shapes": [list(s) for s in shapes]}
    jpeg, _, boxes = tf_data.parse_imagenet(tf.constant(records[0]))
    full = tf.io.decode_jpeg(jpeg, channels=3).shape
    crops = [tf_data.decode_and_random_crop(jpeg, boxes).shape for _ in range(20)]
    inside = all(c[0] <= full[0] and c[1] <= full[1] and c[2] == 3 for c in crops)
    facts["crop"] = {"full": list(full), "inside": inside, "distinct": len({tuple(c) for c in crops})}

    # the whole pipeline: one rank (its first epoch = 32 records = 8 batches), then each of 2 ranks
    def batches(pipe, n):
        out = [pipe.next() for _ in range(n)]
        return ([list(map(int, b[1].numpy())) for b in out],
                {"shape": list(out[0][0].shape), "dtype": out[0][0].dtype.name, "label_shape": list(out[0][1].shape),
                 "label_dtype": out[0][1].dtype.name, "mean": float(np.mean([b[0].numpy().mean() for b in out])),
                 "std": float(np.mean([b[0].numpy().std() for b in out])),
                 "absmax": float(max(np.abs(b[0].numpy()).max() for b in out))})

    pipe = tf_data.imagenet_pipeline(rn, 0, 1, 2, None)
    facts["world1"], facts["world1_batch"] = batches(pipe, 8)
    facts["world1_next"] = batches(pipe, 8)[0]  # second epoch: reshuffled
    facts["description"] = pipe.describe()
    facts["world2"] = [batches(tf_data.imagenet_pipeline(rn, r, 2, 1, None), 4)[0] for r in range(2)]
    facts["bfloat16"] = tf_data.imagenet_pipeline(rn, 0, 1, 1, None, dtype="bfloat16").next()[0].dtype.name
    on_device = tf_data.imagenet_pipeline(rn, 0, 1, 1, "/CPU:0").next()  # the GPU path's mechanism, on the CPU
    facts["on_device"] = [type(on_device[0]).__name__, list(on_device[0].shape), on_device[0].device]
    # the records each rank reads in its first epoch: by file (2 shards, 2 ranks) or by record (3 ranks)
    facts["shards"] = {}
    for world in (2, 3):
        epochs = []
        for rank in range(world):
            size = len(records) // world + (rank < len(records) % world if world > len(files) else 0)
            epochs.append([records.index(bytes(r.numpy()))
                           for r in tf_data._records(files, rank, world, 1, 10_000).take(size)])
        facts["shards"][world] = epochs

    # BERT: the step's structure (bert.synthetic_batch), each row one record's features
    bs = spec("bert_tiny", bert_dir, seq_length=128, max_predictions=20)
    reference = bert.synthetic_batch(bert.CONFIGS["bert_tiny"], 4, 128, 20)
    raw = {}
    for record in tf.data.TFRecordDataset(datasets.bert_shards(bs, "tfrecord")):
        example = tf.train.Example.FromString(record.numpy()).features.feature
        row = {k: list(v.int64_list.value or v.float_list.value) for k, v in example.items()}
        raw[tuple(row["input_ids"])] = row
    pipe = tf_data.bert_pipeline(bs, 0, 1, None, threads=2)
    matches, structure = [], None
    for _ in range(5):
        batch = pipe.next()
        structure = [[k, list(v.shape), v.dtype.name] for k, v in batch.items()]
        for i in range(4):
            row = raw[tuple(int(x) for x in batch["input_ids"][i].numpy())]
            matches.append(all(np.allclose(np.reshape(batch[k][i].numpy(), -1), row[k]) for k in bert.FEATURES))
    facts["bert"] = {"records": len(raw), "structure": structure, "matches": matches,
                     "reference": [[k, list(v.shape), tf.as_dtype(v.dtype).name] for k, v in reference.items()],
                     "description": pipe.describe()}
    print(json.dumps(facts))
"""


@pytest.fixture(scope="module")
def facts(tf_python: Path, real_data: dict[str, Path]) -> dict:
    """FACTS, run once in one TensorFlow process."""
    return run_json(tf_python, FACTS, str(real_data["imagenet"]), str(real_data["bert128"]), str(real_data["tree"]))


def test_imagenet_labels_match_the_records_synsets(facts):
    """Every record through the pipeline's map: label = index of its synset among the 1,000 (0..999), image finite."""
    pairs = facts["map"]["pairs"]
    assert len(pairs) == facts["records"] == 4 * IMAGES_PER_CLASS
    assert all(label == expected and finite for label, expected, finite in pairs), pairs
    assert len({label for label, _, _ in pairs}) == 4
    assert all(0 <= label < 1000 for label, _, _ in pairs)
    assert facts["map"]["shapes"] == [[[32, 32, 3], "float32", "int32"]]


def test_imagenet_random_crop(facts):
    """decode_and_random_crop: windows inside the decoded image, 3 channels, not always the same."""
    crop = facts["crop"]
    assert crop["inside"] and crop["full"][2] == 3
    assert crop["distinct"] > 1


def test_imagenet_batches(facts):
    """The pipeline's batches: NHWC float32 [4, 32, 32, 3], normalised; labels int32 [4]; the first 8 batches are
    one epoch (every record once), the next 8 the next epoch in another order; bfloat16 on request; the same
    batches on a given device."""
    batch = facts["world1_batch"]
    assert batch["shape"] == [4, 32, 32, 3] and batch["dtype"] == "float32"
    assert batch["label_shape"] == [4] and batch["label_dtype"] == "int32"
    assert abs(batch["mean"]) < 1.0 and 0.3 < batch["std"] < 2.0 and batch["absmax"] < 3.0
    expected = Counter(label for label, _, _ in facts["map"]["pairs"])
    for epoch in (facts["world1"], facts["world1_next"]):
        assert Counter(label for b in epoch for label in b) == expected
    assert facts["world1"] != facts["world1_next"]
    assert facts["bfloat16"] == "bfloat16"
    kind, shape, device = facts["on_device"]  # one rank given a device: plain tensors placed there
    assert shape == [4, 32, 32, 3] and device.endswith("CPU:0") and "PerReplica" not in kind
    assert facts["description"].startswith("tf.data TFRecordDataset")


def test_imagenet_ranks_read_disjoint_shares(facts):
    """2 shards, 2 ranks: one file each; 3 ranks: records sharded. Every record read by exactly one rank."""
    for world, epochs in facts["shards"].items():
        everyone = [i for epoch in epochs for i in epoch]
        assert sorted(everyone) == list(range(facts["records"])), (world, epochs)
    expected = Counter(label for label, _, _ in facts["map"]["pairs"])
    assert Counter(label for rank in facts["world2"] for b in rank for label in b) == expected


def test_bert_batches_are_the_records(facts):
    """BERT: bert.synthetic_batch's structure (names, shapes, dtypes, next_sentence_labels [B]), each row the
    features of one record (_decode_record: int64 -> int32)."""
    b = facts["bert"]
    assert b["records"] > 20
    assert b["structure"] == b["reference"]
    assert len(b["matches"]) == 20 and all(b["matches"])
    assert b["description"].startswith("tf.data TFRecordDataset")


# ---- the backend with real data, and harness runs


def test_backend_steps_take_batches_from_the_pipeline_without_retracing(facts):
    """setup() builds the pipeline; the steps (each on the next batch) train through one trace of the step
    function; data real without --data-dir is unsupported."""
    backend = facts["backend"]
    assert backend["traces"] == 1, backend
    assert all(0 < loss < 100 for loss in backend["losses"]), backend
    assert backend["input_pipeline"].startswith("tf.data TFRecordDataset")
    assert "--data-dir" in backend["no data dir"]
