"""The plain PyTorch loop a strong user writes to pretrain a Llama, for benchmarks/frameworks.py: Hugging Face's
LlamaForCausalLM (transformers, SDPA attention) with the harness's shapes (harness/llama.py's config of the model),
AdamW with the harness's settings (llama.ADAMW; fused where the device has the kernel, else foreach), gradients set
to None, bf16 autocast with amp (on every device, as LLMs are pretrained: torch_amp.TorchAmp(bf16=True)), TF32 on
CUDA, and one synthetic batch of token ids held in memory; the loss is the model's own (labels = input ids,
shifted inside)."""

from __future__ import annotations

import time
from collections.abc import Callable


def idiomatic(
    model: str,
    batch: int,
    seq_length: int,
    threads: int,
    device: str = "cpu",
    precision: str = "fp32",
    compiler: bool = False,
) -> tuple[Callable[[int], float], str]:
    """(train(steps) -> tokens/s of `steps` training steps (batch x seq_length tokens each), what it is)."""
    import torch
    import transformers
    from torch_amp import TorchAmp, synchronize
    from transformers import LlamaConfig, LlamaForCausalLM

    from dlbench.harness import llama

    torch.set_num_threads(threads)
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    cfg = llama.CONFIGS[model]
    net = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=cfg.vocab_size,
            hidden_size=cfg.hidden_size,
            intermediate_size=cfg.intermediate_size,
            num_hidden_layers=cfg.num_layers,
            num_attention_heads=cfg.num_heads,
            num_key_value_heads=cfg.num_kv_heads,
            rms_norm_eps=cfg.norm_eps,
            rope_theta=cfg.rope_theta,
            tie_word_embeddings=cfg.tie_embeddings,
            max_position_embeddings=max(seq_length, 2048),
            attn_implementation="sdpa",
            use_cache=False,
        )
    ).to(device)
    net.train()
    try:
        optimizer, kind = torch.optim.AdamW(net.parameters(), fused=True, **llama.ADAMW), "fused"
    except RuntimeError:  # no fused AdamW kernel for this device
        optimizer, kind = torch.optim.AdamW(net.parameters(), foreach=True, **llama.ADAMW), "foreach"
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, cfg.vocab_size, (batch, seq_length), generator=generator).to(device)
    forward = torch.compile(net) if compiler else net
    amp = TorchAmp(device, precision, bf16=True)

    def train(steps: int) -> float:
        synchronize(device)
        start = time.perf_counter()
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=True)
            with amp.autocast():
                loss = forward(input_ids=input_ids, labels=input_ids).loss
            amp.step(loss, optimizer)
        synchronize(device)
        return batch * seq_length * steps / (time.perf_counter() - start)

    tf32 = ", TF32" if device == "cuda" else ""
    return train, (
        f"transformers {transformers.__version__} LlamaForCausalLM (sdpa) with the harness's {model} shapes; "
        f"AdamW {kind}, zero_grad(set_to_none=True), {amp.describe()}{tf32}, "
        f"{'torch.compile' if compiler else 'eager'}"
    )
