"""Loading given weights into a framework's model completely or not at all (standard library only).

The cross-framework tests load one set of weights into every framework; a name that is missing, extra or of
another shape must be an error, never a silent partial load that would make two models differ.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def check_names(expected: Iterable[str], given: Mapping[str, Any], what: str) -> None:
    """The given weights name exactly the model's tensors (KeyError listing the first differences)."""
    expected, names = set(expected), set(given)
    missing, extra = sorted(expected - names), sorted(names - expected)
    if missing or extra:
        raise KeyError(f"weights do not match {what}: missing {missing[:5]}, unexpected {extra[:5]}")


def check_shape(name: str, given: Sequence[int], expected: Sequence[int]) -> None:
    if tuple(given) != tuple(expected):
        raise ValueError(f"{name}: shape {tuple(given)} given, {tuple(expected)} expected")
