"""The TensorFlow 2 backend, for real: Keras ResNet-50 v1.5 at tiny shapes on CPU, and its equivalence
with the PyTorch model (same weights, same input -> same logits and loss)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import env_python, read_log, run_harness, run_python

# The fast tier runs one framework where one is enough (PyTorch's files): this file is the full tier's.
pytestmark = pytest.mark.slow

TINY = ["--image-size", "32", "--batch-size", "2", "--warmup-steps", "1", "--measured-steps", "3", "--device", "cpu"]


@pytest.fixture(scope="module")
def tf_python() -> Path:
    return env_python("tensorflow")


@pytest.fixture(scope="module")
def pytorch_python() -> Path:
    return env_python("pytorch")


def last_json(stdout: str):
    return json.loads(stdout.strip().splitlines()[-1])


# ---- the model


def test_resnet50_v1_5_has_the_pytorch_parameters_layers_and_strides(tf_python, pytorch_python):
    tf_facts = last_json(
        run_python(
            tf_python,
            """
        import json
        import numpy as np
        from dlbench.harness.backends.tensorflow import resnet as tf_models
        m = tf_models.build(tf_models.ResNet50())
        down = [b for b in m.blocks if b.downsample is not None]
        print(json.dumps({
            "parameters": tf_models.parameter_count(m),
            "names": tf_models.torch_state_names(m),
            "shapes": [list(w.shape) for w in m.weights],
            "paths": [w.path for w in m.weights],
            "trainable": [list(w.shape) for w in m.trainable_weights],
            "strides": [[b.conv1.strides[0] for b in down], [b.conv2.strides[0] for b in down]],
        }))
    """,
        )
    )
    torch_facts = last_json(
        run_python(
            pytorch_python,
            """
        import json
        from dlbench.harness.backends.pytorch.resnet import ResNet50
        m = ResNet50()
        state = {k: list(v.shape) for k, v in m.state_dict().items() if not k.endswith("num_batches_tracked")}
        print(json.dumps({"names": list(state), "shapes": list(state.values()),
                          "parameters": [list(p.shape) for p in m.parameters()]}))
    """,
        )
    )
    assert tf_facts["parameters"] == 25_557_032
    # v1.5: the stride of a downsampling bottleneck sits on its 3x3 convolution, not the first 1x1
    assert tf_facts["strides"] == [[1, 1, 1, 1], [1, 2, 2, 2]]
    # same layers in the same order: Keras holds its weights in the order of PyTorch's state_dict
    assert tf_facts["names"] == torch_facts["names"]
    assert len(tf_facts["paths"]) == len(tf_facts["names"]) == 267
    for name, path in zip(tf_facts["names"], tf_facts["paths"], strict=True):
        assert path.split("/")[-2] == name.rsplit(".", 1)[0]  # Keras layer named after the PyTorch module

    def torch_layout(shape):  # HWIO -> OIHW, [in, out] -> [out, in]
        return {4: lambda s: [s[3], s[2], s[0], s[1]], 2: lambda s: [s[1], s[0]]}.get(len(shape), list)(shape)

    assert [torch_layout(s) for s in tf_facts["shapes"]] == torch_facts["shapes"]
    assert [torch_layout(s) for s in tf_facts["trainable"]] == torch_facts["parameters"]


TORCH_REFERENCE = """
    import sys
    import numpy as np
    import torch
    from dlbench.harness.backends.pytorch.resnet import ResNet50
    torch.manual_seed(0)
    model = ResNet50()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # non-trivial BN: random statistics, and no zero gammas
        for mod in model.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                n = mod.num_features
                mod.weight.copy_(torch.rand(n, generator=g) + 0.5)
                mod.bias.copy_(torch.rand(n, generator=g) * 0.4 - 0.2)
                mod.running_mean.copy_(torch.rand(n, generator=g) * 0.4 - 0.2)
                mod.running_var.copy_(torch.rand(n, generator=g) * 1.5 + 0.5)
        model.fc.bias.copy_(torch.rand(1000, generator=g) - 0.5)
    state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    images = torch.randn(2, 3, 64, 64, generator=g)
    labels = torch.tensor([3, 997])
    model.eval()
    with torch.no_grad():
        eval_logits = model(images)
    model.train()  # batch statistics; updates the running statistics
    with torch.no_grad():
        train_loss = torch.nn.functional.cross_entropy(model(images), labels)
    running_means = {k: v.numpy() for k, v in model.state_dict().items() if k.endswith("running_mean")}
    np.savez(sys.argv[1], images=images.numpy(), labels=labels.numpy(), eval_logits=eval_logits.numpy(),
             train_loss=train_loss.numpy(), **{"state/" + k: v for k, v in state.items()},
             **{"after/" + k: v for k, v in running_means.items()})
"""

TF_CHECK = """
    import json
    import sys
    import numpy as np
    import tensorflow as tf
    from dlbench.harness.backends.tensorflow import resnet as tf_models
    ref = np.load(sys.argv[1])
    state = {k[len("state/"):]: ref[k] for k in ref.files if k.startswith("state/")}
    model = tf_models.ResNet50()
    tf_models.load_torch_state(model, state)
    images = np.ascontiguousarray(ref["images"].transpose(0, 2, 3, 1))  # NCHW -> NHWC
    logits = model(images, training=False).numpy()
    out = model(images, training=True)  # batch statistics, as PyTorch's train mode
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=ref["labels"], logits=out))
    means = {layer.name: layer.moving_mean.numpy() for layer in tf_models.torch_layers(model)
             if isinstance(layer, tf.keras.layers.BatchNormalization)}
    rel = lambda a, b: float(np.max(np.abs(a - b)) / np.max(np.abs(b)))
    print(json.dumps({
        "logits_rel_error": rel(logits, ref["eval_logits"]),
        "logits_scale": float(np.max(np.abs(ref["eval_logits"]))),
        "argmax_equal": bool((logits.argmax(1) == ref["eval_logits"].argmax(1)).all()),
        "loss": float(loss), "torch_loss": float(ref["train_loss"]),
        "running_mean_rel_error": max(rel(v, ref[f"after/{k}.running_mean"]) for k, v in means.items()),
        "running_means": len(means),
    }))
"""


def test_same_weights_give_the_pytorch_outputs(tf_python, pytorch_python, tmp_path):
    """PyTorch weights loaded with load_torch_state: same logits (inference) and loss (training mode)."""
    reference = tmp_path / "reference.npz"
    run_python(pytorch_python, TORCH_REFERENCE, str(reference))
    result = last_json(run_python(tf_python, TF_CHECK, str(reference)))
    assert result["logits_scale"] > 0.1  # a real signal through all 16 blocks, not one that vanished
    assert result["logits_rel_error"] <= 1e-4, result
    assert result["argmax_equal"]
    assert result["loss"] == pytest.approx(result["torch_loss"], rel=1e-4), result
    # the training-mode forward also updated the BN running means the same way (momentum 0.1)
    assert result["running_means"] == 53
    assert result["running_mean_rel_error"] <= 1e-4, result


def test_load_torch_state_rejects_a_state_that_does_not_fit(tf_python):
    out = run_python(
        tf_python,
        """
        import numpy as np
        from dlbench.harness.backends.tensorflow import resnet as tf_models
        m = tf_models.build(tf_models.ResNet50(num_classes=10))
        try:
            tf_models.load_torch_state(m, {"conv1.weight": np.zeros((64, 3, 7, 7), np.float32)})
        except KeyError as e:
            print("KeyError", e)
    """,
    )
    assert "KeyError" in out and "missing" in out


# ---- the harness with the TensorFlow backend


def test_fused_sgd_is_pytorchs_update(tf_python, pytorch_python):
    """resnet.FusedSGD (TensorFlow's fused momentum kernel) makes torch.optim.SGD's updates: momentum, coupled
    weight decay, a learning rate changed between steps (time to quality's schedule)."""
    rng = np.random.default_rng(3)
    start, grads = rng.standard_normal((2, 5)).tolist(), rng.standard_normal((3, 2, 5)).tolist()
    schedule = [0.1, 0.1, 0.05]
    tf_out = last_json(
        run_python(
            tf_python,
            f"""
        import json, tensorflow as tf
        from dlbench.harness.backends.tensorflow.resnet import FusedSGD
        w = tf.Variable({start!r})
        sgd = FusedSGD([w], learning_rate=0.1, momentum=0.9, weight_decay=0.01)
        step = tf.function(lambda g: sgd.apply([g], [w]))
        for lr, g in zip({schedule!r}, {grads!r}):
            sgd.learning_rate.assign(lr)
            step(tf.constant(g))
        print(json.dumps(w.numpy().tolist()))
    """,
        )
    )
    torch_out = last_json(
        run_python(
            pytorch_python,
            f"""
        import json, torch
        w = torch.nn.Parameter(torch.tensor({start!r}))
        sgd = torch.optim.SGD([w], lr=0.1, momentum=0.9, weight_decay=0.01)
        for lr, g in zip({schedule!r}, {grads!r}):
            sgd.param_groups[0]["lr"] = lr
            w.grad = torch.tensor(g)
            sgd.step()
        print(json.dumps(w.detach().numpy().tolist()))
    """,
        )
    )
    assert np.abs(np.array(tf_out) - np.array(start)).max() > 0.1  # it moved
    np.testing.assert_allclose(tf_out, torch_out, rtol=1e-6, atol=1e-6)


def test_cuda_without_a_gpu_is_unsupported(tf_python, tmp_path):
    log = tmp_path / "run.jsonl"
    run_harness(tf_python, log, "--topology", "1x1", *TINY[:-2], "--device", "cuda", framework="tensorflow")
    entries = read_log(log)
    summary = entries["summary"][-1]
    if summary["status"] == "ok":  # a machine with a GPU and the CUDA build
        assert entries["environment"][0]["device_type"] == "cuda"
        return
    assert summary["status"] == "unsupported", summary
    assert "finds no GPU" in summary["error"]
