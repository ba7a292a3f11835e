"""Google's BERT pretraining model (harness/bert.py) in PyTorch, its canonical weight layout, LAMB and the
optimizers the benchmark trains it with.

Attention runs through F.scaled_dot_product_attention by default: it computes exactly Google's
softmax(Q K^T / sqrt(d) + (1 - mask) * -10000) with dropout on the probabilities, and picks a fused kernel
where the device has one. `attention="explicit"` spells the same out op by op (the reference the tests
compare it with).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ... import bert

MASK_ADDEND = -10000.0  # Google's additive attention mask at padding


@torch.no_grad()
def truncated_normal_(t: torch.Tensor, std: float) -> torch.Tensor:
    """normal(0, std) truncated at 2 std (tf.truncated_normal), by redrawing the values outside: exact, and
    much faster than nn.init.trunc_normal_'s erfinv on BERT-Base's 110 M weights."""
    flat = t.view(-1).normal_(0.0, std)
    redraw = (flat.abs() > 2 * std).nonzero().squeeze(1)  # about 4.6%, then 4.6% of those, ...
    while redraw.numel():
        values = flat.new_empty(redraw.numel()).normal_(0.0, std)
        flat[redraw] = values
        redraw = redraw[values.abs() > 2 * std]
    return t


class Embeddings(nn.Module):
    def __init__(self, cfg: bert.BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout)

    def forward(self, input_ids: torch.Tensor, segment_ids: torch.Tensor) -> torch.Tensor:
        positions = self.position_embeddings.weight[: input_ids.shape[1]]
        x = self.word_embeddings(input_ids) + positions + self.token_type_embeddings(segment_ids)
        return self.dropout(self.LayerNorm(x))


class Layer(nn.Module):
    """One post-LayerNorm transformer layer."""

    def __init__(self, cfg: bert.BertConfig, attention: str) -> None:
        super().__init__()
        h = cfg.hidden_size
        self.heads, self.head_size, self.attention = cfg.num_heads, cfg.head_size, attention
        self.query, self.key, self.value = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.attention_dropout = cfg.attention_dropout
        self.attention_output = nn.Linear(h, h)
        self.attention_norm = nn.LayerNorm(h, eps=cfg.layer_norm_eps)
        self.intermediate = nn.Linear(h, cfg.intermediate_size)
        self.output = nn.Linear(cfg.intermediate_size, h)
        self.output_norm = nn.LayerNorm(h, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout)

    def _split(self, x: torch.Tensor) -> torch.Tensor:  # [B, S, H] -> [B, heads, S, head_size]
        return x.unflatten(-1, (self.heads, self.head_size)).transpose(1, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        p = self.attention_dropout if self.training else 0.0
        if self.attention == "sdpa":
            # autocast leaves the additive mask in fp32; SDPA wants it in the dtype of the scores
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype), dropout_p=p)
        else:
            scores = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(self.head_size)) + mask
            context = F.dropout(scores.softmax(-1), p, self.training) @ v
        context = context.transpose(1, 2).flatten(2)
        x = self.attention_norm(x + self.dropout(self.attention_output(context)))
        y = self.output(F.gelu(self.intermediate(x), approximate="tanh"))
        return self.output_norm(x + self.dropout(y))


class BertForPreTraining(nn.Module):
    """BERT encoder + pooler + masked-LM head (decoder tied to the word embeddings) + next-sentence head.

    forward(batch features as tensors) -> (mlm_logits [B, P, V], nsp_logits [B, 2], loss)."""

    def __init__(self, cfg: bert.BertConfig, attention: str = "sdpa") -> None:
        super().__init__()
        if attention not in ("sdpa", "explicit"):
            raise ValueError(f"attention must be 'sdpa' or 'explicit', not {attention!r}")
        h = cfg.hidden_size
        self.cfg = cfg
        self.embeddings = Embeddings(cfg)
        self.layers = nn.ModuleList(Layer(cfg, attention) for _ in range(cfg.num_layers))
        self.pooler = nn.Linear(h, h)
        self.transform = nn.Linear(h, h)
        self.transform_norm = nn.LayerNorm(h, eps=cfg.layer_norm_eps)
        self.output_bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.seq_relationship = nn.Linear(h, 2)  # weight [2, H]: Google's output_weights as stored
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Google's initialisation: truncated normal(0.02) weights, zero biases, LayerNorm 1 and 0."""
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                truncated_normal_(m.weight, self.cfg.initializer_range)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        nn.init.zeros_(self.output_bias)

    def forward(
        self,
        input_ids: torch.Tensor,
        input_mask: torch.Tensor,
        segment_ids: torch.Tensor,
        masked_lm_positions: torch.Tensor,
        masked_lm_ids: torch.Tensor,
        masked_lm_weights: torch.Tensor,
        next_sentence_labels: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self.embeddings(input_ids, segment_ids)
        mask = (1.0 - input_mask[:, None, None, :].float()) * MASK_ADDEND  # [B, 1, 1, S], broadcast over heads
        for layer in self.layers:
            x = layer(x, mask)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        # masked-LM head only at the masked positions: [B, P, H]
        index = masked_lm_positions.long()[..., None].expand(-1, -1, x.shape[-1])
        y = F.gelu(self.transform(x.gather(1, index)), approximate="tanh")
        y = self.transform_norm(y)
        mlm_logits = F.linear(y, self.embeddings.word_embeddings.weight, self.output_bias)
        nsp_logits = self.seq_relationship(pooled)
        log_probs = mlm_logits.float().log_softmax(-1)
        nll = -log_probs.gather(-1, masked_lm_ids.long()[..., None]).squeeze(-1)
        weights = masked_lm_weights.float()
        mlm_loss = (weights * nll).sum() / (weights.sum() + 1e-5)
        nsp_loss = F.cross_entropy(nsp_logits.float(), next_sentence_labels.long())
        return mlm_logits, nsp_logits, mlm_loss + nsp_loss


# ------------------------------------------------------------------------- canonical weights
def canonical_parameters(model: BertForPreTraining) -> dict[str, tuple[nn.Parameter, bool]]:
    """Google checkpoint name -> (parameter, stored transposed), by bert.module_parameter_names: torch keeps Linear
    weights [out, in], so Google's kernels ([in, out]) are transposed and its next-sentence output_weights
    ([out, in]) are not."""
    named = dict(model.named_parameters())
    layout = bert.module_parameter_names(model.cfg)
    return {name: (named[dotted], stored == bert.IN_OUT) for name, (dotted, stored) in layout.items()}


def load_canonical(model: BertForPreTraining, weights: dict[str, np.ndarray]) -> None:
    """Copy canonical weights (bert.canonical_shapes names and shapes) into the model; every one is needed."""
    params = canonical_parameters(model)
    if missing := sorted(params.keys() - weights.keys()):
        raise KeyError(f"canonical weights missing: {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    with torch.no_grad():
        for name, (param, transposed) in params.items():
            value = torch.as_tensor(np.asarray(weights[name], np.float32))
            param.copy_(value.T if transposed else value)


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)  # the tied decoder counts once


def batch_tensors(batch: dict[str, np.ndarray], device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """A bert.synthetic_batch as tensors on the device: ids as int64 (what gather and cross_entropy take)."""
    return {
        name: torch.as_tensor(value).to(device, torch.float32 if value.dtype.kind == "f" else torch.int64)
        for name, value in batch.items()
    }


def pretraining_outputs(
    cfg: bert.BertConfig, weights: dict[str, np.ndarray], batch: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray, float]:
    """(mlm_logits, nsp_logits, loss) for canonical weights and a batch: fp32, dropout off (bert_logits CLI)."""
    model = BertForPreTraining(cfg).eval()
    load_canonical(model, weights)
    with torch.no_grad():
        mlm, nsp, loss = model(**batch_tensors(batch))
    return mlm.numpy(), nsp.numpy(), float(loss)


# ------------------------------------------------------------------------- optimizers
class Lamb(torch.optim.Optimizer):
    """LAMB (You et al. 2019; NVIDIA's BERT phase-1 recipe): Adam moments with bias correction, decoupled
    weight decay added to the update, then a per-tensor trust ratio ||w|| / ||update|| (1 where either
    norm is 0) scales the step: w -= lr * trust * update. torch has no LAMB of its own.

    All tensors of a group at once (torch._foreach_*, as torch's optimizers), in place in a persistent
    update buffer: fresh temporaries the size of the model would cost more in page faults than the
    arithmetic on a CPU."""

    def __init__(
        self,
        params: Iterable,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001 - torch's signature
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            beta1, beta2 = group["betas"]
            for p in params:
                state = self.state[p]
                if not state:
                    state |= {
                        "step": 0,
                        "exp_avg": torch.zeros_like(p),
                        "exp_avg_sq": torch.zeros_like(p),
                        "update": torch.zeros_like(p),
                    }
                state["step"] += 1
            grads = [p.grad for p in params]
            m, v, u = ([self.state[p][k] for p in params] for k in ("exp_avg", "exp_avg_sq", "update"))
            steps = [self.state[p]["step"] for p in params]
            torch._foreach_lerp_(m, grads, 1 - beta1)  # m = beta1 m + (1 - beta1) g
            torch._foreach_mul_(v, beta2)
            torch._foreach_addcmul_(v, grads, grads, value=1 - beta2)
            # u = m_hat / (sqrt(v_hat) + eps) + weight_decay * w
            torch._foreach_copy_(u, v)
            _bias_correct(u, steps, beta2)
            torch._foreach_sqrt_(u)
            torch._foreach_add_(u, group["eps"])
            torch._foreach_reciprocal_(u)
            torch._foreach_mul_(u, m)
            _bias_correct(u, steps, beta1)
            if group["weight_decay"]:
                torch._foreach_add_(u, params, alpha=group["weight_decay"])
            # trust = ||w|| / ||u||, or 1 where either norm is 0; on the device (no host sync)
            w_norm = torch.stack(torch._foreach_norm(params))
            u_norm = torch.stack(torch._foreach_norm(u))
            trust = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
            torch._foreach_mul_(u, list((trust * group["lr"]).unbind()))
            torch._foreach_sub_(params, u)
        return loss


def _bias_correct(tensors: list[torch.Tensor], steps: list[int], beta: float) -> None:
    """tensors[i] /= 1 - beta^steps[i], with one scalar per distinct step (all equal unless a tensor missed
    steps): torch._foreach_mul_ with a list of scalars makes a temporary per tensor."""
    for t in set(steps):
        torch._foreach_mul_([x for x, s in zip(tensors, steps, strict=True) if s == t], 1 / (1 - beta**t))


OPTIMIZER_NAMES = {
    "adam": "AdamW (torch.optim, fused; decoupled weight decay, bias-corrected: Google's AdamWeightDecay has no "
    "bias correction)",
    "lamb": "LAMB (dlbench's, bias-corrected, trust ratio on every tensor)",
}


def parameter_groups(model: BertForPreTraining, weight_decay: float) -> list[dict]:
    """Two groups: weight decay on the weights, none on LayerNorm and biases (bert.excluded_from_weight_decay
    on the canonical names)."""
    decay: list[torch.Tensor] = []
    no_decay: list[torch.Tensor] = []
    for name, (param, _) in canonical_parameters(model).items():
        (no_decay if bert.excluded_from_weight_decay(name) else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(
    model: BertForPreTraining, name: str, settings: bert.OptimizerSettings | None = None
) -> torch.optim.Optimizer:
    """Adam with decoupled weight decay ("adam") or LAMB ("lamb"), with bert.OPTIMIZERS[name] settings
    unless given; the learning rate is settings.learning_rate (a scheduler scales it per step)."""
    s = settings or bert.OPTIMIZERS[name]
    groups = parameter_groups(model, s.weight_decay)
    if name == "adam":
        # fused: one pass over each tensor; the foreach default makes model-sized temporaries
        return torch.optim.AdamW(groups, lr=s.learning_rate, betas=(s.beta1, s.beta2), eps=s.epsilon, fused=True)
    if name == "lamb":
        return Lamb(groups, lr=s.learning_rate, betas=(s.beta1, s.beta2), eps=s.epsilon)
    raise ValueError(f"no BERT optimizer {name!r} (adam, lamb)")


def make_scheduler(
    optimizer: torch.optim.Optimizer, settings: bert.OptimizerSettings
) -> torch.optim.lr_scheduler.LambdaLR:
    """bert.learning_rate per 0-based step: linear warm-up, then linear decay."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: bert.learning_rate(settings, step) / settings.learning_rate
    )
