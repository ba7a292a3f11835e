"""BERT pretraining in the MXNet 1.9.1 backend, for real: Gluon bert_tiny at short sequences on CPU."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import env_python, harness_env, ok_or_skip, read_log, run_harness
from dlbench.harness import bert

# The fast tier runs one framework where one is enough (PyTorch's files): this file is the full tier's.
pytestmark = pytest.mark.slow

TINY = ["--seq-length", "64", "--batch-size", "2", "--warmup-steps", "1", "--measured-steps", "3", "--device", "cpu"]


@pytest.fixture(scope="module")
def mx_python() -> Path:
    return env_python("mxnet")


def run_mx(python: Path, log: Path, *args: str, model: str = "bert_tiny") -> dict[str, list[dict]]:
    result = run_harness(python, log, *args, framework="mxnet", model=model, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return read_log(log)


def mx_script(python: Path, code: str, *args: str) -> dict:
    """Run code in the MXNet environment; it prints one JSON line last."""
    out = subprocess.run(
        [str(python), "-c", code, *args], env=harness_env(), capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_parameter_counts_are_bert_s(mx_python):
    """The tied decoder shares the word-embedding Parameter: counted once, as in Google's checkpoint."""
    code = (
        "import json\n"
        "from dlbench.harness import bert\n"
        "from dlbench.harness.backends.mxnet import bert as mx_bert\n"
        "counts = {}\n"
        "for name in ('bert_tiny', 'bert_base'):\n"
        "    net = mx_bert.build(bert.CONFIGS[name])\n"
        "    counts[name] = mx_bert.parameter_count(net)\n"
        "print(json.dumps(counts))\n"
    )
    counts = mx_script(mx_python, code)
    assert counts["bert_base"] == bert.parameter_count(bert.CONFIGS["bert_base"]) == bert.BERT_BASE_PARAMETERS
    assert counts["bert_tiny"] == bert.parameter_count(bert.CONFIGS["bert_tiny"])


# ----------------------------------------------------------------------------- same model as Google's
def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps) * gamma + beta


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def numpy_bert(cfg: bert.BertConfig, weights: dict[str, np.ndarray], batch: dict[str, np.ndarray]):
    """Google's BertForPreTraining forward (dropout off) in float64 numpy: (mlm_logits, nsp_logits, loss)."""
    w = {k: v.astype(np.float64) for k, v in weights.items()}
    b, s = batch["input_ids"].shape
    n, d, eps = cfg.num_heads, cfg.head_size, cfg.layer_norm_eps

    def dense(x: np.ndarray, name: str) -> np.ndarray:
        return x @ w[f"{name}/kernel"] + w[f"{name}/bias"]

    def norm(x: np.ndarray, name: str) -> np.ndarray:
        return _layer_norm(x, w[f"{name}/gamma"], w[f"{name}/beta"], eps)

    def heads(x: np.ndarray) -> np.ndarray:
        return x.reshape(b, s, n, d).transpose(0, 2, 1, 3)

    e = "bert/embeddings"
    x = (
        w[f"{e}/word_embeddings"][batch["input_ids"]]
        + w[f"{e}/token_type_embeddings"][batch["segment_ids"]]
        + w[f"{e}/position_embeddings"][:s]
    )
    x = norm(x, f"{e}/LayerNorm")
    adder = (1.0 - batch["input_mask"][:, None, None, :]) * -10000.0
    for layer in range(cfg.num_layers):
        p = f"bert/encoder/layer_{layer}"
        q, k, v = (heads(dense(x, f"{p}/attention/self/{t}")) for t in ("query", "key", "value"))
        probs = np.exp(_log_softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(d) + adder))
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, n * d)
        x = norm(x + dense(context, f"{p}/attention/output/dense"), f"{p}/attention/output/LayerNorm")
        y = dense(_gelu(dense(x, f"{p}/intermediate/dense")), f"{p}/output/dense")
        x = norm(x + y, f"{p}/output/LayerNorm")
    pooled = np.tanh(dense(x[:, 0], "bert/pooler/dense"))
    nsp = pooled @ w["cls/seq_relationship/output_weights"].T + w["cls/seq_relationship/output_bias"]
    t = x[np.arange(b)[:, None], batch["masked_lm_positions"]]
    t = norm(_gelu(dense(t, "cls/predictions/transform/dense")), "cls/predictions/transform/LayerNorm")
    mlm = t @ w[f"{e}/word_embeddings"].T + w["cls/predictions/output_bias"]
    lw = batch["masked_lm_weights"]
    nll = -np.take_along_axis(_log_softmax(mlm), batch["masked_lm_ids"][..., None], -1)[..., 0]
    loss = (lw * nll).sum() / (lw.sum() + 1e-5)
    loss -= np.take_along_axis(_log_softmax(nsp), batch["next_sentence_labels"][:, None], -1).mean()
    return mlm, nsp, loss


HYBRID_CHECK = """
import json, sys
import mxnet as mx, numpy as np
from dlbench.harness import bert
from dlbench.harness.backends.mxnet import bert as mx_bert
cfg = bert.CONFIGS["bert_tiny"]
with np.load(sys.argv[1]) as w, np.load(sys.argv[2]) as b:
    weights, batch = dict(w), dict(b)
mlm, nsp, _ = mx_bert.pretraining_outputs(cfg, weights, batch)
net = mx_bert.build(cfg)
mx_bert.load_canonical(net, weights)
net.hybridize(static_alloc=True, static_shape=True)
hybrid_mlm, hybrid_nsp = net(*mx_bert.arrays(batch, mx.cpu())[0])
print(json.dumps({"mlm": float(np.abs(hybrid_mlm.asnumpy() - mlm).max()),
                  "nsp": float(np.abs(hybrid_nsp.asnumpy() - nsp).max())}))
"""


def test_outputs_are_google_bert_s(mx_python, tmp_path):
    """Random canonical weights (biases and LayerNorm too) and a padded batch through bert_logits: the MXNet
    model gives Google's BERT's logits and loss (a float64 numpy transcription), imperative and hybridized."""
    cfg = bert.CONFIGS["bert_tiny"]
    weights = bert.random_weights(cfg, seed=1)
    batch = bert.synthetic_batch(cfg, 3, 64, 10, seed=2, padding=True)
    assert (batch["input_mask"] == 0).any()  # the attention mask matters
    np.savez(tmp_path / "weights.npz", **weights)
    np.savez(tmp_path / "batch.npz", **batch)
    cmd = [
        str(mx_python),
        "-m",
        "dlbench.harness.bert_logits",
        "--framework",
        "mxnet",
        "--model",
        "bert_tiny",
        "--weights",
        str(tmp_path / "weights.npz"),
        "--batch",
        str(tmp_path / "batch.npz"),
        "--out",
        str(tmp_path / "out.npz"),
    ]
    subprocess.run(cmd, env=harness_env(), check=True, capture_output=True, timeout=300)
    out = np.load(tmp_path / "out.npz")
    mlm, nsp, loss = numpy_bert(cfg, weights, batch)
    assert out["mlm_logits"].shape == (3, 10, cfg.vocab_size) and out["nsp_logits"].shape == (3, 2)
    rel = lambda a, b: float(np.abs(a - b).max() / np.abs(b).max())  # noqa: E731
    assert rel(out["mlm_logits"], mlm) <= 1e-4 and rel(out["nsp_logits"], nsp) <= 1e-4
    assert abs(float(out["loss"]) - loss) / loss <= 1e-4
    hybrid = mx_script(mx_python, HYBRID_CHECK, str(tmp_path / "weights.npz"), str(tmp_path / "batch.npz"))
    assert hybrid["mlm"] <= 1e-4 * np.abs(mlm).max() and hybrid["nsp"] <= 1e-4 * np.abs(nsp).max()


# ----------------------------------------------------------------------------- harness runs
# amp with compiler off: the framework contract's AMP case
@pytest.mark.parametrize(("precision", "compiler"), [("fp32", "on"), ("amp", "on")])
def test_amp_and_compiler(mx_python, tmp_path, precision, compiler):
    log = tmp_path / "run.jsonl"
    result = run_harness(
        mx_python,
        log,
        "--topology",
        "1x1",
        "--precision",
        precision,
        "--compiler",
        compiler,
        *TINY,
        framework="mxnet",
        model="bert_tiny",
        timeout=300,
    )
    entries = read_log(log)
    if entries["summary"][-1]["status"] == "unsupported":  # bfloat16 needs AVX-512 (the ResNet path's rule)
        assert precision == "amp"
    env = ok_or_skip(entries, result.stderr, because="bfloat16")
    assert env["amp_dtype"] == ("bfloat16" if precision == "amp" else None)
    assert env["hybridize"] is (compiler == "on")
    assert np.isfinite(entries["summary"][-1]["loss_final"])


def test_resnet50_refuses_a_bert_optimizer(mx_python, tmp_path):
    log = tmp_path / "run.jsonl"
    entries = run_mx(
        mx_python,
        log,
        "--topology",
        "1x1",
        "--optimizer",
        "lamb",
        "--image-size",
        "32",
        "--batch-size",
        "2",
        "--warmup-steps",
        "1",
        "--measured-steps",
        "1",
        "--device",
        "cpu",
        model="resnet50",
    )
    summary = entries["summary"][-1]
    assert summary["status"] == "unsupported" and "BERT setting" in summary["error"]


# ----------------------------------------------------------------------------- the training step, directly
TRAINING_CHECKS = """
import dataclasses, json
import mxnet as mx, numpy as np
from mxnet import autograd
from dlbench.harness import bert, rank
from dlbench.harness.backends.mxnet import bert as mx_bert
from dlbench.harness.spec import RunSpec

def backend(**kw):
    spec = RunSpec.of(framework="mxnet", model="bert_tiny", nodes=1, devices_per_node=1, batch_size=2,
                   precision="fp32", compiler=False, data="synthetic", image_size=224, warmup_steps=1,
                   measured_steps=1, repeat=1, config_id="t", log="unused.jsonl", device="cpu", seq_length=32, **kw)
    b = rank.load_backend(spec, 0, 1, 0, 2)
    b.setup()
    return b

out = {}
# Weight decay: one update with zero gradients. Adam's moments stay 0, so a decoupled decay is all that
# moves a weight: w * (1 - lr * wd) (an L2 term in the gradient would be normalised by Adam instead).
# LAMB: the update is wd * w, its trust ratio |w| / |wd * w| makes it w * (1 - lr) (to the float32
# accuracy of the two norms). Excluded ones stay exactly.
cfg = bert.CONFIGS["bert_tiny"]
for name, lr, rtol in (("adam", 0.5, 1e-6), ("lamb", 0.25, 1e-4)):
    b = backend(optimizer=name)
    mx_bert.load_canonical(b.net, bert.random_weights(cfg, seed=3))  # biases and betas non-zero too
    params = b.net.canonical_parameters()
    before = {k: p.data().asnumpy() for k, (p, _) in params.items()}
    b.trainer.set_learning_rate(lr)
    with autograd.record():
        loss = b.loss_fn(*b.net(*b.inputs), *b.targets) * 0.0
    loss.backward()
    b.trainer.step(1)
    wd = bert.OPTIMIZERS[name].weight_decay
    decayed = 1 - lr * wd if name == "adam" else 1 - lr
    result = {"decayed": [], "kept": [], "other": []}
    for k, (p, _) in params.items():
        after = p.data().asnumpy()
        if np.allclose(after, before[k], rtol=0, atol=0):
            result["kept"].append(k)
        elif np.allclose(after, before[k] * decayed, rtol=rtol, atol=1e-9):
            result["decayed"].append(k)
        else:
            result["other"].append(k)
    out[name] = result

# Clipping: the same first step with and without: clipped, the global norm is clip_norm, same direction.
grads = {}
for clip in (False, True):
    b = backend(grad_clip=clip)
    b.step()
    grads[clip] = [p.grad().asnumpy().astype(np.float64) for p in b.trainer._params]
norm = lambda gs: float(np.sqrt(sum((g ** 2).sum() for g in gs)))
out["norm_unclipped"], out["norm_clipped"] = norm(grads[False]), norm(grads[True])
out["direction_error"] = max(float(np.abs(c * out["norm_unclipped"] - u).max())
                             for c, u in zip(grads[True], grads[False]))

# Training works: 20 steps of the harness's own step on its fixed batch, a constant learning rate.
b = backend()
b.settings = dataclasses.replace(b.settings, learning_rate=1e-3, warmup_steps=0, train_steps=10**9)
losses = []
for _ in range(20):
    b.step()
    losses.append(b.loss())
out["losses"] = losses
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def training(mx_python) -> dict:
    return mx_script(mx_python, TRAINING_CHECKS)


def test_weight_decay_is_decoupled_and_skips_layer_norm_and_biases(training):
    names = set(bert.canonical_shapes(bert.CONFIGS["bert_tiny"]))
    excluded = {n for n in names if bert.excluded_from_weight_decay(n)}
    assert excluded and "cls/predictions/output_bias" in excluded
    for name in ("adam", "lamb"):
        assert not training[name]["other"], training[name]["other"]
        assert set(training[name]["kept"]) == excluded
        assert set(training[name]["decayed"]) == names - excluded  # the tied word embeddings among them


def test_clipping_bounds_the_global_norm(training):
    assert training["norm_unclipped"] > 2.0  # the clip really acts
    assert training["norm_clipped"] == pytest.approx(bert.OPTIMIZERS["adam"].clip_norm, rel=1e-4)
    assert training["direction_error"] <= 1e-5 * training["norm_unclipped"]


def test_loss_falls_on_a_fixed_batch(training):
    losses = training["losses"]
    assert all(np.isfinite(losses))
    assert losses[-1] < 0.5 * losses[0] and min(losses[-5:]) < min(losses[:5])
