"""How a study's problems read: one line per problem, naming the key and the value, why it is wrong and what is
allowed, from the JSON schema's own errors and descriptions (core environment). dlbench.plan.study raises
ConfigError with these lines; dlbench.plan.configfile places each at its file and line."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import jsonschema


class ConfigError(ValueError):
    """A problem in the user's configuration."""


def schema_problems(config: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """Every way the config breaks the schema, in plain words, ordered by key, each once (a mapping missing several
    required keys breaks one rule per key, and the words name them all)."""
    validator = StudyValidator(schema)
    descriptions = _descriptions(schema)
    problems: list[str] = []
    for error in sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path))):
        problems.extend(_describe(e, descriptions) for e in _innermost(error))
    return list(dict.fromkeys(problems))


def _pattern_to_the_end(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Any:
    """JSON Schema's `pattern`, with `$` at the end of the text: Python's `$` also matches before a final newline,
    so "1x1\n" or "v1\n" would pass (and name a directory with a newline in it)."""
    if isinstance(instance, str) and not re.search(re.sub(r"(?<!\\)\$", r"\\Z", pattern), instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


# The schema's validator, patterns anchored at the true end of the text.
StudyValidator = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"pattern": _pattern_to_the_end})


def _where(path: Any) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


# How the schema's types read in a message.
TYPE_WORDS = {
    "integer": "a whole number",
    "number": "a number",
    "string": "text",
    "boolean": "true or false",
    "array": "a list",
    "object": "a mapping (key: value)",
    "null": "empty",
}
BOUNDS = {
    "minimum": "at least",
    "maximum": "at most",
    "exclusiveMinimum": "greater than",
    "exclusiveMaximum": "less than",
}


def _type_word(value: Any) -> str:
    for name, kind in (
        ("boolean", bool),
        ("integer", int),
        ("number", float),
        ("string", str),
        ("array", list),
        ("object", dict),
        ("null", type(None)),
    ):
        if isinstance(value, kind):
            return TYPE_WORDS[name]
    return type(value).__name__


def _describe(error: jsonschema.ValidationError, descriptions: dict[str, str]) -> str:
    """One problem in plain words: the key, the value, why it is wrong and what is allowed."""
    where = _where(error.absolute_path)
    # The stubs allow an error without these (jsonschema's "unset"); the validator's errors carry them, and
    # the study schema has no true/false schemas, so `schema` is a mapping.
    schema: Mapping[str, Any] = error.schema if isinstance(error.schema, Mapping) else {}
    value: Any = error.instance
    rule = error.validator
    rule_value: Any = error.validator_value
    # A value's meaning, from its own schema or the key's: "<nodes>x<devices per node>, e.g. 1x8".
    meaning = schema.get("description") or descriptions.get(re.sub(r"\[\d+\]", "", where), "")
    if rule == "additionalProperties":
        allowed = ", ".join(schema.get("properties", {})) or "none"
        extra = sorted(set(value) - set(schema.get("properties", {})))
        return f"{where}: unknown key {', '.join(map(repr, extra))} (allowed: {allowed})"
    if rule == "enum":
        allowed = ", ".join(("on" if v else "off") if isinstance(v, bool) else str(v) for v in schema["enum"])
        return f"{where}: {value!r} is not allowed (allowed: {allowed})"
    if rule == "const":
        return f"{where}: {value!r} is not allowed: " + (meaning or f"it must be {schema['const']}")
    if rule == "propertyNames":
        allowed = schema["propertyNames"].get("enum")
        return (
            f"{where}: key {value!r} is not allowed (allowed: {', '.join(allowed)})"
            if allowed
            else f"{where}: key {value!r} is not a valid name" + (f": {meaning}" if meaning else "")
        )
    if rule == "pattern":
        return f"{where}: {value!r} is not valid: " + (meaning or f"it must match {schema['pattern']}")
    if rule == "not":
        return f"{where}: {value!r} is reserved" + (f"; {meaning}" if meaning else "")
    if rule == "type":
        wanted = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        return f"{where}: {value!r} is {_type_word(value)}; it must be {' or '.join(TYPE_WORDS[t] for t in wanted)}"
    if rule == "anyOf" and not error.absolute_path:
        return "(top level): a study needs `matrix` (configurations to run), `imports` (existing logs), or both"
    if rule == "required":
        missing = [k for k in rule_value if k not in value]
        return f"{where}: the key {', '.join(map(repr, missing))} is missing (required: {', '.join(rule_value)})"
    if rule in ("minItems", "minProperties", "minLength"):
        return f"{where}: must not be empty"
    if rule == "uniqueItems":
        repeated = next(v for i, v in enumerate(value) if v in value[:i])
        return f"{where}: {repeated!r} is listed twice; give each value once"
    if rule in BOUNDS:
        return (
            f"{where}: {value!r} is too {'small' if 'inimum' in rule else 'large'}; "
            f"it must be {BOUNDS[rule]} {rule_value}"
        )
    return f"{where}: {error.message}"


def _descriptions(schema: dict[str, Any]) -> dict[str, str]:
    """The description of every key path of the schema (a.b.c, list items under their list's path)."""
    out: dict[str, str] = {}

    def walk(node: dict[str, Any], path: str, depth: int) -> None:
        if depth > 6 or not isinstance(node, dict):
            return
        if "$ref" in node:
            node = {**schema["$defs"][node["$ref"].rsplit("/", 1)[1]], **{k: v for k, v in node.items() if k != "$ref"}}
        if node.get("description") and path not in out:
            out[path] = node["description"]
        for key, child in node.get("properties", {}).items():
            walk(child, f"{path}.{key}" if path else key, depth + 1)
        if isinstance(node.get("items"), dict):
            walk(node["items"], path, depth + 1)

    walk(schema, "", 0)
    return out


def _innermost(error: jsonschema.ValidationError) -> list[jsonschema.ValidationError]:
    """For a failed oneOf, the errors of the alternative the value was meant for (same type)."""
    if error.validator != "oneOf" or not error.context:
        return [error]

    # Alternatives rejected only for the value's type are not what the user meant (a list is not meant as
    # `const: pip`).
    def other_type(e: jsonschema.ValidationError) -> bool:
        if e.relative_path:
            return False
        if e.validator == "type":
            return True
        rule_value: Any = e.validator_value
        allowed = rule_value if e.validator == "enum" else [rule_value] if e.validator == "const" else []
        return bool(allowed) and not any(type(e.instance) is type(v) for v in allowed)

    meant = [e for e in error.context if not other_type(e)]
    by_branch: dict[str | int, list[jsonschema.ValidationError]] = {}
    for e in meant:
        by_branch.setdefault(e.relative_schema_path[0], []).append(e)
    if len(by_branch) != 1:
        return [jsonschema.exceptions.best_match(error.context)]
    return [deeper for e in next(iter(by_branch.values())) for deeper in _innermost(e)]
