"""BERT pretraining in the TensorFlow backend, for real on CPU: the Keras model (Google's BERT, checked against
a numpy reference), the optimizers' weight decay, gradient clipping, the learning-rate schedule, training,
and harness runs of bert_tiny (tiny sequences, batch 2)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import env_python, harness_env, read_log, run_harness, run_python
from dlbench.harness import bert  # standard library and numpy only: importable here (conftest's sys.path)

# The fast tier runs one framework where one is enough (PyTorch's files): this file is the full tier's.
pytestmark = pytest.mark.slow

TINY = ["--seq-length", "32", "--batch-size", "2", "--warmup-steps", "1", "--measured-steps", "3", "--device", "cpu"]
SEQUENCES = 2 * 3  # batch x measured steps


@pytest.fixture(scope="module")
def tf_python() -> Path:
    return env_python("tensorflow")


def run_bert(python: Path, log: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict[str, list[dict]]]:
    result = run_harness(python, log, *args, framework="tensorflow", model="bert_tiny", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result, read_log(log)


# ---- direct API checks, one TensorFlow process for all of them

API_FACTS = """
    import json
    import os
    import numpy as np
    import tensorflow as tf
    from dlbench.harness import bert
    from dlbench.harness.backends.tensorflow import bert as tf_bert
    from dlbench.harness.backends.tensorflow.backend import Backend
    from dlbench.harness.spec import RunSpec, Unsupported

    keras = tf.keras
    # BERT's options for ResNet-50 (the backend comes first: it sets TensorFlow's threads)
    facts = {"resnet50": {}}
    for option in ({"optimizer": "lamb"}, {"optimizer": "adam"}, {"grad_clip": True}):
        spec = RunSpec.of(framework="tensorflow", model="resnet50", nodes=1, devices_per_node=1, batch_size=2,
                       precision="fp32", compiler=False, data="synthetic", image_size=32, warmup_steps=1,
                       measured_steps=1, repeat=1, config_id="x", log="unused.jsonl", device="cpu", **option)
        try:
            Backend(spec, rank=0, world=1, local_rank=0, threads=len(os.sched_getaffinity(0))).setup()
            facts["resnet50"][str(option)] = "set up"
        except Unsupported as exc:
            facts["resnet50"][str(option)] = f"unsupported: {exc}"

    for name in ("bert_tiny", "bert_base"):
        cfg = bert.CONFIGS[name]
        model = tf_bert.BertPretraining(cfg)
        variables = tf_bert.canonical_variables(model)
        facts[name] = {"parameters": tf_bert.parameter_count(model), "names": list(variables),
                       "shapes": [list(v.shape) for v in variables.values()],
                       "distinct": len({id(v) for v in variables.values()}), "trainable": len(model.trainable_weights)}
        del model, variables

    # tiny shapes, dropout off: deterministic steps (vocabulary above bert.FIRST_WORDPIECE_ID)
    small = bert.BertConfig(vocab_size=1100, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                            max_position_embeddings=16, hidden_dropout=0.0, attention_dropout=0.0)
    weights = bert.random_weights(small, seed=1)  # biases and LayerNorm not 0/1: decay would show
    features = {k: tf.constant(v) for k, v in bert.synthetic_batch(small, 2, 16, 3, seed=2).items()}

    def fresh():
        model = tf_bert.BertPretraining(small)
        tf_bert.load_canonical(model, weights)
        return model

    def values(model):
        return {n: v.numpy().copy() for n, v in tf_bert.canonical_variables(model).items()}

    # weight decay: zero gradients, so Adam's and LAMB's moments give no update and only decay is left
    facts["decay"] = {}
    for name in ("adam", "lamb"):
        model = fresh()
        optimizer = tf_bert.make_optimizer(name, model, learning_rate=0.5)
        before = values(model)
        optimizer.apply([tf.zeros_like(v) for v in model.trainable_variables], model.trainable_variables)
        factor = 1 - 0.5 * bert.OPTIMIZERS[name].weight_decay
        facts["decay"][name] = {
            n: "unchanged" if np.array_equal(a, before[n]) else
               "decayed" if np.allclose(a, before[n] * factor, rtol=1e-6, atol=0) else "other"
            for n, a in values(model).items()}

    # clipping: plain SGD with lr 1 moves the weights by exactly minus the (clipped) gradient
    deltas = {}
    for clip in (None, 1.0):
        model = fresh()
        step = tf_bert.make_train_step(model, keras.optimizers.SGD(learning_rate=1.0), clip_norm=clip)
        before = values(model)
        step(features)
        deltas[clip] = {n: a - before[n] for n, a in values(model).items()}
    norm = lambda d: float(np.sqrt(sum(float(np.sum(x.astype(np.float64) ** 2)) for x in d.values())))
    raw, clipped = norm(deltas[None]), norm(deltas[1.0])
    facts["clip"] = {"raw_norm": raw, "clipped_norm": clipped,
                     "same_direction_error": max(float(np.max(np.abs(deltas[1.0][n] * raw - deltas[None][n])))
                                                 for n in deltas[None])}

    # the learning-rate schedule: in the graph and as the optimizer applies it, at its 0-based step
    model = fresh()
    facts["schedule"] = {}
    for name, steps in {"adam": [0, 1, 4999, 9999, 10000, 500000, 999999, 1000000, 1200000],
                        "lamb": [0, 1, 1999, 2000, 4000, 7037, 7038, 9000]}.items():
        optimizer = tf_bert.make_optimizer(name, model)
        optimizer.build(model.trainable_variables)
        rates = []
        for s in steps:
            optimizer.iterations.assign(s)
            rates.append([bert.learning_rate(bert.OPTIMIZERS[name], s), float(optimizer.learning_rate)])
        facts["schedule"][name] = rates

    # training works: 20 steps on one fixed batch of bert_tiny, dropout on, constant learning rate
    cfg = bert.CONFIGS["bert_tiny"]
    batch = {k: tf.constant(v) for k, v in bert.synthetic_batch(cfg, 2, 32, 5, seed=3).items()}
    keras.utils.set_random_seed(0)
    model = tf_bert.BertPretraining(cfg)
    step = tf_bert.make_train_step(model, tf_bert.make_optimizer("adam", model, learning_rate=1e-3), clip_norm=1.0)
    facts["losses"] = [float(step(batch)) for _ in range(20)]
    print(json.dumps(facts))
"""


@pytest.fixture(scope="module")
def api_facts(tf_python) -> dict:
    return json.loads(run_python(tf_python, API_FACTS).strip().splitlines()[-1])


@pytest.mark.parametrize("model", ["bert_tiny", "bert_base"])
def test_model_has_the_canonical_weights_and_parameter_count(api_facts, model):
    facts, cfg = api_facts[model], bert.CONFIGS[model]
    assert facts["parameters"] == bert.parameter_count(cfg)
    assert model != "bert_base" or facts["parameters"] == bert.BERT_BASE_PARAMETERS == 110_106_428
    shapes = bert.canonical_shapes(cfg)
    assert facts["names"] == list(shapes)
    assert [tuple(s) for s in facts["shapes"]] == list(shapes.values())
    # every canonical tensor is its own variable and there is no other: the decoder is tied
    assert facts["distinct"] == facts["trainable"] == len(shapes)


@pytest.mark.parametrize("optimizer", ["adam", "lamb"])
def test_weight_decay_is_decoupled_and_spares_layernorm_and_biases(api_facts, optimizer):
    decay = api_facts["decay"][optimizer]
    expected = {name: "unchanged" if bert.excluded_from_weight_decay(name) else "decayed" for name in decay}
    assert decay == expected  # decayed = exactly w * (1 - lr * wd): decoupled from the gradient
    assert decay["bert/embeddings/word_embeddings"] == decay["cls/seq_relationship/output_weights"] == "decayed"
    assert decay["bert/embeddings/LayerNorm/gamma"] == decay["cls/predictions/output_bias"] == "unchanged"


def test_clipping_bounds_the_global_norm(api_facts):
    clip = api_facts["clip"]
    assert clip["raw_norm"] > 2.0  # the clip really acts on this batch
    assert clip["clipped_norm"] == pytest.approx(bert.OPTIMIZERS["adam"].clip_norm, rel=1e-5)
    # scaled as a whole (global norm), not per tensor: the same direction
    assert clip["same_direction_error"] < 1e-5 * clip["raw_norm"]


@pytest.mark.parametrize("optimizer", ["adam", "lamb"])
def test_learning_rate_schedule_is_bert_learning_rate(api_facts, optimizer):
    for expected, got in api_facts["schedule"][optimizer]:
        assert got == pytest.approx(expected, rel=1e-5, abs=1e-12)


def test_loss_falls_on_a_fixed_batch(api_facts):
    """20 steps of the harness's step (AdamW, lr 1e-3, dropout on, clipping) on one batch: it learns."""
    losses = api_facts["losses"]
    assert all(np.isfinite(losses))
    assert np.mean(losses[-3:]) < 0.7 * losses[0], losses


def numpy_bert(cfg: bert.BertConfig, w: dict[str, np.ndarray], b: dict[str, np.ndarray]):
    """Google's BERT forward and loss in float64 numpy, dropout off: (mlm logits, nsp logits, loss)."""
    w = {k: v.astype(np.float64) for k, v in w.items()}

    def norm(x, p):
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + cfg.layer_norm_eps) * w[f"{p}/gamma"] + w[f"{p}/beta"]

    def dense(x, p):
        return x @ w[f"{p}/kernel"] + w[f"{p}/bias"]

    def gelu(x):
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))

    def log_softmax(z):
        z = z - z.max(-1, keepdims=True)
        return z - np.log(np.exp(z).sum(-1, keepdims=True))

    batch, length = b["input_ids"].shape
    heads, size = cfg.num_heads, cfg.head_size
    x = (
        w["bert/embeddings/word_embeddings"][b["input_ids"]]
        + w["bert/embeddings/token_type_embeddings"][b["segment_ids"]]
        + w["bert/embeddings/position_embeddings"][:length]
    )
    x = norm(x, "bert/embeddings/LayerNorm")
    adder = (1.0 - b["input_mask"][:, None, None, :]) * -10000.0
    for i in range(cfg.num_layers):
        p = f"bert/encoder/layer_{i}"
        q, k, v = (
            dense(x, f"{p}/attention/self/{n}").reshape(batch, length, heads, size).transpose(0, 2, 1, 3)
            for n in ("query", "key", "value")
        )
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(size) + adder
        probs = np.exp(log_softmax(scores))
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, length, heads * size)
        x = norm(dense(context, f"{p}/attention/output/dense") + x, f"{p}/attention/output/LayerNorm")
        x = norm(dense(gelu(dense(x, f"{p}/intermediate/dense")), f"{p}/output/dense") + x, f"{p}/output/LayerNorm")
    pooled = np.tanh(dense(x[:, 0], "bert/pooler/dense"))
    masked = np.take_along_axis(x, b["masked_lm_positions"][:, :, None].astype(np.int64), 1)
    masked = norm(gelu(dense(masked, "cls/predictions/transform/dense")), "cls/predictions/transform/LayerNorm")
    mlm = masked @ w["bert/embeddings/word_embeddings"].T + w["cls/predictions/output_bias"]
    nsp = pooled @ w["cls/seq_relationship/output_weights"].T + w["cls/seq_relationship/output_bias"]
    picked = np.take_along_axis(log_softmax(mlm), b["masked_lm_ids"][:, :, None].astype(np.int64), -1)[..., 0]
    weights = b["masked_lm_weights"]
    loss = -(weights * picked).sum() / (weights.sum() + 1e-5)
    loss -= np.take_along_axis(log_softmax(nsp), b["next_sentence_labels"][:, None].astype(np.int64), -1).mean()
    return mlm, nsp, loss


def test_bert_logits_match_a_numpy_reference_of_google_bert(tf_python, tmp_path):
    """`python -m dlbench.harness.bert_logits` (fp32, dropout off) on a padded batch: Google's BERT, 1e-4."""
    cfg = bert.CONFIGS["bert_tiny"]
    weights, batch = bert.random_weights(cfg, seed=5), bert.synthetic_batch(cfg, 3, 32, 5, seed=6, padding=True)
    assert (batch["input_mask"] == 0).any()  # the attention mask matters
    np.savez(tmp_path / "w.npz", **weights)
    np.savez(tmp_path / "b.npz", **batch)
    result = subprocess.run(
        [
            str(tf_python),
            "-m",
            "dlbench.harness.bert_logits",
            "--framework",
            "tensorflow",
            "--model",
            "bert_tiny",
            "--weights",
            str(tmp_path / "w.npz"),
            "--batch",
            str(tmp_path / "b.npz"),
            "--out",
            str(tmp_path / "out.npz"),
        ],
        env=harness_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = np.load(tmp_path / "out.npz")
    mlm, nsp, loss = numpy_bert(cfg, weights, batch)
    assert out["mlm_logits"].shape == (3, 5, cfg.vocab_size) and out["nsp_logits"].shape == (3, 2)
    for got, expected in ((out["mlm_logits"], mlm), (out["nsp_logits"], nsp)):
        assert np.max(np.abs(got - expected)) <= 1e-4 * np.max(np.abs(expected))
    assert float(out["loss"]) == pytest.approx(loss, rel=1e-4)


# ---- the harness with BERT


def test_bert_options_for_resnet50_are_unsupported(api_facts):
    """Backend.setup() refuses them before building anything (rank.py records `unsupported` with the reason)."""
    assert api_facts["resnet50"] == {
        "{'optimizer': 'lamb'}": "unsupported: optimizer 'lamb' is a BERT setting; resnet50 does not read it",
        "{'optimizer': 'adam'}": "unsupported: optimizer 'adam' is a BERT setting; resnet50 does not read it",
        "{'grad_clip': True}": "unsupported: grad_clip True is a BERT setting; resnet50 does not read it",
    }
