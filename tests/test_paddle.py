"""The PaddlePaddle backend, for real, in its own environment: its versions, ResNet-50 v1.5's shape and the PyTorch
model's loss and gradients from the same weights, BERT's optimizers as PyTorch's, a GPU asked of the CPU build.
And the .test/config_paddle case (Paddle beside PyTorch) through Snakemake to the report.
The runs every framework makes (one rank and several, AMP, out of memory, the compiler axis, real data) are
tests/test_contract_framework.py's; BERT's logits beside the other frameworks' tests/test_bert_equivalence.py's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from test_jax import TORCH_REFERENCE  # PyTorch's ResNet-50 in float64: state, one batch, loss and gradients

from conftest import case_config, env_python, harness_env, read_log, run_harness, snakemake, write_config
from dlbench.harness import bert

# The fast tier runs one framework where one is enough (PyTorch's files): this file is the full tier's.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def paddle_python() -> Path:
    return env_python("paddle")


def script(python: Path, code: str, *args: str) -> dict:
    """Run `code` in an environment (one thread: the float64 references are compared exactly); its last line."""
    env = dict(harness_env(), OMP_NUM_THREADS="1")
    done = subprocess.run(
        [str(python), "-c", code, *args], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_env_is_paddle_3_3_on_python_3_11_cpu_build(paddle_python):
    facts = "paddle.__version__, sys.version_info[:2], paddle.is_compiled_with_cuda()"
    code = f"import json, sys, paddle; print(json.dumps([{facts}]))"
    version, python, cuda = script(paddle_python, code)
    assert version.startswith("3.3.") and python == [3, 11] and cuda is False


RESNET_SHAPE = """
import json
import numpy as np
from dlbench.harness.backends.paddle.resnet import ResNet50, parameter_count
m = ResNet50()
down = [b for b in m.layers if b.downsample is not None]
convs = [w for k, w in m.state_dict().items() if k.endswith("conv2.weight")]
first = convs[0].numpy()  # 64 x 64 x 3 x 3: Kaiming normal with fan_out = 64 * 9
print(json.dumps({
    "parameters": parameter_count(m), "tensors": len([p for p in m.parameters() if not p.stop_gradient]),
    "conv1_strides": [b.conv1._stride for b in down], "conv2_strides": [b.conv2._stride for b in down],
    "bn3": float(sum(float(b.bn3.weight.abs().sum()) for b in m.layers)),
    "conv_std": float(first.std()), "fan_out_std": float(np.sqrt(2 / (64 * 9))),
    "fc": list(m.fc.weight.shape), "fc_bound": float(np.abs(m.fc.weight.numpy()).max()),
    "tiny": parameter_count(ResNet50(model="resnet_tiny")),
}))
"""


def test_resnet50_v1_5_has_the_reference_parameters_strides_and_initialisation(paddle_python):
    out = script(paddle_python, RESNET_SHAPE)
    assert out["parameters"] == 25_557_032 and out["tensors"] == 161 and out["tiny"] == 1_019_384
    # v1.5: a downsampling bottleneck's stride on its 3x3 convolution; each branch's last BatchNorm starts at 0
    assert out["conv1_strides"] == [[1, 1]] * 4 and out["conv2_strides"] == [[1, 1], [2, 2], [2, 2], [2, 2]]
    assert out["bn3"] == 0.0
    assert out["conv_std"] == pytest.approx(out["fan_out_std"], rel=0.05)
    assert out["fc"] == [2048, 1000] and out["fc_bound"] <= 1 / 2048**0.5  # torch.nn.Linear's uniform bound


PADDLE_CHECK = """
import json
import sys
import numpy as np
import paddle
import paddle.nn.functional as F
from dlbench.harness.backends.paddle.resnet import ResNet50, load_torch_state, torch_name

paddle.set_default_dtype("float64")
ref = np.load(sys.argv[1])
model = ResNet50()
load_torch_state(model, {k[6:]: ref[k] for k in ref.files if k.startswith("state/")})
model.train()  # batch statistics, as a training step
loss = F.cross_entropy(model(paddle.to_tensor(ref["images"])), paddle.to_tensor(ref["labels"]))
loss.backward()
errors = {}
for name, p in model.named_parameters():
    if p.stop_gradient:  # BatchNorm's statistics
        continue
    grad = p.grad.numpy()
    key = "grad/" + torch_name(name)
    expected = ref[key].T if name == "fc.weight" else ref[key]
    errors[key] = float(np.max(np.abs(grad - expected)) / max(float(np.max(np.abs(expected))), 1e-12))
print(json.dumps({"loss": float(loss), "torch_loss": float(ref["loss"]), "tensors": len(errors),
                  "worst": max(errors, key=errors.get), "max_rel_error": max(errors.values())}))
"""


def test_same_weights_give_the_pytorch_loss_and_gradients(paddle_python, torch_python, tmp_path):
    """PyTorch's ResNet-50 state (names, OIHW layouts, BatchNorm statistics) loaded into the Paddle model: the same
    training-mode loss and the same gradient for every one of its 161 parameters, in float64 (the last BatchNorm of
    each branch at a random scale, so that every branch counts)."""
    reference = tmp_path / "reference.npz"
    threads = dict(harness_env(), OMP_NUM_THREADS="1")
    subprocess.run(
        [str(torch_python), "-c", TORCH_REFERENCE, str(reference)], env=threads, check=True, capture_output=True
    )
    result = script(paddle_python, PADDLE_CHECK, str(reference))
    assert result["tensors"] == 161
    assert result["loss"] == pytest.approx(result["torch_loss"], rel=1e-9)
    assert result["max_rel_error"] <= 1e-8, result


REJECTS = """
import json
import numpy as np
from dlbench.harness.backends.paddle.resnet import ResNet50, load_torch_state, torch_name
model = ResNet50(model="resnet_tiny")
state = {torch_name(k): v.numpy() for k, v in model.state_dict().items()}
state["fc.weight"] = state["fc.weight"].T  # PyTorch's layout
state["bn1.num_batches_tracked"] = np.zeros((), "int64")
load_torch_state(model, state)
errors = []
for bad in ({k: v for k, v in state.items() if k != "fc.bias"}, {**state, "fc.weight": np.zeros((10, 512))}):
    try:
        load_torch_state(model, bad)
    except (KeyError, ValueError) as exc:
        errors.append([type(exc).__name__, str(exc)])
print(json.dumps(errors))
"""


def test_load_torch_state_rejects_a_state_that_does_not_fit(paddle_python):
    missing, shape = script(paddle_python, REJECTS)
    assert missing[0] == "KeyError" and "fc.bias" in missing[1]
    assert shape[0] == "ValueError" and "fc.weight" in shape[1]


# One BERT-Tiny update from the same canonical weights and batch (dropout off) in both frameworks: the change of every
# tensor (its norm), Paddle's AdamW and LAMB against PyTorch's (decoupled weight decay without it on LayerNorm and
# biases, bias correction, LAMB's trust ratio on every tensor). Learning rate 1e-3 for a visible change.
OPTIMIZER_STEP = """
import json
import sys
import numpy as np
from dataclasses import replace
from dlbench.harness import bert
cfg = bert.CONFIGS["bert_tiny"]
weights = bert.random_weights(cfg, seed=3)
batch = bert.synthetic_batch(cfg, 4, 32, 5, seed=4, padding=True)
settings = replace(bert.OPTIMIZERS[sys.argv[2]], learning_rate=1e-3, warmup_steps=0)
if sys.argv[1] == "paddle":
    import paddle
    from dlbench.harness.backends.paddle import bert as impl
    model = impl.BertForPreTraining(cfg)
    impl.load_canonical(model, weights)
    model.eval()
    optimizer, _ = impl.make_optimizer(model, sys.argv[2], settings)
    model(**impl.batch_tensors(batch))[2].backward()
    optimizer.step()
else:
    import torch
    from dlbench.harness.backends.pytorch import bert as impl
    model = impl.BertForPreTraining(cfg).eval()
    impl.load_canonical(model, weights)
    optimizer = impl.make_optimizer(model, sys.argv[2], settings)
    model(**impl.batch_tensors(batch))[2].backward()
    optimizer.step()
deltas = {}
for name, (param, transposed) in impl.canonical_parameters(model).items():
    value = param.detach().cpu().numpy() if sys.argv[1] == "pytorch" else param.numpy()
    deltas[name] = (value.T if transposed else value) - weights[name]
np.savez(sys.argv[3], **deltas)
print(json.dumps({"tensors": len(deltas)}))
"""


@pytest.mark.parametrize("optimizer", ["adam", "lamb"])
def test_bert_optimizers_update_as_pytorchs(paddle_python, torch_python, optimizer, tmp_path):
    import numpy as np

    outputs = {}
    for framework, python in (("paddle", paddle_python), ("pytorch", torch_python)):
        out = tmp_path / f"{framework}.npz"
        tensors = script(python, OPTIMIZER_STEP, framework, optimizer, str(out))["tensors"]
        assert tensors == len(bert.canonical_shapes(bert.CONFIGS["bert_tiny"]))
        with np.load(out) as f:
            outputs[framework] = dict(f)
    # The keys' biases have a zero gradient (a bias on the keys shifts all of a query's scores alike: softmax does
    # not see it), so where they move at all (LAMB's trust ratio normalises any update) rounding points the way.
    rounding = {f"bert/encoder/layer_{i}/attention/self/key/bias" for i in range(2)}
    errors = {}
    for name, delta in outputs["pytorch"].items():
        if name not in rounding:
            assert np.linalg.norm(delta) > 0, name
            errors[name] = float(np.linalg.norm(outputs["paddle"][name] - delta) / np.linalg.norm(delta))
    worst = max(errors, key=errors.get)
    assert len(errors) == 44 and errors[worst] <= 1e-3, (worst, errors[worst])


def test_cuda_with_the_cpu_build_is_unsupported_saying_how_to_bring_one(paddle_python, tmp_path):
    log = tmp_path / "run.jsonl"
    args = ["--topology", "1x1", "--image-size", "32", "--batch-size", "2", "--measured-steps", "1"]
    run_harness(paddle_python, log, *args, "--device", "cuda", framework="paddle", model="resnet_tiny")
    summary = read_log(log)["summary"][-1]
    assert summary["status"] == "unsupported", summary
    assert "a CPU-only build" in summary["error"] and "docs/gpu.md" in summary["error"]


def test_a_study_with_paddle_beside_pytorch_runs_through_snakemake_to_the_report(paddle_python, torch_python, tmp_path):
    """.test/config_paddle: Paddle beside PyTorch as DLPerf compares them (ResNet and BERT, synthetic and real data
    prepared by the study, 1x1 and 1x2, Paddle's compiler on), every run ok, through the records to the report."""
    config = case_config("paddle")
    result = snakemake(tmp_path, "--cores", "2", "--configfile", str(write_config(tmp_path / "study.yaml", config)))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    report = tmp_path / "results" / "reports" / "v1"
    records = pd.read_csv(report / "records.csv")
    assert len(records) == 10 and set(records["status"]) == {"ok"}, records[["config_id", "status"]]
    paddle = records[records["framework"] == "paddle"]
    cells = {(r.model, r.topology, r.data, bool(r.compiler)) for r in paddle.itertuples()}
    assert cells == {
        (model, topology, data, compiler)
        for model in ("resnet_tiny", "bert_tiny")
        for topology, data, compiler in (("1x1", "synthetic", False), ("1x2", "synthetic", False),
                                         ("1x1", "real", False), ("1x1", "synthetic", True))
    }  # fmt: skip
    assert set(paddle["framework_version"]) == {"3.3.1"}
    assert (paddle[paddle["topology"] == "1x2"]["world_size"] == 2).all()
    summary = pd.read_csv(report / "summary.csv")
    paddle_1x2 = summary[(summary["framework"] == "paddle") & (summary["topology"] == "1x2")]
    assert len(paddle_1x2) == 2 and paddle_1x2["speedup"].notna().all()  # against its 1x1 row
    html = (report / "index.html").read_text()
    assert "PaddlePaddle" in html and "paddle.jit.to_static" in html
    env = json.loads((report / "environment.json").read_text())
    assert any(p.startswith("paddlepaddle==3.3.1") for p in env["frameworks"]["paddle"]["packages"])
