"""Real data in the JAX backend, for real on CPU and without TensorFlow: the DALI ImageNet pipeline (NHWC) and the
h5py BERT pipeline of backends/jax/data.py on shards made by the workflow's own tools (conftest's real_data),
checked against the records themselves (the workflow's own TFRecord reader, test_realdata_mxnet's `records`),
and harness runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_realdata_mxnet import expected_labels, records  # noqa: F401 - the records' fixture, shared

from conftest import env_python, run_python

pytestmark = pytest.mark.slow  # the fast tier reads real shards in PyTorch (test_realdata_pytorch)


@pytest.fixture(scope="module")
def jax_python() -> Path:
    return env_python("jax")


PIPELINE_FACTS = """
    import json, sys
    import jax
    import numpy as np
    from dlbench.harness import bert
    from dlbench.harness.backends.jax import data as jax_data
    from dlbench.harness.spec import RunSpec

    imagenet, bert_dir, npz = sys.argv[1:4]
    cpu = jax.devices("cpu")[0]

    def spec(model, data_dir, **kw):
        return RunSpec.of(framework="jax", model=model, nodes=1, devices_per_node=1, batch_size=4,
                       precision="fp32", compiler=False, data="real", image_size=32, warmup_steps=1,
                       measured_steps=3, repeat=1, config_id="x", log="unused.jsonl", device="cpu",
                       data_dir=data_dir, **kw)

    facts = {}
    rn = spec("resnet50", imagenet)
    pipe = jax_data.imagenet_pipeline(rn, 0, 1, 2, cpu, shuffle=False)  # in file order: every record
    ordered, images = [], []
    for _ in range(8):
        x, y = pipe.next()
        ordered += [float(v) for v in y]
        images.append(x)
    facts["ordered"] = ordered
    facts["ordered_world2"] = []
    for r in range(2):  # each rank's pipeline, 4 batches of 4: its 16 records
        ranked = jax_data.imagenet_pipeline(rn, r, 2, 1, cpu, shuffle=False)
        facts["ordered_world2"].append([float(v) for _ in range(4) for v in ranked.next()[1]])
    x, y = images[0], pipe.next()[1]
    facts["images"] = {"shape": list(x.shape), "dtype": str(x.dtype), "label_dtype": str(y.dtype),
                       "finite": bool(np.isfinite(np.stack(images)).all()), "std": float(np.stack(images).std())}
    facts["description"] = jax_data.imagenet_pipeline(rn, 0, 1, 2, cpu).describe()

    bs = spec("bert_tiny", bert_dir, seq_length=128, max_predictions=20)
    raw = dict(np.load(npz))
    rows = {raw["input_ids"][i].astype(np.int32).tobytes(): i for i in range(len(raw["shard"]))}
    pipe = jax_data.bert_pipeline(bs, 0, 1)
    reference = bert.synthetic_batch(bert.CONFIGS["bert_tiny"], 4, 128, 20)
    matches, batch = [], None
    for _ in range(5):
        batch = pipe.next()
        for r in range(4):
            i = rows[batch["input_ids"][r].tobytes()]
            matches.append(all(np.array_equal(batch[k][r].reshape(-1), raw[k][i].reshape(-1).astype(batch[k].dtype))
                               for k in bert.FEATURES))
    structure = lambda b: {k: [list(v.shape), str(v.dtype)] for k, v in b.items()}
    facts["bert"] = {"structure": structure(batch), "reference": structure(reference), "matches": matches,
                     "description": pipe.describe()}
    pipe.close()
    print(json.dumps(facts))
"""


@pytest.fixture(scope="module")
def facts(jax_python: Path, real_data: dict[str, Path], records: dict) -> dict:  # noqa: F811 - the fixture
    out = run_python(
        jax_python, PIPELINE_FACTS, str(real_data["imagenet"]), str(real_data["bert128"]), str(records["bert"])
    )
    return json.loads(out.strip().splitlines()[-1])


def test_imagenet_batches_are_the_records_in_nhwc(facts, records):  # noqa: F811 - the fixture
    """In file order the labels are the records' synset indices (label - LABEL_OFFSET), each of 2 ranks reading its
    contiguous half; the batches are float32 NHWC (JAX's layout), int32 labels."""
    expected = expected_labels(records)
    assert facts["ordered"] == expected
    half = len(expected) // 2
    assert facts["ordered_world2"] == [expected[:half], expected[half:]]
    images = facts["images"]
    assert images["shape"] == [4, 32, 32, 3] and images["dtype"] == "float32" and images["label_dtype"] == "int32"
    assert images["finite"] and 0.3 < images["std"] < 2.0
    assert facts["description"].startswith("DALI 2.4") and "CPU decode" in facts["description"]
    assert "(NHWC); to JAX by as_array() -> device_put" in facts["description"]


def test_bert_batches_are_the_records(facts):
    b = facts["bert"]
    assert b["structure"] == b["reference"]  # bert.synthetic_batch's names, shapes and dtypes
    assert len(b["matches"]) == 20 and all(b["matches"])
    assert b["description"].startswith("h5py NVIDIA HDF5")
