"""Masked-LM and next-sentence logits of one framework's BERT for given canonical weights and batch.

    python -m dlbench.harness.bert_logits --framework pytorch --model bert_tiny \
        --weights weights.npz --batch batch.npz --out logits.npz

Used by the cross-framework equivalence test (and by hand): each framework's environment runs this on the
same weights and batch (fp32, dropout off); the outputs must agree. Writes mlm_logits [batch, predictions,
vocab], nsp_logits [batch, 2] and loss (scalar) to --out.
"""

from __future__ import annotations

import argparse
import importlib

import numpy as np

from . import bert
from .frameworks import REGISTRY
from .spec import FRAMEWORKS


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m dlbench.harness.bert_logits", description=__doc__.split("\n")[0])
    p.add_argument("--framework", choices=FRAMEWORKS, required=True)
    p.add_argument("--model", choices=sorted(bert.CONFIGS), default="bert_tiny")
    p.add_argument("--weights", required=True, help=".npz of canonical weights (names as in bert.canonical_shapes)")
    p.add_argument("--batch", required=True, help=".npz with the features of bert.synthetic_batch")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    module = importlib.import_module(REGISTRY[args.framework].module("bert"))
    with np.load(args.weights) as w, np.load(args.batch) as b:
        weights, batch = dict(w), dict(b)
    mlm, nsp, loss = module.pretraining_outputs(bert.CONFIGS[args.model], weights, batch)
    np.savez(
        args.out, mlm_logits=np.asarray(mlm, np.float32), nsp_logits=np.asarray(nsp, np.float32), loss=np.float32(loss)
    )


if __name__ == "__main__":
    main()
