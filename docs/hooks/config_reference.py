"""The configuration reference page, generated from workflow/schemas/config.schema.yaml (with the matrix's model
axes declared in workflow/dlbench/vocabulary/axes.py) at every docs build.

The schema is the one source of truth for what a study may say: this hook renders it (every key with its type,
allowed values, default and description; shared definitions once, linked) into `configuration.md`, so the page
cannot drift from what the workflow validates. MkDocs calls `on_files` (see `hooks:` in mkdocs.yml);
`python docs/hooks/config_reference.py` prints the page.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
sys.path.insert(0, str(REPO / "workflow"))
from dlbench.harness.frameworks import with_framework_words  # noqa: E402  (the frameworks are declared there)
from dlbench.vocabulary.axes import with_model_axes  # noqa: E402  (the matrix's model axes are declared there)


def load_schema() -> dict[str, Any]:
    """The schema the workflow validates against: the file, the model axes of dlbench.vocabulary.axes and the
    frameworks of dlbench.harness.frameworks."""
    return with_framework_words(with_model_axes(yaml.safe_load(SCHEMA.read_text())))


PAGE = "configuration.md"


def _spelled(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return "[" + ", ".join(_spelled(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_spelled(v)}" for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) and not value else str(value)


def _value(value: Any) -> str:
    """A schema value as a study would spell it in YAML (on/off for booleans, lists in brackets)."""
    return f"`{_spelled(value)}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def kind(node: dict) -> str:
    """What a value must be: its type, enum, const, reference or alternatives, in words."""
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name})"
    if "enum" in node:
        return "one of " + ", ".join(_value(v) for v in node["enum"])
    if "const" in node:
        return _value(node["const"])
    for combinator in ("oneOf", "anyOf"):
        if combinator in node:
            return " or ".join(kind(option) for option in node[combinator])
    type_ = node.get("type", "any")
    if type_ == "array":
        return f"list of {kind(node.get('items', {}))}"
    if type_ == "object" and "additionalProperties" in node and isinstance(node["additionalProperties"], dict):
        keys = kind(node["propertyNames"]) if "propertyNames" in node else "key"
        return f"mapping of {keys} to {kind(node['additionalProperties'])}"
    limits = []
    for key, word in (
        ("minimum", "≥"),
        ("exclusiveMinimum", ">"),
        ("maximum", "≤"),
        ("exclusiveMaximum", "<"),
    ):
        if key in node:
            limits.append(f"{word} {node[key]}")
    if "pattern" in node:
        limits.append(f"matching `{node['pattern']}`")
    base = type_ if isinstance(type_, str) else " or ".join(type_)
    return base + (" " + ", ".join(limits) if limits else "")


def rows(properties: dict, prefix: str, required: set[str]) -> list[str]:
    """One table row per key, nested objects' keys below their parent as `parent.key`."""
    out = []
    for name, node in properties.items():
        key = f"{prefix}{name}"
        default = _value(node["default"]) if "default" in node else ("required" if name in required else "")
        out.append(f"| `{key}` | {_cell(kind(node))} | {default} | {_cell(node.get('description', ''))} |")
        if node.get("type") == "object" and "properties" in node:
            out += rows(node["properties"], key + ".", set(node.get("required", [])))
    return out


TABLE_HEAD = ["| key | value | default | meaning |", "| --- | --- | --- | --- |"]


def render(schema: dict) -> str:
    lines = [
        "# Configuration reference",
        "",
        f"*Generated from `workflow/schemas/config.schema.yaml` at every docs build: {schema['description']} "
        "Every study is validated against this schema before any job runs; an error names the file, the line "
        "and the key.*",
        "",
        "## Study keys",
        "",
        *TABLE_HEAD,
        *rows(schema["properties"], "", set(schema.get("required", []))),
        "",
        "## Shared definitions",
        "",
        "Values that several keys take; a key's *value* column links here.",
    ]
    for name, node in schema["$defs"].items():
        lines += ["", f"### {name}", ""]
        if node.get("description"):
            lines += [node["description"], ""]
        if node.get("type") == "object" and "properties" in node:
            lines += [*TABLE_HEAD, *rows(node["properties"], "", set(node.get("required", [])))]
        else:
            lines.append(f"Value: {kind(node)}.")
    return "\n".join(lines) + "\n"


def on_files(files, config):  # noqa: ANN001, ANN201 (MkDocs' hook signature)
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=render(load_schema())))
    return files


if __name__ == "__main__":
    print(render(load_schema()), end="")
