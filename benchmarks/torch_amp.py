"""The plain PyTorch loops' precision and timing, as a user of PyTorch writes them (frameworks.py and
bert_idiomatic_pytorch.py). Imports torch only when used."""

from __future__ import annotations


class TorchAmp:
    """PyTorch's AMP recipe as a user writes it: autocast (fp16 on CUDA, bf16 on CPU, or bf16 everywhere: `bf16`,
    as LLMs are trained), and with fp16 a GradScaler (scale, backward, step, update); with fp32 a plain backward
    and step."""

    def __init__(self, device: str, precision: str, bf16: bool = False) -> None:
        import torch

        self.torch, self.device = torch, device
        half = torch.float16 if device == "cuda" and not bf16 else torch.bfloat16
        self.dtype = half if precision == "amp" else None
        self.scaler = torch.amp.GradScaler("cuda") if self.dtype is torch.float16 else None

    def describe(self) -> str:
        """The recipe in words, for a results file: `fp32`, `autocast bf16`, `autocast fp16 + GradScaler`."""
        if self.dtype is None:
            return "fp32"
        name = "fp16" if self.dtype is self.torch.float16 else "bf16"
        return f"autocast {name}" + (" + GradScaler" if self.scaler is not None else "")

    def autocast(self):
        return self.torch.autocast(self.device, dtype=self.dtype or self.torch.float32, enabled=self.dtype is not None)

    def step(self, loss, optimizer) -> None:
        if self.scaler is None:
            loss.backward()
            optimizer.step()
            return
        self.scaler.scale(loss).backward()
        self.scaler.step(optimizer)
        self.scaler.update()


def synchronize(device: str) -> None:
    """Wait for the GPU: a loop on CUDA is timed from an idle device to an idle device."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
