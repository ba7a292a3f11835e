"""How values read in a report: numbers, speedups, percentages, failure labels, Markdown escaping."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from ..collect.aggregate import parse_statuses
from ..harness.frameworks import EAGER, REGISTRY
from ..vocabulary import identity
from ..vocabulary.axes import INPUTS, input_words

DASH = "—"
STATUS_LABELS = {"oom": "OOM"}


def missing(value: Any) -> bool:
    if value is None or value is pd.NA:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def fmt_num(value: Any) -> str:
    """Throughput-style number: 1 decimal for large values, 3 significant digits for small."""
    if missing(value):
        return DASH
    v = float(value)
    if abs(v) >= 100:
        return f"{v:.1f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def fmt_minutes(value: Any) -> str:
    """Minutes to train or a score, as MLPerf publishes them: 3 decimals (37.009); a failed run's ∞ as ∞."""
    if missing(value):
        return DASH
    return "∞" if math.isinf(float(value)) else f"{float(value):.3f}"


def fmt_factor(value: Any) -> str:
    """A factor as its source wrote it (scaling.json's 1.0042 stays 1.0042, not 1.00)."""
    return DASH if missing(value) else f"{float(value):.10g}"


def fmt_speedup(value: Any) -> str:
    return DASH if missing(value) else f"{float(value):.2f}×"


def fmt_pct(value: Any, digits: int = 0) -> str:
    return DASH if missing(value) else f"{float(value) * 100:.{digits}f}%"


def fmt_mfu(value: Any) -> str:
    """MFU as a percentage; above 1 it is marked (⚑): more than the device's peak is not a finding (aggregate.py
    flags it)."""
    if missing(value):
        return DASH
    text = fmt_pct(value, 1)
    return f"{text} ⚑" if float(value) > 1.0 else text


def fmt_int(value: Any) -> str:
    return DASH if missing(value) else str(int(value))


def fmt_text(value: Any) -> str:
    return "" if missing(value) else str(value)


def failure_text(row: pd.Series) -> str:
    """Human label for the failed repeats of a configuration, e.g. 'OOM (3/3)'."""
    n_total = row.get("n_total")
    failures = [(s, c) for s, c in parse_statuses(row.get("statuses")) if s != "ok"]
    if missing(n_total):
        n_total = sum(c for _, c in parse_statuses(row.get("statuses"))) or None
    if not failures:
        n_failed: Any = row.get("n_failed")
        count = 0 if missing(n_failed) else int(n_failed)
        failures = [("failed", count or (int(n_total) if n_total else 1))]
    failures.sort(key=lambda sc: (-sc[1], sc[0]))
    parts = []
    for status, count in failures:
        if status == "unsupported":
            parts.append("unsupported")
        else:
            label = STATUS_LABELS.get(status, status)
            parts.append(f"{label} ({count}/{int(n_total)})" if n_total else label)
    return "; ".join(parts)


def interval_text(value: Any, low: Any, high: Any, fmt=None) -> str:
    """'1234.5 [1220.0–1250.1]': a value with its interval; just the value where there is none."""
    fmt = fmt or fmt_num
    text = fmt(value)
    if not missing(low) and not missing(high) and fmt(low) != fmt(high):
        text += f" [{fmt(low)}–{fmt(high)}]"
    return text


def throughput_text(row: pd.Series) -> str:
    """The median with its confidence interval (just the median where the repeats are too few for one)."""
    return interval_text(row.get("median"), row.get("ci_low"), row.get("ci_high"))


def ok_counts(row: pd.Series) -> tuple[int, int]:
    n_ok: Any = row.get("n_ok")
    n_total: Any = row.get("n_total")
    n_ok = 0 if missing(n_ok) else int(n_ok)
    if missing(n_total):
        n_failed: Any = row.get("n_failed")
        n_total = n_ok + (0 if missing(n_failed) else int(n_failed))
    return n_ok, int(n_total)


def config_outcome(row: pd.Series) -> str:
    """A configuration in one word: 'ok' (every repeat ok), 'partial' (some ok), 'unsupported' (no repeat ran and
    each says the framework cannot run it here: a fact of the software, not a failure) or 'failed'."""
    n_ok, n_total = ok_counts(row)
    if n_total and n_ok >= n_total:
        return "ok"
    if n_ok:
        return "partial"
    statuses = parse_statuses(row.get("statuses"))
    return "unsupported" if statuses and all(s == "unsupported" for s, _ in statuses) else "failed"


def md_escape(text: str, limit: int | None = None, table: bool = True) -> str:
    """Make a string safe for Markdown: one line, no raw HTML, no pipes inside table cells."""
    text = " ".join(text.split())
    if limit and len(text) > limit:
        text = text[: limit - 1] + "…"
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("|", "\\|") if table else text


def input_label(row: Mapping[str, Any] | pd.Series) -> str:
    """A configuration's model inputs in words ('64×64 px'; 'seq 128/20 masked, adam, no clip'), or a dash."""
    given = {name: row.get(name) for name in INPUTS if not missing(row.get(name))}
    return ", ".join(input_words(given)) or DASH


def compiler_label(value: Any, framework: Any = None) -> str:
    """What a configuration's step ran as: compiled with compiler on; with it off, its framework's step as the
    registry says (eager, but JAX's is compiled by XLA); a runner's or an import's: eager."""
    if missing(value):
        return DASH
    if bool(value):
        return "compiled"
    entry = REGISTRY.get(fmt_text(framework))
    return entry.compiler_off if entry else EAGER


def compiler_title(value: Any, frameworks: list[str]) -> str:
    """A throughput table's compiler in words: one label where its frameworks' steps ran alike, else each
    framework's ('jax compiled (XLA jit), pytorch eager'), so that no framework's step is called what it was not."""
    labels = {framework: compiler_label(value, framework) for framework in frameworks}
    if len(set(labels.values())) <= 1:
        return next(iter(labels.values()), compiler_label(value))
    return ", ".join(f"{framework} {label}" for framework, label in labels.items())


def unit_text(units: Any, model: Any, joiner: str = ", ") -> str:
    """The throughput unit(s) some rows state, else their model's own (rows that all failed state none)."""
    stated = sorted({fmt_text(unit) for unit in units} - {""})
    return joiner.join(stated) or identity.throughput_unit(fmt_text(model))


# A flag's code (stats.plausibility_flags, aggregate's MFU check) as a cell reads it.
FLAG_LABELS = {
    "few_repeats": "few repeats",
    "wide_spread": "wide spread",
    "superlinear": "superlinear",
    "not_steady": "not steady",
    "warmup_unstable": "warm-up unsettled",
    "contention": "contended",
    "throttled": "throttled",
    "mfu_above_peak": "MFU above peak",
    "amp_slower_than_fp32": "AMP slower than fp32",
}


def flag_codes(text: Any) -> list[str]:
    """'few_repeats: ...; wide_spread: ...' -> ['few_repeats', 'wide_spread']."""
    return [part.partition(":")[0].strip() for part in fmt_text(text).split("; ") if part.strip()]


def flag_label(code: str) -> str:
    return FLAG_LABELS.get(code, code.replace("_", " "))
