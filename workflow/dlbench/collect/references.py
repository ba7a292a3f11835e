"""Published throughput figures and how our results compare with them (core environment).

workflow/references/published.yaml lists figures from DLPerf v1.0 (V100), NVIDIA DeepLearningExamples (A100),
Lambda and MLPerf (H100), each with its source and the configuration it matches. `match_references` pairs them
with a summary (aggregate.summarise, or an imported one with the same columns): our median / published, with our
median's interval carried over. A published figure that leaves a key out (e.g. DLE's batch size) matches any
value of it; `compared_on` says which keys were compared, so a reader sees how close the match is. Hardware is
never matched: the ratio is the answer to "how far are we from that machine", not a verdict.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from ..vocabulary.axes import MODEL_MATRIX, matrix_axes_of_kind
from ..vocabulary.identity import model_kind

REFERENCES_PATH = Path(__file__).resolve().parents[2] / "references" / "published.yaml"
# Keys of a figure that must agree with a summary row when the figure gives them.
MATCH_KEYS = (
    "framework",
    "model",
    "topology",
    "precision",
    "batch_size",
    "compiler",
    "data",
    *MODEL_MATRIX,  # a model kind's axes (dlbench.vocabulary.axes): BERT's sequence length, optimizer, clipping, ...
)
COLUMNS = [
    "config_id",
    "framework",
    "model",
    "topology",
    "precision",
    "batch_size",
    "unit",
    "median",
    "ci_low",
    "ci_high",
    "label",
    "device",
    "published",
    "published_low",
    "published_high",
    "ratio",
    "ratio_low",
    "ratio_high",
    "speedup",
    "published_speedup",
    "compared_on",
    "not_published",
    "source",
    "url",
    "note",
]


def load_references(path: str | Path = REFERENCES_PATH) -> pd.DataFrame:
    """One row per published figure, with its source's title, URL and hardware; a published range
    [low, high] gives published_low/high and `published` = its midpoint (a point: all three equal)."""
    data = yaml.safe_load(Path(path).read_text())
    sources: dict[str, dict[str, Any]] = data["sources"]
    rows = []
    for figure in data["figures"]:
        source = sources[figure["source"]]
        value = figure["throughput"]
        low, high = (value, value) if not isinstance(value, list) else (min(value), max(value))
        rows.append(
            {
                **{k: figure.get(k) for k in MATCH_KEYS},
                "label": figure["label"],
                "device": figure.get("device") or source.get("hardware"),
                "unit": figure["unit"],
                "published": (low + high) / 2,
                "published_low": low,
                "published_high": high,
                "published_speedup": figure.get("speedup"),
                "source": source["title"],
                "url": source["url"] + (f" ({source['path']})" if source.get("path") else ""),
                "note": "; ".join(n for n in (figure.get("note"), source.get("note")) if n),
            }
        )
    return pd.DataFrame(rows)


def _same(ours: Any, published: Any) -> bool:
    """Equal as the CSV round trip leaves them (True vs 'True', 128 vs 128.0)."""
    if isinstance(published, bool):
        return str(ours).strip().lower() in (("true", "1", "1.0") if published else ("false", "0", "0.0"))
    if isinstance(published, int | float):
        try:
            return float(ours) == float(published)
        except (TypeError, ValueError):
            return False
    return str(ours) == str(published)


def _given(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and pd.isna(value))


def _keys_of(model: Any) -> tuple[str, ...]:
    """The match keys that apply to a figure's model: the shared ones and its kind's (a ResNet figure does not
    lack BERT's sequence length)."""
    if not _given(model):
        return MATCH_KEYS
    kind_axes = matrix_axes_of_kind(model_kind(str(model)))
    return tuple(k for k in MATCH_KEYS if k not in MODEL_MATRIX or k in kind_axes)


def study_references(config: dict[str, Any], base_dir: str | Path = ".") -> pd.DataFrame:
    """The published figures a study is set against (its expectations' of_published among them): the files its
    `references` names (from `base_dir`, the working directory), else the ones dlbench ships."""
    files = config.get("references") or []
    if not files:
        return load_references()
    return pd.concat([load_references(Path(base_dir, f)) for f in files], ignore_index=True)


def match_references(summary: pd.DataFrame, references: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every (configuration, published figure) pair that agrees on each key the figure gives, with
    ratio = our median / published (ratio_low/high: our median's interval over the published value, or over the
    ends of a published range). Figures of frameworks dlbench does not run (framework null) never match."""
    references = load_references() if references is None else references
    rows = []
    for figure in references.to_dict(orient="records"):
        if not _given(figure.get("framework")):
            continue
        keys = [k for k in MATCH_KEYS if _given(figure.get(k))]
        hits = summary
        for key in keys:
            if key not in hits.columns:
                hits = hits.iloc[0:0]
                break
            hits = hits[[_same(v, figure[key]) for v in hits[key]]]
        for ours in hits.to_dict(orient="records"):
            median = ours.get("median")
            if not _given(median):
                continue
            rows.append(
                {
                    **{
                        k: ours.get(k)
                        for k in (
                            "config_id",
                            "framework",
                            "model",
                            "topology",
                            "precision",
                            "batch_size",
                            "unit",
                            "median",
                            "ci_low",
                            "ci_high",
                            "speedup",
                        )
                    },
                    **{
                        k: figure[k]
                        for k in (
                            "label",
                            "device",
                            "published",
                            "published_low",
                            "published_high",
                            "published_speedup",
                            "source",
                            "url",
                            "note",
                        )
                    },
                    "ratio": median / figure["published"],
                    "ratio_low": ours["ci_low"] / figure["published_high"] if _given(ours.get("ci_low")) else None,
                    "ratio_high": ours["ci_high"] / figure["published_low"] if _given(ours.get("ci_high")) else None,
                    "compared_on": ", ".join(keys),
                    "not_published": ", ".join(k for k in _keys_of(figure["model"]) if k not in keys),
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS)
