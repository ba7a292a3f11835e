"""The JAX backend (JAX with Flax and Optax), for real, in its own environment: its versions, its shipped study, the
Flax ResNet-50 v1.5's loss and gradients from PyTorch's weights (the same as PyTorch's), and the .test/config_jax
case through Snakemake to the report. The runs every framework makes (one rank and several, bf16, out of memory,
the compiler axis, real data) are tests/test_contract_framework.py's; two nodes joined by jax.distributed, through
SLURM and Snakemake to the records, tests/test_multinode.py's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO, case_config, env_python, harness_env, snakemake, write_config
from dlbench.plan.study import load_study

# The fast tier runs one framework where one is enough (PyTorch's files): this file is the full tier's.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def jax_python() -> Path:
    return env_python("jax")


def test_env_has_jax_flax_and_optax_on_python_3_11(jax_python):
    versions = "jax.__version__, flax.__version__, optax.__version__, sys.version_info[:2]"
    code = f"import jax, flax, optax, sys; print({versions})"
    out = subprocess.run([str(jax_python), "-c", code], capture_output=True, text=True, check=True).stdout.split(" ", 3)
    assert out[:3] == ["0.10.2", "0.12.8", "0.2.8"] and out[3].strip() == "(3, 11)"


def test_the_shipped_jax_study_is_the_default_s_shapes_beside_pytorch():
    """workflow/studies/jax.yaml (JAX is not in the default study: its compiles would add too much): JAX and PyTorch
    on the default study's configurations, compiler off only."""
    config = yaml.safe_load((REPO / "workflow/studies/jax.yaml").read_text())
    study = load_study(config, REPO / "workflow/schemas/config.schema.yaml", REPO / "envs", REPO)
    cells = {fw: {c for c in study.configurations.values() if c.framework == fw} for fw in ("pytorch", "jax")}
    assert len(cells["jax"]) == len(cells["pytorch"]) == 8
    assert {c.compiler for c in cells["jax"]} == {False}
    default = yaml.safe_load((REPO / "config.yaml").read_text())
    assert (
        "jax" not in default["matrix"]["framework"]
        and config["matrix"]["batch_size"] == default["matrix"]["batch_size"]
    )


TORCH_REFERENCE = """
import sys
import numpy as np
import torch
from dlbench.harness.backends.pytorch.resnet import ResNet50

torch.manual_seed(0)
model = ResNet50().double()  # float64: this deep a net at random BatchNorm scales is chaotic in float32
with torch.no_grad():
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.normal_(0.0, 0.1)
            m.running_var.uniform_(0.5, 1.5)
            if not m.weight.any():  # the zero-initialised last BN of each residual branch
                m.weight.uniform_(0.5, 1.5)
state = {f"state/{k}": v.detach().numpy().copy() for k, v in model.state_dict().items()}
images = torch.randn(2, 3, 64, 64).double()
labels = torch.tensor([3, 917])
model.train()  # batch statistics, as a training step
loss = torch.nn.functional.cross_entropy(model(images), labels)
loss.backward()
grads = {f"grad/{k}": p.grad.numpy().copy() for k, p in model.named_parameters()}
np.savez(sys.argv[1], images=images.numpy(), labels=labels.numpy(), loss=loss.item(), **state, **grads)
"""

JAX_CHECK = """
import json
import sys
import jax
import jax.numpy as jnp
import numpy as np
import optax
from dlbench.harness.backends.jax import resnet

jax.config.update("jax_enable_x64", True)
ref = np.load(sys.argv[1])
model = resnet.ResNet50(dtype=jnp.float64)
params, stats = resnet.init(model, jax.random.PRNGKey(1), 64)
params, stats = resnet.load_torch_state(params, stats, {k[6:]: ref[k] for k in ref.files if k.startswith("state/")})
images = jnp.asarray(ref["images"].transpose(0, 2, 3, 1))  # NCHW -> NHWC

def loss_fn(params):
    logits, _ = model.apply({"params": params, "batch_stats": stats}, images, train=True, mutable=["batch_stats"])
    return optax.softmax_cross_entropy_with_integer_labels(logits, jnp.asarray(ref["labels"])).mean()

loss, grads = jax.jit(jax.value_and_grad(loss_fn))(params)
grads = resnet.torch_gradients(grads, stats)
errors = {k: float(np.max(np.abs(g - ref["grad/" + k])) / max(float(np.max(np.abs(ref["grad/" + k]))), 1e-12))
          for k, g in grads.items()}
print(json.dumps({"loss": float(loss), "torch_loss": float(ref["loss"]), "tensors": len(grads),
                  "parameters": resnet.parameter_count(params), "worst": max(errors, key=errors.get),
                  "max_rel_error": max(errors.values())}))
"""


def test_same_weights_give_the_pytorch_loss_and_gradients(jax_python, torch_python, tmp_path):
    """PyTorch's ResNet-50 state (names, OIHW layouts, BN statistics) loaded into the Flax model: the same
    training-mode loss and the same gradient for every one of its 161 parameters. In float64: with the last
    BatchNorm of each branch at a random scale (so that every branch counts) 16 blocks amplify rounding, and PyTorch's
    own float32 loss differs from its float64 one by 4% here; Flax's BatchNorm still reduces in float32 (1e-5)."""
    reference = tmp_path / "reference.npz"
    threads = dict(harness_env(), OMP_NUM_THREADS="1")
    subprocess.run(
        [str(torch_python), "-c", TORCH_REFERENCE, str(reference)], env=threads, check=True, capture_output=True
    )
    out = subprocess.run(
        [str(jax_python), "-c", JAX_CHECK, str(reference)], env=threads, check=True, capture_output=True, text=True
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["parameters"] == 25_557_032 and result["tensors"] == 161
    assert result["loss"] == pytest.approx(result["torch_loss"], rel=1e-6)
    assert result["max_rel_error"] <= 1e-4, result


def test_a_study_with_jax_runs_through_snakemake_to_the_report(jax_python, tmp_path):
    """JAX in a study as any framework: its runs (1x1, 1x2; compiler on recorded as unsupported), the records, the
    summary's speedup and the report."""
    config = case_config("jax")
    result = snakemake(tmp_path, "--cores", "2", "--configfile", str(write_config(tmp_path / "study.yaml", config)))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    report = tmp_path / "results" / "reports" / "v1"
    records = pd.read_csv(report / "records.csv")
    status = {(r.topology, bool(r.compiler)): r.status for r in records.itertuples()}
    assert status == {("1x1", False): "ok", ("1x2", False): "ok", ("1x1", True): "unsupported"}
    assert set(records["framework"]) == {"jax"}
    summary = pd.read_csv(report / "summary.csv")
    assert summary[summary["topology"] == "1x1"]["speedup"].dropna().tolist() == [pytest.approx(1.0)]
    html = (report / "index.html").read_text()
    assert "JAX" in html
    env = json.loads((report / "environment.json").read_text())
    assert any(p.startswith("jax==0.10.2") for p in env["frameworks"]["jax"]["packages"])
