"""The BERTs are one model: the same canonical weights and batch give the same masked-LM and next-sentence
logits and loss in every framework, PyTorch's the reference (fp32, dropout off; relative error <= 1e-4).

Each framework's environment runs `python -m dlbench.harness.bert_logits` on files written here with
numpy (weights in Google's checkpoint layout, a batch with padding), so no framework's output feeds another.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import env_python, harness_env
from dlbench.harness import bert
from dlbench.harness.frameworks import NAMES as FRAMEWORKS

TOLERANCE = 1e-4


def logits(framework: str, model: str, weights: Path, batch: Path, out: Path) -> dict[str, np.ndarray]:
    result = subprocess.run(
        [
            str(env_python(framework)),
            "-m",
            "dlbench.harness.bert_logits",
            "--framework",
            framework,
            "--model",
            model,
            "--weights",
            str(weights),
            "--batch",
            str(batch),
            "--out",
            str(out),
        ],
        env=harness_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, f"{framework}: {result.stderr[-4000:]}"
    with np.load(out) as f:
        return dict(f)


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-12))


def check_equivalence(tmp_path: Path, model: str, batch_size: int, seq_length: int) -> None:
    cfg = bert.CONFIGS[model]
    weights, batch = tmp_path / "weights.npz", tmp_path / "batch.npz"
    np.savez(weights, **bert.random_weights(cfg, seed=1))
    np.savez(
        batch, **bert.synthetic_batch(cfg, batch_size, seq_length, max(2, seq_length * 15 // 100), seed=2, padding=True)
    )
    outputs = {fw: logits(fw, model, weights, batch, tmp_path / f"{fw}.npz") for fw in FRAMEWORKS}
    reference = outputs["pytorch"]
    predictions = max(2, seq_length * 15 // 100)
    assert reference["mlm_logits"].shape == (batch_size, predictions, cfg.vocab_size)
    assert reference["nsp_logits"].shape == (batch_size, 2)
    assert np.isfinite(reference["loss"]) and reference["loss"] > 0
    for fw in FRAMEWORKS:
        for key in ("mlm_logits", "nsp_logits", "loss"):
            error = relative_error(outputs[fw][key], reference[key])
            assert error <= TOLERANCE, f"{fw} {key}: relative error {error:.2e} against PyTorch"


@pytest.mark.slow
def test_the_frameworks_agree_on_a_reduced_bert(tmp_path):
    check_equivalence(tmp_path, "bert_tiny", batch_size=3, seq_length=64)


@pytest.mark.slow
def test_the_frameworks_agree_on_bert_base(tmp_path):
    check_equivalence(tmp_path, "bert_base", batch_size=2, seq_length=128)
