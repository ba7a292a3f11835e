"""Real data in the PyTorch backend, for real on CPU: backends/pytorch/data.py (DALI for ImageNet, h5py for the BERT
HDF5 shards) on shards made by the workflow's own tools (conftest's real_data fixture: 4 ImageNet classes x 8 train
images in 2 shards, BERT shards at 128 tokens / 20 masked positions), checked against the records themselves as
read independently in the dataprep environment (dlbench.dataprep.tfrecord, no DALI or h5py involved); then
harness runs with --data real."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from conftest import env_python, read_log, run_harness, run_python

IMAGES_PER_CLASS = 8  # the real_data fixture's --train-per-class


@pytest.fixture(scope="module")
def torch_python() -> Path:
    return env_python("pytorch")


# ---- the truth: the records as the dataprep environment reads them (TFRecord framing + Example parsing by hand)

RECORDS = """
    import json
    import sys
    import numpy as np
    from pathlib import Path
    from dlbench.dataprep import tfrecord

    imagenet, bert_dir, out = map(Path, sys.argv[1:4])
    images = []
    for shard in sorted(imagenet.glob("train-*")):
        for _, data in tfrecord.read_records(shard):
            example = tfrecord.parse_example(data)
            images.append([example["image/class/label"][0], example["image/class/synset"][0].decode()])
    # Google's BERT features (with their own masked_lm_weights), record order, and each record's shard
    rows, shard_of = {}, []
    for k, shard in enumerate(sorted((bert_dir / "tfrecord").iterdir())):
        for _, data in tfrecord.read_records(shard):
            example = tfrecord.parse_example(data)
            for name, value in example.items():
                rows.setdefault(name, []).append(value)
            shard_of.append(k)
    np.savez(out, shard=np.array(shard_of), **{name: np.array(value) for name, value in rows.items()})
    print(json.dumps({"images": images, "bert_records": len(shard_of)}))
"""


@pytest.fixture(scope="module")
def records(real_data: dict[str, Path], tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("torch_records") / "bert_tfrecord.npz"
    text = run_python(env_python("dataprep"), RECORDS, str(real_data["imagenet"]), str(real_data["bert128"]), str(out))
    facts = json.loads(text.strip().splitlines()[-1])
    synsets = sorted((real_data["tree"] / "synsets.txt").read_text().split())
    facts["labels"] = [label - 1 for label, _ in facts["images"]]  # the model's 0..999
    facts["synset_labels"] = [synsets.index(synset) for _, synset in facts["images"]]
    facts["bert_npz"] = str(out)
    facts["train_synsets"] = sorted(p.name for p in (real_data["tree"] / "train").iterdir())
    facts["synsets"] = synsets
    return facts


# ---- the pipelines, directly: one PyTorch process for all the facts

PIPELINE_FACTS = """
    import json
    import sys
    from collections import Counter
    import numpy as np
    import torch
    from dlbench.harness import bert
    from dlbench.harness.backends.pytorch import bert as torch_bert, data as torch_data
    from dlbench.harness.spec import RunSpec

    imagenet, bert_dir, npz, n_images = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

    def spec(model, data_dir, **kw):
        return RunSpec.of(framework="pytorch", model=model, nodes=1, devices_per_node=1, batch_size=4,
                       precision="fp32", compiler=False, data="real", image_size=32, warmup_steps=1,
                       measured_steps=3, repeat=1, config_id="x", log="unused.jsonl", device="cpu",
                       data_dir=data_dir, **kw)

    def labels(pipe, n):
        return [int(x) for _ in range(n) for x in pipe.next()[1]]

    facts = {}
    rn = spec("resnet50", imagenet)
    epoch = n_images // 4
    # file order (no shuffle): the labels are the records' in order, the second epoch again; 3 ranks: DALI's
    # contiguous thirds of the records
    pipe = torch_data.imagenet_pipeline(rn, 0, 1, 2, "cpu", shuffle=False)
    facts["ordered"] = [labels(pipe, epoch), labels(pipe, epoch)]
    facts["ranks"] = [labels(torch_data.imagenet_pipeline(rn, r, 2, 1, "cpu", shuffle=False), epoch // 2)
                      for r in range(2)]
    # the real thing: shuffled, 3 epochs
    pipe = torch_data.imagenet_pipeline(rn, 0, 1, 2, "cpu")
    batches = [pipe.next() for _ in range(3 * epoch)]
    images = torch.stack([b[0] for b in batches])
    first = batches[0]
    facts["shuffled"] = [[int(x) for b in batches[e * epoch:(e + 1) * epoch] for x in b[1]] for e in range(3)]
    facts["batch"] = {"shape": list(first[0].shape), "dtype": str(first[0].dtype), "device": str(first[0].device),
                      "contiguous": first[0].is_contiguous(), "label_shape": list(first[1].shape),
                      "label_dtype": str(first[1].dtype), "mean": float(images.mean()), "std": float(images.std()),
                      "channel_means": images.mean((0, 1, 3, 4)).tolist(), "finite": bool(images.isfinite().all()),
                      "distinct_first_images": len({b[0][0].sum().item() for b in batches})}
    facts["description"] = pipe.describe()
    # channels_last (as on CUDA): the same values, NCHW shape with NHWC memory
    a = torch_data.imagenet_pipeline(rn, 0, 1, 1, "cpu", shuffle=False).next()
    b = torch_data.imagenet_pipeline(rn, 0, 1, 1, "cpu", memory_format=torch.channels_last, shuffle=False).next()
    facts["channels_last"] = {"shape": list(b[0].shape), "channels_last": b[0].is_contiguous(
        memory_format=torch.channels_last), "same_labels": bool(torch.equal(a[1], b[1]))}

    # BERT: the structure the step takes (torch_bert.batch_tensors of bert.synthetic_batch), each row a record
    truth = dict(np.load(npz))
    where = {truth["input_ids"][i].tobytes(): i for i in range(len(truth["shard"]))}
    bs = spec("bert_tiny", bert_dir, seq_length=128, max_predictions=20)
    reference = torch_bert.batch_tensors(bert.synthetic_batch(bert.CONFIGS["bert_tiny"], 4, 128, 20))

    def rows(pipe, n):
        # (record index, every feature equal to Google's TFRecord features) for n batches' rows
        out = []
        for _ in range(n):
            batch = pipe.next()
            for r in range(4):
                i = where[batch["input_ids"][r].numpy().astype(np.int64).tobytes()]
                same = all(np.array_equal(batch[k][r].numpy().reshape(-1), np.reshape(truth[k][i], -1))
                           for k in bert.FEATURES)
                out.append([int(i), same])
        return out, batch

    total = len(truth["shard"])
    pipe = torch_data.bert_pipeline(bs, 0, 1, "cpu")
    first, batch = rows(pipe, total // 4)  # one pass over the shards
    facts["bert"] = {"structure": [[k, list(v.shape), str(v.dtype)] for k, v in batch.items()],
                     "reference": [[k, list(v.shape), str(v.dtype)] for k, v in reference.items()],
                     "pass": first, "next": rows(pipe, 5)[0], "description": pipe.describe()}
    pipe.close()
    shards = {}
    for world in (2, 3):  # 2 shards: one each; 3 ranks: all shards, each rank its own order
        pipes = [torch_data.bert_pipeline(bs, r, world, "cpu") for r in range(world)]
        shards[world] = [[int(truth["shard"][i]) for i, _ in rows(p, 10)[0]] for p in pipes]
        shards[f"{world}_files"] = [[s.rsplit("/", 1)[1] for s in p.shards] for p in pipes]
        shards[f"{world}_order"] = [[i for i, _ in rows(p, 3)[0]] for p in pipes]
        for p in pipes:
            p.close()
    facts["bert_ranks"] = shards
    print(json.dumps(facts))
"""


@pytest.fixture(scope="module")
def facts(torch_python: Path, real_data: dict[str, Path], records: dict) -> dict:
    out = run_python(
        torch_python,
        PIPELINE_FACTS,
        str(real_data["imagenet"]),
        str(real_data["bert128"]),
        records["bert_npz"],
        str(len(records["labels"])),
    )
    return json.loads(out.strip().splitlines()[-1])


def test_imagenet_labels_match_the_records_synsets(records, facts):
    """In file order the pipeline's labels are the records' labels - 1, i.e. the index of each record's synset among
    the 1,000 sorted synsets (0..999), for the 4 classes of the tree; the reader wraps around endlessly."""
    labels = records["labels"]
    assert len(labels) == 4 * IMAGES_PER_CLASS
    assert labels == records["synset_labels"]
    assert {records["synsets"][label] for label in labels} == set(records["train_synsets"])
    assert all(0 <= label < 1000 for label in labels)
    assert facts["ordered"] == [labels, labels]


def test_imagenet_ranks_read_their_share(records, facts):
    """2 ranks: DALI's shard_id/num_shards, each rank its own half of the records."""
    labels = records["labels"]
    half = len(labels) // 2
    assert facts["ranks"] == [labels[:half], labels[half:]]


def test_imagenet_batches(records, facts):
    """Shuffled: every epoch has each record once, in a new order; the batch is what the ResNet step takes (float32
    NCHW [4, 3, 32, 32] contiguous on the CPU, labels int64 [4]), normalised, randomly cropped."""
    batch = facts["batch"]
    assert batch["shape"] == [4, 3, 32, 32] and batch["dtype"] == "torch.float32" and batch["device"] == "cpu"
    assert batch["contiguous"]
    assert batch["label_shape"] == [4] and batch["label_dtype"] == "torch.int64"
    assert batch["finite"] and abs(batch["mean"]) < 1.0 and 0.3 < batch["std"] < 2.0
    assert all(abs(m) < 1.5 for m in batch["channel_means"])
    assert batch["distinct_first_images"] > 1
    expected = Counter(records["labels"])
    epochs = facts["shuffled"]
    assert all(Counter(epoch) == expected for epoch in epochs)
    assert len({tuple(epoch) for epoch in epochs}) > 1
    assert facts["description"].startswith("DALI 2.4") and "CPU decode" in facts["description"]
    cl = facts["channels_last"]
    assert cl == {"shape": [4, 3, 32, 32], "channels_last": True, "same_labels": True}


def test_bert_batches_are_the_records(records, facts):
    """BERT: the step's structure (names, shapes [4, 128] / [4, 20] / [4], int64 ids, float32 weights); every row is
    one record with all of Google's features, masked_lm_weights included (HDF5 has none: positions != 0); one pass
    reads each record at most once (the remainder goes on into the next pass)."""
    b = facts["bert"]
    assert b["structure"] == b["reference"]
    total = records["bert_records"]
    assert total > 40
    assert all(same for _, same in b["pass"] + b["next"])
    seen = [i for i, _ in b["pass"]]
    assert len(seen) == total // 4 * 4 and len(set(seen)) == len(seen)
    assert b["description"].startswith("h5py")


def test_bert_ranks(facts):
    """2 shards for 2 ranks: one shard each (round-robin); for 3 ranks every rank reads both shards, each rank in its
    own order."""
    ranks = facts["bert_ranks"]
    assert [set(shards) for shards in ranks["2"]] == [{0}, {1}]
    names = [name for files in ranks["2_files"] for name in files]
    assert len(names) == 2 and names[0].endswith("-00000-of-00002.hdf5") and names[1].endswith("-00001-of-00002.hdf5")
    assert all(files == names for files in ranks["3_files"])
    orders = ranks["3_order"]
    assert len({tuple(order) for order in orders}) == 3


# ---- harness runs with --data real (each step takes the pipeline's next batch)

REAL = ["--batch-size", "4", "--warmup-steps", "1", "--measured-steps", "3", "--device", "cpu", "--data", "real"]


def run_real(python: Path, log: Path, model: str, data_dir: Path, *args: str) -> dict[str, list[dict]]:
    result = run_harness(python, log, *REAL, "--data-dir", str(data_dir), *args, model=model, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    entries = read_log(log)
    assert entries["summary"][-1]["status"] == "ok", (entries["summary"][-1], result.stderr[-3000:])
    return entries


def test_harness_bert_real_needs_matching_shards(torch_python, real_data, tmp_path):
    """Shards of 128 tokens for a run of 64: unsupported, saying why (datasets.bert_shards reads the manifest)."""
    log = tmp_path / "bt64.jsonl"
    run_harness(
        torch_python,
        log,
        *REAL,
        "--data-dir",
        str(real_data["bert128"]),
        "--topology",
        "1x1",
        "--seq-length",
        "64",
        model="bert_tiny",
        timeout=600,
    )
    summary = read_log(log)["summary"][-1]
    assert summary["status"] == "unsupported" and "128 tokens" in summary["error"], summary
