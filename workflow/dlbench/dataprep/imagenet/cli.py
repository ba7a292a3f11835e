"""The command line: `convert` and `verify` (python -m dlbench.dataprep.imagenet)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .inputs import InputError
from .shards import convert
from .verify import verify


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dlbench.dataprep.imagenet",
        description="ImageNet -> TFRecord shards (build_imagenet_data.py schema).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("convert", help="convert a raw ImageNet tree")
    c.add_argument("--train-dir", type=Path, help="train/<wnid>/*.JPEG")
    c.add_argument("--validation-dir", type=Path, help="validation/<wnid>/*.JPEG, or flat with --validation-labels")
    c.add_argument(
        "--validation-labels",
        type=Path,
        help="labels of a flat validation directory: one wnid per line in file-name order, or '<file> <wnid>' lines",
    )
    c.add_argument("--synsets", type=Path, required=True, help="synset list, one wnid per line")
    c.add_argument("--metadata", type=Path, help="'<wnid>\\t<name>' lines (image/class/text)")
    c.add_argument("--bounding-boxes", type=Path, help="'<file>,<xmin>,<ymin>,<xmax>,<ymax>' lines, normalised")
    c.add_argument("--out", type=Path, required=True, help="output directory")
    c.add_argument("--train-shards", type=int, default=1024)
    c.add_argument("--validation-shards", type=int, default=128)
    c.add_argument("--seed", type=int, default=12345, help="shuffle seed (default: the reference's 12345)")
    c.add_argument("--workers", type=int, default=None, help="processes (default: usable cores)")
    c.add_argument("--recordio", action="store_true", help="also write MXNet RecordIO (recordio/<split>.rec/.idx)")
    c.add_argument(
        "--full-decode",
        action="store_true",
        help="decode every JPEG to find corrupt data (slow; by default only truncation is checked)",
    )
    v = sub.add_parser("verify", help="check every record, the DALI indexes and the manifest")
    v.add_argument("out", type=Path)
    v.add_argument("--workers", type=int, default=None)
    args = parser.parse_args(argv)

    if args.command == "verify":
        errors = verify(args.out, args.workers)
        for error in errors:
            print(f"error: {error}", file=sys.stderr)
        if errors:
            print(f"verify: {len(errors)} problem(s) in {args.out}", file=sys.stderr)
            return 1
        print(f"verify: {args.out} OK")
        return 0
    try:
        convert(
            args.out,
            args.synsets,
            args.train_dir,
            args.validation_dir,
            args.validation_labels,
            args.metadata,
            args.bounding_boxes,
            args.train_shards,
            args.validation_shards,
            args.seed,
            args.workers,
            args.recordio,
            args.full_decode,
        )
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # writing failed (disk full, permissions): shards already renamed stay
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
