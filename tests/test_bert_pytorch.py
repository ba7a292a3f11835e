"""BERT pretraining in the PyTorch backend, for real on CPU: the model against a numpy transcription of
Google's BERT, the optimizers and clipping through their API, and harness runs of BERT-Tiny."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import env_python, harness_env, read_log, run_checks, run_harness
from dlbench.harness import bert

TINY = ["--batch-size", "2", "--seq-length", "32", "--warmup-steps", "1", "--measured-steps", "3", "--device", "cpu"]
TINY_PARAMETERS, BASE_PARAMETERS = 4_433_468, 110_106_428


@pytest.fixture(scope="module")
def torch_python() -> Path:
    return env_python("pytorch")


@pytest.fixture(scope="module")
def api(torch_python) -> dict:
    """The direct-API checks below, run once in one PyTorch interpreter (importing torch takes seconds):
    each CHECKS entry is the body of a function whose returned dict is api[its name]."""
    imports = (
        "import dataclasses, json, torch\n"
        "from dlbench.harness import bert\n"
        "from dlbench.harness.backends.pytorch import bert as torch_bert\n"
    )
    return run_checks(torch_python, imports, CHECKS)


CHECKS: dict[str, str] = {}  # name -> body of a function returning a JSON-able dict, run by `api`


def run_bert(python: Path, log: Path, *args: str, model: str = "bert_tiny") -> dict[str, list[dict]]:
    result = run_harness(python, log, *args, framework="pytorch", model=model, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    entries = read_log(log)
    entries["stderr"] = [{"text": result.stderr}]
    return entries


# ----------------------------------------------------------------------------- the model
CHECKS["parameters"] = """
out = {}
for name, cfg in bert.CONFIGS.items():
    model = torch_bert.BertForPreTraining(cfg)
    params = torch_bert.canonical_parameters(model)
    shapes = {k: list(p.shape[::-1] if t else p.shape) for k, (p, t) in params.items()}
    out[name] = {
        "count": torch_bert.parameter_count(model),
        "canonical_match": shapes == {k: list(v) for k, v in bert.canonical_shapes(cfg).items()},
        # every parameter of the model is one canonical tensor, exactly once (the decoder is the embedding)
        "each_once": sorted(map(id, model.parameters())) == sorted(id(p) for p, _ in params.values()),
    }
return out
"""


@pytest.mark.slow
def test_parameter_counts_and_layout_match_googles_checkpoint(api):
    out = api["parameters"]
    assert out["bert_tiny"] == {"count": TINY_PARAMETERS, "canonical_match": True, "each_once": True}
    assert out["bert_base"] == {"count": BASE_PARAMETERS, "canonical_match": True, "each_once": True}


def reference_outputs(
    w: dict[str, np.ndarray], b: dict[str, np.ndarray], heads: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """Google's modeling.py + run_pretraining.py heads, transcribed to numpy in float64 (dropout off)."""
    w = {k: v.astype(np.float64) for k, v in w.items()}

    def dense(x: np.ndarray, name: str) -> np.ndarray:
        return x @ w[f"{name}/kernel"] + w[f"{name}/bias"]

    def layer_norm(x: np.ndarray, name: str) -> np.ndarray:
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-12) * w[f"{name}/gamma"] + w[f"{name}/beta"]

    def gelu(x: np.ndarray) -> np.ndarray:
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))

    def log_softmax(x: np.ndarray) -> np.ndarray:
        x = x - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))

    ids = b["input_ids"]
    batch, seq = ids.shape
    x = (
        w["bert/embeddings/word_embeddings"][ids]
        + w["bert/embeddings/position_embeddings"][:seq]
        + w["bert/embeddings/token_type_embeddings"][b["segment_ids"]]
    )
    x = layer_norm(x, "bert/embeddings/LayerNorm")
    hidden = x.shape[-1]
    size = hidden // heads
    adder = (1.0 - b["input_mask"][:, None, None, :]) * -10000.0
    layer = 0
    while f"bert/encoder/layer_{layer}/output/dense/kernel" in w:
        p = f"bert/encoder/layer_{layer}"
        q, k, v = (
            dense(x, f"{p}/attention/self/{n}").reshape(batch, seq, heads, size).transpose(0, 2, 1, 3)
            for n in ("query", "key", "value")
        )
        probs = np.exp(log_softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(size) + adder))
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
        x = layer_norm(x + dense(context, f"{p}/attention/output/dense"), f"{p}/attention/output/LayerNorm")
        y = dense(gelu(dense(x, f"{p}/intermediate/dense")), f"{p}/output/dense")
        x = layer_norm(x + y, f"{p}/output/LayerNorm")
        layer += 1
    pooled = np.tanh(dense(x[:, 0], "bert/pooler/dense"))
    masked = x[np.arange(batch)[:, None], b["masked_lm_positions"]]
    masked = layer_norm(gelu(dense(masked, "cls/predictions/transform/dense")), "cls/predictions/transform/LayerNorm")
    mlm = masked @ w["bert/embeddings/word_embeddings"].T + w["cls/predictions/output_bias"]
    nsp = pooled @ w["cls/seq_relationship/output_weights"].T + w["cls/seq_relationship/output_bias"]
    nll = -np.take_along_axis(log_softmax(mlm), b["masked_lm_ids"][..., None], -1)[..., 0]
    weights = b["masked_lm_weights"]
    mlm_loss = (weights * nll).sum() / (weights.sum() + 1e-5)
    nsp_loss = -np.take_along_axis(log_softmax(nsp), b["next_sentence_labels"][:, None], -1).mean()
    return mlm, nsp, float(mlm_loss + nsp_loss)


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def test_outputs_match_googles_bert_in_numpy(torch_python, tmp_path):
    """bert_logits (SDPA attention) against the numpy transcription, with padding so the mask matters."""
    cfg = bert.CONFIGS["bert_tiny"]
    weights = bert.random_weights(cfg, seed=1)
    batch = bert.synthetic_batch(cfg, 3, 32, 5, seed=2, padding=True)
    assert (batch["input_mask"] == 0).any()
    np.savez(tmp_path / "w.npz", **weights)
    np.savez(tmp_path / "b.npz", **batch)
    subprocess.run(
        [
            str(torch_python),
            "-m",
            "dlbench.harness.bert_logits",
            "--framework",
            "pytorch",
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
        check=True,
        timeout=300,
    )
    out = np.load(tmp_path / "out.npz")
    mlm, nsp, loss = reference_outputs(weights, batch, cfg.num_heads)
    assert out["mlm_logits"].shape == (3, 5, cfg.vocab_size) and out["nsp_logits"].shape == (3, 2)
    assert relative_error(out["mlm_logits"], mlm) < 1e-5
    assert relative_error(out["nsp_logits"], nsp) < 1e-5
    assert float(out["loss"]) == pytest.approx(loss, rel=1e-5)


CHECKS["attention"] = """
cfg = dataclasses.replace(bert.CONFIGS["bert_tiny"], hidden_dropout=0.0)  # only the attention dropout left
w = bert.random_weights(cfg, seed=3)
batch = torch_bert.batch_tensors(bert.synthetic_batch(cfg, 2, 32, 5, seed=4, padding=True))
models = {}
for kind in ("sdpa", "explicit"):
    models[kind] = torch_bert.BertForPreTraining(cfg, attention=kind)
    torch_bert.load_canonical(models[kind], w)
with torch.no_grad():
    ev = {k: m.eval()(**batch) for k, m in models.items()}
    torch.manual_seed(0)
    train = [models["sdpa"].train()(**batch)[0] for _ in range(2)]
return {
    "eval_diff": float((ev["sdpa"][0] - ev["explicit"][0]).abs().max() / ev["explicit"][0].abs().max()),
    "train_differs_from_eval": bool((train[0] - ev["sdpa"][0]).abs().max() > 1e-3),
    "train_draws_differ": bool((train[0] - train[1]).abs().max() > 1e-3),
}
"""


@pytest.mark.slow
def test_sdpa_attention_is_the_explicit_one_with_its_dropout(api):
    """The fused path computes the same as softmax(QK^T/sqrt(d) - 10000 at padding) and applies the dropout."""
    out = api["attention"]
    assert out["eval_diff"] < 1e-5
    assert out["train_differs_from_eval"] and out["train_draws_differ"]


# ----------------------------------------------------------------------------- optimizers and clipping
CHECKS["optimizers"] = """
cfg = bert.CONFIGS["bert_tiny"]
out = {}
for name in ("adam", "lamb"):
    s = dataclasses.replace(bert.OPTIMIZERS[name], learning_rate=0.1)  # a step large enough to see
    model = torch_bert.BertForPreTraining(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1)  # no tensor is all zeros (biases start at 0), so every trust ratio is defined
    params = torch_bert.canonical_parameters(model)
    before = {k: p.detach().clone() for k, (p, _) in params.items()}
    opt = torch_bert.make_optimizer(model, name, s)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)  # a zero gradient: what moves is the weight decay alone
    opt.step()
    # Adam: w (1 - lr wd). LAMB: update = wd w, trust ||w|| / ||wd w|| = 1 / wd, so w (1 - lr).
    factor = 1 - s.learning_rate * (s.weight_decay if name == "adam" else 1.0)
    out[name] = {"decayed": [], "kept": [], "wrong": []}
    for k, (p, _) in params.items():
        if torch.equal(p, before[k]):
            out[name]["kept"].append(k)
        elif torch.allclose(p, before[k] * factor, rtol=1e-6, atol=0):
            out[name]["decayed"].append(k)
        else:
            out[name]["wrong"].append(k)
# LAMB's step on known numbers: trust = ||w|| / ||u||, and 1 where ||w|| = 0
w = torch.tensor([3.0, 4.0]); z = torch.zeros(2)
g = torch.tensor([0.5, -1.0])
lamb = torch_bert.Lamb([w, z], lr=0.1, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01)
w.grad, z.grad = g.clone(), g.clone()
w0 = w.clone()
lamb.step()
u = (0.1 * g / 0.1) / ((0.001 * g * g / 0.001).sqrt() + 1e-6) + 0.01 * w0  # bias-corrected first step
out["lamb_step"] = (w0 - 0.1 * (w0.norm() / u.norm()) * u).tolist(), w.tolist()
uz = g / (g.abs() + 1e-6)
out["lamb_zero_weight"] = (-0.1 * uz).tolist(), z.tolist()
return out
"""


def test_weight_decay_is_decoupled_and_skips_layernorm_and_biases(api):
    out = api["optimizers"]
    names = bert.canonical_shapes(bert.CONFIGS["bert_tiny"])
    excluded = sorted(n for n in names if bert.excluded_from_weight_decay(n))
    assert any("LayerNorm" in n for n in excluded) and "cls/predictions/output_bias" in excluded
    for name in ("adam", "lamb"):
        assert out[name]["wrong"] == []
        assert sorted(out[name]["kept"]) == excluded  # LayerNorm and biases: untouched
        assert sorted(out[name]["decayed"]) == sorted(set(names) - set(excluded))
    expected, got = out["lamb_step"]
    assert got == pytest.approx(expected, rel=1e-6)
    expected, got = out["lamb_zero_weight"]
    assert got == pytest.approx(expected, rel=1e-6)


CHECKS["backend"] = """
from dlbench.harness.backends.pytorch.backend import Backend
from dlbench.harness.spec import RunSpec, Unsupported

def make_backend(model, **settings):
    spec = RunSpec.of(framework="pytorch", model=model, nodes=1, devices_per_node=1, batch_size=2, precision="fp32",
                   compiler=False, data="synthetic", image_size=32, warmup_steps=0, measured_steps=3, repeat=1,
                   config_id="t", log="/dev/null", device="cpu", seq_length=32, **settings)
    return Backend(spec, rank=0, world=1, local_rank=0, threads=torch.get_num_threads())

out = {}
try:
    make_backend("resnet50", optimizer="lamb").setup()
except Unsupported as exc:
    out["resnet50_lamb"] = str(exc)
for optimizer in ("adam", "lamb"):
    for clip in (False, True):
        backend = make_backend("bert_tiny", grad_clip=clip, optimizer=optimizer)
        backend.setup()
        seen = []  # the global gradient norm and learning rate the optimizer is handed at each step
        def hook(opt, args, kwargs):
            grads = [p.grad for g in opt.param_groups for p in g["params"]]
            seen.append((float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))),
                         opt.param_groups[0]["lr"]))
        backend.optimizer.register_step_pre_hook(hook)
        for _ in range(3):
            backend.step()
        out[f"{optimizer}-{'clip' if clip else 'noclip'}"] = {
            "norms": [n for n, _ in seen], "lrs": [lr for _, lr in seen],
            "schedule": [bert.learning_rate(bert.OPTIMIZERS[optimizer], i) for i in range(3)],
            "clip_norm": bert.OPTIMIZERS[optimizer].clip_norm}
return out
"""


def test_clipping_bounds_the_global_norm_and_the_lr_follows_the_schedule(api):
    out = api["backend"]
    for optimizer in ("adam", "lamb"):
        off, on = out[f"{optimizer}-noclip"], out[f"{optimizer}-clip"]
        assert min(off["norms"]) > 2 * off["clip_norm"]  # unclipped gradients are well above the bound ...
        assert max(on["norms"]) <= on["clip_norm"] * (1 + 1e-5)  # ... and clipped ones on it
        assert max(on["norms"]) == pytest.approx(on["clip_norm"], rel=1e-4)
        for run in (off, on):  # warm-up: lr (step + 1) / warmup_steps, per 0-based step
            assert run["lrs"] == pytest.approx(run["schedule"], rel=1e-9)


def test_bert_optimizer_for_resnet50_is_unsupported(api):
    assert "'lamb' is a BERT setting" in api["backend"]["resnet50_lamb"]


CHECKS["training"] = """
torch.manual_seed(0)
cfg = bert.CONFIGS["bert_tiny"]
batch = torch_bert.batch_tensors(bert.synthetic_batch(cfg, 2, 32, 5, seed=5))
out = {}
for name, lr in (("adam", 3e-3), ("lamb", 3e-2)):
    model = torch_bert.BertForPreTraining(cfg)  # training mode: dropout on
    opt = torch_bert.make_optimizer(model, name, dataclasses.replace(bert.OPTIMIZERS[name], learning_rate=lr))
    losses = []
    for _ in range(20):  # constant learning rate: no scheduler
        _, _, loss = model(**batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    out[name] = losses
return out
"""


def test_loss_falls_on_a_fixed_batch(api):
    for name, losses in api["training"].items():
        assert losses[0] == pytest.approx(np.log(30522) + np.log(2), rel=0.05), name  # chance level at the start
        assert max(losses[-3:]) < 0.5 * losses[0], (name, losses)


# ----------------------------------------------------------------------------- harness runs
