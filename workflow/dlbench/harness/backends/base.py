"""What every framework backend shares (standard library only). The interface is described in pytorch/backend.py."""

from __future__ import annotations

from ..spec import RunSpec, Unsupported, is_bert


class BackendBase:
    models: tuple[str, ...] = ("resnet50",)  # what rank.run accepts before setup()
    data: tuple[str, ...] = ("synthetic",)

    def __init__(self, spec: RunSpec, rank: int, world: int, local_rank: int, threads: int) -> None:
        self.spec, self.rank, self.world, self.local_rank = spec, rank, world, local_rank
        self.threads = threads

    @property
    def unit(self) -> str:
        return "sequences/s" if is_bert(self.spec.model) else "images/s"

    def check_model_settings(self) -> None:
        """The BERT-only settings must not reach ResNet-50, where they would be ignored (called by setup())."""
        if is_bert(self.spec.model):
            return
        if self.spec.optimizer != "auto":
            raise Unsupported(f"optimizer {self.spec.optimizer!r} is a BERT setting; ResNet-50 trains with SGD and "
                              "momentum")
        if self.spec.grad_clip:
            raise Unsupported("grad_clip is a BERT setting; ResNet-50 trains without gradient clipping")
