"""What every framework backend shares (standard library only). The interface is described in pytorch.py."""

from __future__ import annotations

from ..spec import RunSpec, is_bert


class BackendBase:
    models: tuple[str, ...] = ("resnet50",)  # what rank.run accepts before setup()
    data: tuple[str, ...] = ("synthetic",)

    def __init__(self, spec: RunSpec, rank: int, world: int, local_rank: int, threads: int) -> None:
        self.spec, self.rank, self.world, self.local_rank = spec, rank, world, local_rank
        self.threads = threads

    @property
    def unit(self) -> str:
        return "sequences/s" if is_bert(self.spec.model) else "images/s"
