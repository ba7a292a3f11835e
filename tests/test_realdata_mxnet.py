"""Real data in the MXNet backend, for real on CPU: the DALI ImageNet and h5py BERT pipelines of backends/mxnet/data.py
on shards made by the workflow's own tools (conftest's real_data fixture: 4 ImageNet classes x 8 train images in 2
shards, BERT shards at 128 tokens / 20 masked positions), checked against the records themselves (read with the
workflow's own TFRecord reader, dlbench.dataprep.tfrecord, in the dataprep environment), and harness runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import env_python, run_python

pytestmark = (
    pytest.mark.slow
)  # MXNet's readers of the prepared shards: test_dataprep_imagenet reads its RecordIO files in the fast tier


IMAGES_PER_CLASS = 8  # the real_data fixture's --train-per-class
CLASSES = 4  # its --classes


@pytest.fixture(scope="module")
def mx_python() -> Path:
    return env_python("mxnet")


# ---- what the records hold, read without DALI or h5py: the workflow's own TFRecord reader

RECORDS = """
    import json, sys
    from pathlib import Path
    import numpy as np
    from dlbench.dataprep.tfrecord import parse_example, read_records

    imagenet, bert_dir, out = map(Path, sys.argv[1:4])
    labels = []  # (label 1..1000, synset) of every train record, files sorted by name, records in file order
    for path in sorted(imagenet.glob("train-*")):
        for _, data in read_records(path):
            ex = parse_example(data)
            labels.append([ex["image/class/label"][0], ex["image/class/synset"][0].decode()])
    features = {}  # BERT: every tfrecord shard's features, stacked, plus the shard of each record
    shard_of = []
    for number, path in enumerate(sorted((bert_dir / "tfrecord").iterdir())):
        for _, data in read_records(path):
            ex = parse_example(data)
            for key, value in ex.items():
                features.setdefault(key, []).append(value)
            shard_of.append(number)
    np.savez(out, shard=np.array(shard_of), **{k: np.array(v) for k, v in features.items()})
    print(json.dumps(labels))
"""


@pytest.fixture(scope="module")
def records(real_data: dict[str, Path], tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("mx_records") / "bert.npz"
    labels = run_python(
        env_python("dataprep"), RECORDS, str(real_data["imagenet"]), str(real_data["bert128"]), str(out)
    )
    synsets = sorted((real_data["tree"] / "synsets.txt").read_text().split())  # labels 1..1000 in this order
    return {"labels": json.loads(labels), "synsets": synsets, "bert": out}


# ---- the pipelines, directly: one MXNet process for all the facts

PIPELINE_FACTS = """
    import json, sys
    from collections import Counter
    import mxnet as mx
    import numpy as np
    from dlbench.harness import bert, datasets
    from dlbench.harness.backends.mxnet import bert as mx_bert, data as mx_data
    from dlbench.harness.spec import RunSpec

    imagenet, bert_dir, npz = sys.argv[1:4]

    def spec(model, data_dir, **kw):
        return RunSpec.of(framework="mxnet", model=model, nodes=1, devices_per_node=1, batch_size=4,
                       precision="fp32", compiler=False, data="real", image_size=32, warmup_steps=1,
                       measured_steps=3, repeat=1, config_id="x", log="unused.jsonl", device="cpu",
                       data_dir=data_dir, **kw)

    def labels_of(pipe, batches):
        out, images = [], []
        for _ in range(batches):
            x, y = pipe.next()
            assert isinstance(x, mx.nd.NDArray) and isinstance(y, mx.nd.NDArray)
            out += [float(v) for v in y.asnumpy()]
            images.append(x)
        return out, images

    facts = {}
    rn = spec("resnet50", imagenet)
    # in file order (no shuffle): one rank reads every record; each of 2 ranks its contiguous half
    pipe = mx_data.imagenet_pipeline(rn, 0, 1, 2, mx.cpu(), shuffle=False)
    facts["records"] = pipe.records
    facts["ordered"], _ = labels_of(pipe, 8)
    facts["ordered_world2"] = [labels_of(mx_data.imagenet_pipeline(rn, r, 2, 1, mx.cpu(), shuffle=False), 4)[0]
                               for r in range(2)]
    # as the harness builds it: shuffled, flipped
    pipe = mx_data.imagenet_pipeline(rn, 0, 1, 2, mx.cpu())
    facts["shuffled"], images = labels_of(pipe, 16)
    x = images[0]
    arrays = np.stack([i.asnumpy() for i in images])
    low = [(0 - m) / s for m, s in zip(datasets.IMAGENET_MEAN, datasets.IMAGENET_STD)]
    high = [(255 - m) / s for m, s in zip(datasets.IMAGENET_MEAN, datasets.IMAGENET_STD)]
    per_channel = arrays.transpose(2, 0, 1, 3, 4).reshape(3, -1)
    facts["images"] = {
        "shape": list(x.shape), "dtype": np.dtype(x.dtype).name, "context": str(x.context),
        "label_dtype": np.dtype(pipe.next()[1].dtype).name, "finite": bool(np.isfinite(arrays).all()),
        "in_range": all(low[c] - 1e-3 <= per_channel[c].min() and per_channel[c].max() <= high[c] + 1e-3
                        for c in range(3)),
        "std": float(arrays.std()), "distinct": len({a.tobytes() for a in arrays.reshape(-1, 3 * 32 * 32)})}
    facts["description"] = pipe.describe()
    facts["shuffled_world2"] = [labels_of(mx_data.imagenet_pipeline(rn, r, 2, 1, mx.cpu()), 4)[0]
                                for r in range(2)]

    # BERT: mx_bert.arrays of bert.synthetic_batch's structure, each row one record's features
    bs = spec("bert_tiny", bert_dir, seq_length=128, max_predictions=20)
    ref_in, ref_tg = mx_bert.arrays(bert.synthetic_batch(bert.CONFIGS["bert_tiny"], 4, 128, 20), mx.cpu())
    structure = lambda arrays: [[list(a.shape), np.dtype(a.dtype).name] for a in arrays]
    raw = dict(np.load(npz))  # an NpzFile reads the array again on every access
    rows = {raw["input_ids"][i].astype(np.int32).tobytes(): i for i in range(len(raw["shard"]))}
    pipe = mx_data.bert_pipeline(bs, 0, 1, mx.cpu())
    inputs, targets = pipe.next()
    matches = []
    for _ in range(5):
        inputs, targets = pipe.next()
        batch = dict(zip(mx_bert.INPUTS + mx_bert.LABELS, [a.asnumpy() for a in inputs + targets]))
        for r in range(4):
            i = rows[batch["input_ids"][r].tobytes()]
            matches.append(all(np.array_equal(batch[k][r].reshape(-1), raw[k][i].reshape(-1).astype(batch[k].dtype))
                               for k in bert.FEATURES))
    pipe.close()
    # two ranks: their own shards; the first epoch of each = every record of its shards once
    ranks = []
    for r in range(2):
        pipe = mx_data.bert_pipeline(bs, r, 2, mx.cpu())
        mine = Counter(raw["input_ids"][i].astype(np.int32).tobytes() for i in np.flatnonzero(raw["shard"] == r))
        n = sum(mine.values())
        seen = Counter(row.tobytes() for _ in range(n // 4) for row in pipe.next_numpy()["input_ids"])
        ranks.append({"records": n, "seen": sum(seen.values()), "once": all(seen[k] <= mine[k] for k in seen)})
        pipe.close()
    facts["bert"] = {"records": len(rows), "structure": structure(inputs + targets),
                     "reference": structure(ref_in + ref_tg), "matches": matches, "ranks": ranks,
                     "description": pipe.describe()}
    print(json.dumps(facts))
"""


@pytest.fixture(scope="module")
def facts(mx_python: Path, real_data: dict[str, Path], records: dict) -> dict:
    out = run_python(
        mx_python, PIPELINE_FACTS, str(real_data["imagenet"]), str(real_data["bert128"]), str(records["bert"])
    )
    return json.loads(out.strip().splitlines()[-1])


def expected_labels(records: dict) -> list[float]:
    """0..999: the index of each record's synset among the 1,000 (= image/class/label - 1), in file order."""
    out = []
    for label, synset in records["labels"]:
        assert records["synsets"][label - 1] == synset
        out.append(float(records["synsets"].index(synset)))
    return out


def test_imagenet_labels_match_the_records_synsets(facts, records):
    """In file order, the pipeline's labels are the records' synset indices 0..999 (label - LABEL_OFFSET), record
    by record; with 2 ranks DALI gives rank r the r-th contiguous half of the records."""
    expected = expected_labels(records)
    assert facts["records"] == len(expected) == CLASSES * IMAGES_PER_CLASS
    assert len(set(expected)) == CLASSES and all(0 <= v < 1000 for v in expected)
    assert facts["ordered"] == expected
    half = len(expected) // 2
    assert facts["ordered_world2"] == [expected[:half], expected[half:]]


def test_imagenet_batches(facts, records):
    """The harness's pipeline: NCHW float32 [4, 3, 32, 32] on cpu, normalised with the ImageNet mean/std, float32
    labels; shuffled (not the file order), only the records' labels."""
    images = facts["images"]
    assert images["shape"] == [4, 3, 32, 32] and images["dtype"] == "float32" and images["context"] == "cpu(0)"
    assert images["label_dtype"] == "float32"
    assert images["finite"] and images["in_range"] and 0.3 < images["std"] < 2.0
    assert images["distinct"] == 16 * 4
    expected = expected_labels(records)
    shuffled = facts["shuffled"]
    assert set(shuffled) <= set(expected) and len(set(shuffled)) > 1
    assert shuffled[: len(expected)] != expected
    for rank in facts["shuffled_world2"]:
        assert len(rank) == 16 and set(rank) <= set(expected)
    assert facts["description"].startswith("DALI 2.4") and "CPU decode" in facts["description"]


def test_bert_batches_are_the_records(facts):
    """BERT: the step's structure (mx_bert.arrays of bert.synthetic_batch: names, shapes, dtypes), each row the
    features of one record of the shards (masked_lm_weights from the positions = the TFRecord's weights); two
    ranks read their own shard, every record of it once per epoch."""
    b = facts["bert"]
    assert b["records"] > 20
    assert b["structure"] == b["reference"]
    assert len(b["matches"]) == 20 and all(b["matches"])
    for info in b["ranks"]:  # "once": every batch row is a record of the rank's own shard, none read twice
        assert info["seen"] == info["records"] // 4 * 4 and info["once"]
    assert b["description"].startswith("h5py NVIDIA HDF5")
