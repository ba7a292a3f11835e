"""The manifest of a run (or of one group of shards, `--shard-group i/n`) and the merge of group manifests:
the parameters, vocabulary and inputs, every shard's files (bytes, sha256) and statistics, and their totals."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from dlbench import layout
from dlbench.dataprep.files import write_json

from .params import HDF5_DTYPES, INT_FEATURES_L, INT_FEATURES_P, MANIFEST_FORMAT, STAT_KEYS, InputError, Params
from .tokens import Vocab

RUN_KEYS = ("format", "parameters", "vocab", "inputs", "features")  # the same in every group of one run


def parse_group(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not m or not 0 <= int(m.group(1)) < int(m.group(2)):
        raise InputError(f"--shard-group {text!r}: expected i/n with 0 <= i < n, e.g. 0/4")
    return int(m.group(1)), int(m.group(2))


def summarise(shards: list[dict]) -> tuple[dict, dict]:
    totals = dict.fromkeys(STAT_KEYS, 0)
    for s in shards:
        for key in STAT_KEYS:
            totals[key] += s["stats"][key]

    def frac(a: str, b: str) -> float | None:
        return round(totals[a] / totals[b], 6) if totals[b] else None

    statistics = {
        "masked_fraction": frac("predictions", "tokens"),
        "mask_token_fraction": frac("mask_token", "predictions"),
        "kept_fraction": frac("kept", "predictions"),
        "random_token_fraction": frac("random_token", "predictions"),
        "nsp_random_fraction": frac("random_next", "instances"),
        # the coin alone: instances whose chunk had two sentences or more (one-sentence chunks are always random)
        "nsp_coin_random_fraction": round(
            (totals["random_next"] - totals["forced_random_next"])
            / (totals["instances"] - totals["forced_random_next"]),
            6,
        )
        if totals["instances"] > totals["forced_random_next"]
        else None,
        "short_target_fraction": frac("short_target_passes", "document_passes"),
        "short_target_instance_fraction": frac("short_target_instances", "instances"),
        "short_length_fraction": frac("short_length_instances", "instances"),  # < 90% of max_seq_length tokens
        "truncated_fraction": frac("truncated_instances", "instances"),
        "mean_tokens_per_instance": frac("tokens", "instances"),
    }
    return totals, statistics


def _with_shards(run: dict, shards: list[dict]) -> dict:
    """A manifest: the run's description, then the shards (by index), their totals and statistics."""
    totals, statistics = summarise(shards)
    return {
        **run,
        "shards": sorted(shards, key=lambda s: s["index"]),
        "instances": totals["instances"],
        "totals": totals,
        "statistics": statistics,
    }


def make_manifest(
    params: Params, vocab: Vocab, inputs: list[Path], shards: list[dict], group: tuple[int, int] | None
) -> dict:
    L, P = params.max_seq_length, params.max_predictions
    manifest = _with_shards(
        {
            "format": MANIFEST_FORMAT,
            "parameters": params.manifest(),
            "vocab": {"path": str(vocab.path), "size": vocab.size, "sha256": vocab.sha256},
            "inputs": [{"path": str(p), "bytes": p.stat().st_size} for p in inputs],
            "features": {
                "tfrecord": {
                    **{k: ["int64", L] for k in INT_FEATURES_L},
                    **{k: ["int64", P] for k in INT_FEATURES_P},
                    "masked_lm_weights": ["float", P],
                    "next_sentence_labels": ["int64", 1],
                },
                "hdf5": {
                    k: [d, [L] if k in INT_FEATURES_L else [P] if k in INT_FEATURES_P else []]
                    for k, d in HDF5_DTYPES.items()
                },
            },
        },
        shards,
    )
    if group is not None:
        manifest["shard_group"] = f"{group[0]}/{group[1]}"
    return manifest


def merge_manifest(args: argparse.Namespace) -> int:
    out: Path = args.out
    paths = sorted(out.glob(layout.GROUP_MANIFESTS))
    if not paths:
        raise InputError(f"{out}: no group manifests (manifest.group-IIIII-of-NNNNN.json) to merge")
    manifests = []
    for path in paths:
        try:
            manifests.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"{path}: unreadable manifest ({exc})") from exc
    n = int(manifests[0]["shard_group"].split("/")[1])
    groups = sorted(int(m["shard_group"].split("/")[0]) for m in manifests)
    if any(int(m["shard_group"].split("/")[1]) != n for m in manifests) or groups != list(range(n)):
        found = [m["shard_group"] for m in manifests]
        raise InputError(f"{out}: group manifests {found} do not form 0/{n}..{n - 1}/{n}")
    first = manifests[0]
    for path, m in zip(paths, manifests, strict=True):
        for key in RUN_KEYS:
            if m[key] != first[key]:
                raise InputError(f"{path}: {key} differ from {paths[0].name}'s; the groups are not one run")
    shards = [s for m in manifests for s in m["shards"]]
    indices = sorted(s["index"] for s in shards)
    if indices != list(range(first["parameters"]["shards"])):
        raise InputError(f"{out}: the groups hold shards {indices}, not 0..{first['parameters']['shards'] - 1}")
    merged = _with_shards({key: first[key] for key in RUN_KEYS}, shards)
    write_json(out / layout.MANIFEST, merged)
    print(
        json.dumps(
            {
                "manifest": str(out / layout.MANIFEST),
                "groups": n,
                "shards": len(shards),
                "instances": merged["instances"],
            }
        )
    )
    return 0
