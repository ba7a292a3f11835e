"""The MXNet 1.9.1 backend, for real: Gluon ResNet-50 v1.5 at tiny shapes on CPU, in its own environment."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import (
    AVX512_CORE,
    env_python,
    free_port,
    harness_env,
    read_log,
    run_harness,
    run_two_nodes_by_hand,
    running,
)
from dlbench.harness.sysinfo import cpu_flags

# The fast tier runs one framework where one is enough (PyTorch's files): this file is the full tier's.
pytestmark = pytest.mark.slow

TINY = ["--image-size", "32", "--batch-size", "2", "--warmup-steps", "1", "--measured-steps", "3", "--device", "cpu"]


@pytest.fixture(scope="module")
def mx_python() -> Path:
    return env_python("mxnet")


def run_mx(python: Path, log: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict[str, list[dict]]]:
    result = run_harness(python, log, *args, framework="mxnet", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result, read_log(log)


def limited_python(python: Path, tmp_path: Path, kbytes: int) -> Path:
    """`python` under an address-space limit (ulimit -v), inherited by the ranks, as some clusters set one.

    The PyPI build of MXNet 1.9 cannot even describe a tensor larger than 2^31 elements (8 GiB of
    float32), so on a 24 GiB machine a real allocation failure needs a limit below the machine's memory.
    """
    wrapper = tmp_path / "python-limited"
    wrapper.write_text(f'#!/bin/sh\nulimit -v {kbytes}\nexec "{python}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def test_env_is_mxnet_1_9_1_with_numpy_below_1_24(mx_python):
    code = "import mxnet, numpy, sys; print(mxnet.__version__, numpy.__version__, sys.version_info[:2])"
    out = subprocess.run([str(mx_python), "-c", code], capture_output=True, text=True, check=True).stdout.split(" ", 2)
    assert out[0] == "1.9.1"
    assert tuple(int(x) for x in out[1].split(".")[:2]) < (1, 24)
    assert out[2].strip() == "(3, 11)"


def test_the_backend_computes_subnormals_as_zero_in_every_thread(mx_python):
    """ResNet-50's γ = 0 BatchNorms make subnormal floats, on which MXNet's GEMM is ~100x slower on an Intel Xeon:
    the backend flushes them (results and inputs) in the threads of a parallel product; the plain interpreter
    does not."""
    code = """
import sys, numpy as np, mxnet as mx
from dlbench.harness.spec import RunSpec
from dlbench.harness.backends.mxnet.backend import Backend
if sys.argv[1] == "backend":
    spec = RunSpec.of(framework="mxnet", model="resnet50", nodes=1, devices_per_node=1, batch_size=2,
                      precision="fp32", compiler=False, data="synthetic", warmup_steps=1, measured_steps=1, repeat=1,
                      config_id="t", log="/dev/null", device="cpu")
    Backend(spec, rank=0, world=1, local_rank=0, threads=2)
tiny = mx.nd.full((256, 256), 1e-39)  # subnormal in fp32
print(float((tiny * 3.0).abs().sum().asscalar()), float(mx.nd.dot(tiny, mx.nd.ones((256, 256))).abs().sum().asscalar()))
"""
    run = lambda mode: subprocess.run(  # noqa: E731
        [str(mx_python), "-c", code, mode], env=harness_env(), capture_output=True, text=True, check=True
    )
    assert all(float(v) > 0 for v in run("plain").stdout.split())
    assert [float(v) for v in run("backend").stdout.split()] == [0.0, 0.0]


def test_resnet50_v1_5_has_the_reference_parameter_count_and_strides(mx_python):
    code = (
        "from dlbench.harness.backends.mxnet.resnet import ResNet50, parameter_count\n"
        "m = ResNet50()\n"
        "m.initialize()\n"
        "down = [b for b in m.layers if b.downsample is not None]\n"
        "print(parameter_count(m), [b.conv1._kwargs['stride'][0] for b in down],"
        " [b.conv2._kwargs['stride'][0] for b in down],"
        " [float(b.bn3.gamma.data().abs().sum().asscalar()) for b in m.layers][:2])\n"
    )
    out = subprocess.run(
        [str(mx_python), "-c", code], env=harness_env(), capture_output=True, text=True, check=True
    ).stdout.split(maxsplit=1)
    assert int(out[0]) == 25_557_032
    # v1.5: the stride of a downsampling bottleneck sits on its 3x3 convolution; the last BN gamma is zero
    assert out[1].strip() == "[1, 1, 1, 1] [1, 2, 2, 2] [0.0, 0.0]"


@pytest.mark.parametrize("compiler", ["on"])  # off: the framework contract's AMP case
def test_amp_is_bfloat16_on_cpu_or_unsupported_with_a_reason(mx_python, tmp_path, compiler):
    log = tmp_path / "run.jsonl"
    _, entries = run_mx(mx_python, log, "--topology", "1x1", "--precision", "amp", "--compiler", compiler, *TINY)
    summary = entries["summary"][-1]
    if AVX512_CORE <= cpu_flags():
        assert summary["status"] == "ok", summary
        env = entries["environment"][0]
        assert env["amp_dtype"] == "bfloat16" and env["hybridize"] is (compiler == "on")
        assert summary["loss_final"] == summary["loss_final"]  # not NaN
    else:
        assert summary["status"] == "unsupported"
        assert "bfloat16" in summary["error"] and "AVX-512" in summary["error"]


def test_out_of_memory_in_two_rank_run_is_reported_and_ends(mx_python, tmp_path):
    """Both ranks fail with push-pulls pending: they must still exit (no wait for their peers), promptly."""
    log = tmp_path / "run.jsonl"
    python = limited_python(mx_python, tmp_path, 2_500_000)
    result, entries = run_mx(
        python,
        log,
        "--topology",
        "1x2",
        "--image-size",
        "224",
        "--batch-size",
        "800",
        "--warmup-steps",
        "1",
        "--measured-steps",
        "1",
    )
    # A rank hanging at exit is stopped by the supervisor GRACE_S after the other's failure, which says so (or
    # never, if both hang: run_mx's timeout). They left by themselves. (Not a wall-clock bound: under load the
    # framework's start alone can take longer than the grace period.)
    assert "[dlbench] stopping rank" not in result.stderr, result.stderr[-3000:]
    summary = entries["summary"][-1]
    assert summary["status"] == "oom", summary
    assert not (tmp_path / "run.jsonl.ranks").exists()
    pids = entries["environment"][0]["kvstore_processes"]
    assert len(pids) == 2 and not [pid for pid in pids if running(pid)]


def test_tensor_beyond_the_int32_build_is_unsupported(mx_python, tmp_path):
    """Batch 400000 at 224 px: the PyPI build (no USE_INT64_TENSOR_SIZE) refuses tensors of 2^31+ elements."""
    log = tmp_path / "run.jsonl"
    _, entries = run_mx(
        mx_python,
        log,
        "--topology",
        "1x1",
        "--image-size",
        "224",
        "--batch-size",
        "400000",
        "--warmup-steps",
        "1",
        "--measured-steps",
        "1",
    )
    summary = entries["summary"][-1]
    assert summary["status"] == "unsupported"
    assert "larger than 2^31 elements" in summary["error"] and "USE_INT64_TENSOR_SIZE" in summary["error"]


def test_two_nodes_get_a_ps_lite_server_each(mx_python, tmp_path):
    """The ranks of a 2x1 run as srun would start them, here on one host: each is its node's first rank and starts
    a server, rank 0 also the scheduler; both join the dist_sync kvstore and train (tests/test_multinode.py runs
    the same across two namespaced nodes under SLURM)."""
    log, port = tmp_path / "run.jsonl", free_port()
    run_two_nodes_by_hand(mx_python, "mxnet", "resnet50", log, tmp_path / "ranks", port, *TINY)
    entries = read_log(log)
    summary, env = entries["summary"][-1], entries["environment"][0]
    assert summary["status"] == "ok" and summary["world_size"] == 2
    in_effect = env["strategy_in_effect"]
    assert (in_effect["kvstore_type"], in_effect["num_workers"], in_effect["num_servers"]) == ("dist_sync", 2, 2)
    assert "2 workers, 2 servers" in in_effect["summary"]
    assert len(env["kvstore_processes"]) == 2  # rank 0: the scheduler and its node's server
    assert env["kvstore_addresses"] == {"scheduler": f"127.0.0.1:{port}", "node_host": "127.0.0.1", "servers": 2}


TORCH_REFERENCE = """
import sys
import numpy as np
import torch
from dlbench.harness.backends.pytorch.resnet import ResNet50

torch.manual_seed(0)
model = ResNet50()
with torch.no_grad():
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.normal_(0.0, 0.1)
            m.running_var.uniform_(0.5, 1.5)
            if not m.weight.any():  # the zero-initialised last BN of each residual branch
                m.weight.uniform_(0.5, 1.5)
state = {f"state/{k}": v.detach().numpy().copy() for k, v in model.state_dict().items()}
images = torch.randn(2, 3, 64, 64)
labels = torch.tensor([3, 917])
model.eval()
with torch.no_grad():
    eval_logits = model(images).numpy()
model.train()  # batch statistics; updates the running statistics
loss = torch.nn.functional.cross_entropy(model(images), labels)
after = {f"after/{k}": v.numpy().copy() for k, v in model.state_dict().items() if k.endswith("running_mean")}
np.savez(sys.argv[1], images=images.numpy(), labels=labels.numpy(), eval_logits=eval_logits,
         train_loss=loss.item(), **state, **after)
"""

MXNET_CHECK = """
import json
import sys
import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from dlbench.harness.backends.mxnet.resnet import ResNet50, load_torch_state, torch_named_parameters

ref = np.load(sys.argv[1])
net = ResNet50()
net.initialize()
load_torch_state(net, {k[len("state/"):]: ref[k] for k in ref.files if k.startswith("state/")})
images = mx.nd.array(ref["images"])
rel = lambda a, b: float(np.max(np.abs(a - b)) / np.max(np.abs(b)))
logits = net(images).asnumpy()  # inference mode: running statistics
net.hybridize(static_alloc=True, static_shape=True)
hybrid_logits = net(images).asnumpy()
with autograd.record():  # training mode: batch statistics
    loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(images), mx.nd.array(ref["labels"])).mean()
loss.backward()  # MXNet updates the running statistics in the backward pass,
mx.nd.waitall()  # without a read dependency on them: reading them alone does not wait for it
params = torch_named_parameters(net)
print(json.dumps({
    "logits_rel_error": rel(logits, ref["eval_logits"]),
    "hybrid_logits_rel_error": rel(hybrid_logits, ref["eval_logits"]),
    "logits_scale": float(np.max(np.abs(ref["eval_logits"]))),
    "argmax_equal": bool((logits.argmax(1) == ref["eval_logits"].argmax(1)).all()),
    "loss": float(loss.asscalar()), "torch_loss": float(ref["train_loss"]),
    "running_mean_rel_error": max(rel(p.data().asnumpy(), ref["after/" + k])
                                  for k, p in params.items() if k.endswith("running_mean")),
    "running_means": sum(k.endswith("running_mean") for k in params),
}))
"""


def test_same_weights_give_the_pytorch_model_s_outputs(mx_python, torch_python, tmp_path):
    """PyTorch weights (state_dict names and layouts) loaded into the Gluon model: same logits, same loss."""
    reference = tmp_path / "reference.npz"
    threads = dict(harness_env(), OMP_NUM_THREADS="1")
    subprocess.run(
        [str(torch_python), "-c", TORCH_REFERENCE, str(reference)],
        env=threads,
        check=True,
        capture_output=True,
        timeout=300,
    )
    out = subprocess.run(
        [str(mx_python), "-c", MXNET_CHECK, str(reference)],
        env=threads,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["logits_scale"] > 1.0  # randomised BN statistics and gammas: a non-trivial output
    assert result["logits_rel_error"] <= 1e-4, result
    assert result["hybrid_logits_rel_error"] <= 1e-4, result
    assert result["argmax_equal"]
    assert abs(result["loss"] - result["torch_loss"]) / abs(result["torch_loss"]) <= 1e-4, result
    # BN momentum 0.9 (MXNet) == 0.1 (PyTorch), on all 53 BatchNorms
    assert result["running_means"] == 53 and result["running_mean_rel_error"] <= 1e-4, result


def test_load_torch_state_rejects_a_mismatched_state(mx_python):
    code = (
        "import numpy as np\n"
        "from dlbench.harness.backends.mxnet.resnet import ResNet50, load_torch_state, torch_named_parameters\n"
        "net = ResNet50()\n"
        "net.initialize()\n"
        "state = {k: np.zeros(p.shape, 'float32') for k, p in torch_named_parameters(net).items()}\n"
        "state['bn1.num_batches_tracked'] = np.zeros((), 'int64')\n"
        "load_torch_state(net, state)\n"
        "errors = []\n"
        "missing = {k: v for k, v in state.items() if k != 'fc.bias'}\n"
        "for bad in (missing, {**state, 'fc.weight': np.zeros((10, 2048))}):\n"
        "    try:\n"
        "        load_torch_state(net, bad)\n"
        "    except (KeyError, ValueError) as exc:\n"
        "        errors.append(type(exc).__name__)\n"
        "print(len(state) - 1, errors)\n"
    )
    out = subprocess.run(
        [str(mx_python), "-c", code], env=harness_env(), capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "267 ['KeyError', 'ValueError']"
