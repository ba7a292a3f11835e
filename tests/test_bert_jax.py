"""BERT pretraining in the JAX backend, for real on CPU: the Flax model's canonical layout, the same loss and
gradients as PyTorch's BERT from the same weights, the Optax optimizers' weight decay, clipping and schedule,
and harness runs of bert_tiny (the logits against PyTorch's: tests/test_bert_equivalence.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import env_python, read_log, run_harness, run_python
from dlbench.harness import bert  # standard library and numpy only: importable here (conftest's sys.path)

# The fast tier runs one framework where one is enough (PyTorch's files): this file is the full tier's.
pytestmark = pytest.mark.slow

TINY = ["--seq-length", "32", "--batch-size", "2", "--warmup-steps", "1", "--measured-steps", "3", "--device", "cpu"]
SMALL = {  # a reduced BERT for the direct checks: vocabulary above bert.FIRST_WORDPIECE_ID, dropout off
    "vocab_size": 1100,
    "hidden_size": 16,
    "num_layers": 2,
    "num_heads": 2,
    "intermediate_size": 32,
    "max_position_embeddings": 16,
    "hidden_dropout": 0.0,
    "attention_dropout": 0.0,
}


@pytest.fixture(scope="module")
def jax_python() -> Path:
    return env_python("jax")


def run_bert(python: Path, log: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict[str, list[dict]]]:
    result = run_harness(python, log, *args, framework="jax", model="bert_tiny", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result, read_log(log)


# ---- direct API checks, one JAX process for all of them

API_FACTS = """
    import json
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from dlbench.harness import bert
    from dlbench.harness.backends.jax import bert as jax_bert

    facts = {}
    for name in ("bert_tiny", "bert_base"):
        cfg = bert.CONFIGS[name]
        params = jax.eval_shape(lambda: jax_bert.init(jax_bert.BertPretraining(cfg), jax.random.PRNGKey(0), 32))
        flat = jax_bert.canonical(params)
        facts[name] = {"parameters": jax_bert.parameter_count(params), "shapes": {n: list(v.shape) for n, v in
                       flat.items()}}

    small = bert.BertConfig(**SMALL)
    params = jax_bert.from_canonical(small, bert.random_weights(small, seed=1))  # biases, LayerNorm not 0/1
    flat = lambda tree: {n: np.asarray(v) for n, v in jax_bert.canonical(tree).items()}
    before = flat(params)

    # weight decay: zero gradients, so Adam's and LAMB's moments give no update and only decay is left
    facts["decay"] = {}
    for name in ("adam", "lamb"):
        optimizer = jax_bert.make_optimizer(name, params, learning_rate=0.5)
        zeros = jax.tree.map(jnp.zeros_like, params)
        updates, _ = optimizer.update(zeros, optimizer.init(params), params)
        after = flat(optax.apply_updates(params, updates))
        factor = {"adam": 1 - 0.5 * bert.OPTIMIZERS[name].weight_decay,  # w - lr wd w
                  "lamb": 1 - 0.5}  # the trust ratio scales the pure-decay update wd w to ||w||: w - lr w
        facts["decay"][name] = {
            n: "unchanged" if np.array_equal(a, before[n]) else
               "decayed" if np.allclose(a, before[n] * factor[name], rtol=1e-5, atol=0) else "other"
            for n, a in after.items()}

    # clipping: gradients of global norm 1000 reach Adam clipped to norm 1 (its first moment is 0.1 x them)
    grads = jax.tree.map(lambda p: jnp.full_like(p, 1.0), params)
    grads = jax.tree.map(lambda g: g * 1000 / optax.global_norm(grads), grads)
    facts["clip"] = {}
    for clip in (None, 1.0):
        optimizer = jax_bert.make_optimizer("adam", params, learning_rate=0.1, clip_norm=clip)
        _, state = optimizer.update(grads, optimizer.init(params), params)
        facts["clip"][str(clip)] = float(optax.global_norm(optax.tree_utils.tree_get(state, "mu")))

    # the learning-rate schedule, as Optax applies it at its 0-based update count
    facts["schedule"] = {}
    for name, steps in {"adam": [0, 1, 4999, 9999, 10000, 500000, 999999, 1000000, 1200000],
                        "lamb": [0, 1, 1999, 2000, 4000, 7037, 7038, 9000]}.items():
        schedule = jax_bert.schedule(bert.OPTIMIZERS[name])
        facts["schedule"][name] = [[bert.learning_rate(bert.OPTIMIZERS[name], s), float(schedule(s))] for s in steps]
    print(json.dumps(facts))
"""


@pytest.fixture(scope="module")
def api_facts(jax_python) -> dict:
    return json.loads(run_python(jax_python, API_FACTS.replace("SMALL", repr(SMALL))).strip().splitlines()[-1])


@pytest.mark.parametrize("model", ["bert_tiny", "bert_base"])
def test_parameter_tree_is_the_canonical_layout(api_facts, model):
    """Flattened with '/', the Flax parameters are Google's checkpoint names and shapes, nothing else (the
    decoder tied to the word embeddings)."""
    facts, cfg = api_facts[model], bert.CONFIGS[model]
    assert facts["parameters"] == bert.parameter_count(cfg)
    assert model != "bert_base" or facts["parameters"] == bert.BERT_BASE_PARAMETERS == 110_106_428
    assert {name: tuple(shape) for name, shape in facts["shapes"].items()} == bert.canonical_shapes(cfg)


@pytest.mark.parametrize("optimizer", ["adam", "lamb"])
def test_weight_decay_is_decoupled_and_spares_layernorm_and_biases(api_facts, optimizer):
    decay = api_facts["decay"][optimizer]
    expected = {name: "unchanged" if bert.excluded_from_weight_decay(name) else "decayed" for name in decay}
    assert decay == expected
    assert decay["bert/embeddings/word_embeddings"] == decay["cls/seq_relationship/output_weights"] == "decayed"


def test_clipping_bounds_the_global_norm(api_facts):
    clip = api_facts["clip"]
    assert clip["None"] == pytest.approx(0.1 * 1000, rel=1e-5)  # (1 - beta1) x the gradients
    assert clip["1.0"] == pytest.approx(0.1 * bert.OPTIMIZERS["adam"].clip_norm, rel=1e-5)


@pytest.mark.parametrize("optimizer", ["adam", "lamb"])
def test_learning_rate_schedule_is_bert_learning_rate(api_facts, optimizer):
    peak = bert.OPTIMIZERS[optimizer].learning_rate  # float32 steps: near the decay's end within 1e-7 of the peak
    for expected, got in api_facts["schedule"][optimizer]:
        assert got == pytest.approx(expected, rel=1e-5, abs=1e-7 * peak)


# ---- the same loss and gradients as PyTorch

TORCH_GRADIENTS = """
import sys
import numpy as np
import torch
from dlbench.harness import bert
from dlbench.harness.backends.pytorch import bert as torch_bert

cfg = bert.BertConfig(**SMALL)
weights, batch = bert.random_weights(cfg, seed=3), bert.synthetic_batch(cfg, 3, 16, 3, seed=4, padding=True)
model = torch_bert.BertForPreTraining(cfg)
torch_bert.load_canonical(model, weights)
_, _, loss = model(**torch_bert.batch_tensors(batch))
loss.backward()
grads = {name.replace("/", "|"): (p.grad.T if transposed else p.grad).numpy()
         for name, (p, transposed) in torch_bert.canonical_parameters(model).items()}
np.savez(sys.argv[1], loss=loss.item(), **{"w|" + k: v for k, v in weights.items()},
         **{"b|" + k: v for k, v in batch.items()}, **{"g|" + k: v for k, v in grads.items()})
"""

JAX_GRADIENTS = """
import json
import sys
import jax
import numpy as np
from dlbench.harness import bert
from dlbench.harness.backends.jax import bert as jax_bert

ref = dict(np.load(sys.argv[1]))
cfg = bert.BertConfig(**SMALL)
weights = {k[2:].replace("|", "/"): v for k, v in ref.items() if k.startswith("w|")}
batch = jax_bert.batch_arrays({k[2:]: v for k, v in ref.items() if k.startswith("b|")})
model = jax_bert.BertPretraining(cfg)
loss, grads = jax.value_and_grad(lambda p: model.apply({"params": p}, batch, train=False)[2])(
    jax_bert.from_canonical(cfg, weights))
# relative to each tensor's largest gradient, but at least 1e-4 of the largest of all: a key's bias has a gradient of
# exactly 0 (a constant added to every key's score leaves the softmax unchanged), so both hold rounding noise only
largest = max(float(np.max(np.abs(v))) for k, v in ref.items() if k.startswith("g|"))
errors = {}
for name, g in jax_bert.canonical(grads).items():
    expected = ref["g|" + name.replace("/", "|")]
    scale = max(float(np.max(np.abs(expected))), 1e-4 * largest)
    errors[name] = float(np.max(np.abs(np.asarray(g) - expected)) / scale)
print(json.dumps({"loss": float(loss), "torch_loss": float(ref["loss"]), "tensors": len(errors),
                  "worst": max(errors, key=errors.get), "max_rel_error": max(errors.values())}))
"""


def test_same_weights_give_the_pytorch_loss_and_gradients(jax_python, torch_python, tmp_path):
    """Canonical weights and a padded batch (dropout off): the Flax BERT's loss and the gradient of every canonical
    tensor are PyTorch's (the tied decoder's gradient included in the word embeddings')."""
    reference = tmp_path / "reference.npz"
    run_python(torch_python, TORCH_GRADIENTS.replace("SMALL", repr(SMALL)), str(reference))
    result = json.loads(
        run_python(jax_python, JAX_GRADIENTS.replace("SMALL", repr(SMALL)), str(reference)).strip().splitlines()[-1]
    )
    assert result["tensors"] == len(bert.canonical_shapes(bert.BertConfig(**SMALL)))
    assert result["loss"] == pytest.approx(result["torch_loss"], rel=1e-5)
    assert result["max_rel_error"] <= 1e-4, result


# ---- the harness with BERT


def test_bert_options_for_resnet_are_unsupported(jax_python, tmp_path):
    log = tmp_path / "run.jsonl"
    run_harness(
        jax_python,
        log,
        "--topology",
        "1x1",
        "--optimizer",
        "lamb",
        "--batch-size",
        "2",
        "--device",
        "cpu",
        framework="jax",
    )
    summary = read_log(log)["summary"][-1]
    assert summary["status"] == "unsupported" and "optimizer 'lamb' is a BERT setting" in summary["error"]
