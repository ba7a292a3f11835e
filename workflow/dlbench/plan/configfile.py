"""The study's YAML files read by dlbench itself, so that a mistake names its file, line and column.

Snakemake's own loader says only "Config file is not valid JSON or YAML" for a syntax error, names no file
for a top-level list, and silently keeps the last of two equal keys. workflow/rules/configfile.smk checks
config.yaml with this module before Snakemake loads it (dlbench.plan.session.check_default_configfile); common.smk
reads every study file again to place each configuration problem at its line (dlbench.plan.session.read_study).
Snakemake's command line reads a `--configfile` before any workflow code runs: dlbench.preflight checks those
files with this module first (a startup line in the core environment). `python -m dlbench.plan.configfile FILE`
(core environment, PYTHONPATH=workflow) checks one file.

    python -m dlbench.plan.configfile my.yaml     # "my.yaml, line 4, column 3: ..." or "my.yaml: ok"
"""

from __future__ import annotations

import re
import sys
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import yaml

from .study import ConfigError, Study, load_study


class StudyFileError(ValueError):
    """A study file that cannot be read as a study: the message names the file (and line, column)."""


MERGE_TAG = "tag:yaml.org,2002:merge"  # `<<: *anchor`: YAML's merge key


def _refuse_duplicate_keys(loader: yaml.SafeLoader, node: yaml.Node, done: set[int] | None = None) -> None:
    """A key given twice in one mapping is an error (YAML forbids it; PyYAML would keep the last). Checked on the
    mappings as written, in document order, before merge keys bring in keys the mapping may override (that is
    allowed); a node reached again through an alias is checked once."""
    done = set() if done is None else done
    if id(node) in done:
        return
    done.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _refuse_duplicate_keys(loader, item, done)
    if not isinstance(node, yaml.MappingNode):
        return
    seen: dict[Any, yaml.Node] = {}
    for key_node, value_node in node.value:
        key = "<<" if key_node.tag == MERGE_TAG else loader.construct_object(key_node)
        if isinstance(key, Hashable) and key in seen:  # an unhashable key: SafeLoader's own error later
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"the key {key!r} is given twice in this mapping (first on line {seen[key].start_mark.line + 1}); "
                "YAML keeps only the last one",
                key_node.start_mark,
            )
        seen[key] = key_node
        _refuse_duplicate_keys(loader, value_node, done)


def _shown(path: Path) -> Path:
    """A path as the user would write it: relative to the working directory when it is below it."""
    try:
        return path.relative_to(Path.cwd()) if path.is_absolute() else path
    except ValueError:
        return path


def _mark(path: Path, mark: yaml.Mark | None) -> str:
    return f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)


class StudyFile:
    """One YAML study file: its content and the line of every key."""

    def __init__(self, path: str | Path) -> None:
        self.path = _shown(Path(path))
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise StudyFileError(f"{self.path}: cannot be read ({error})") from None
        loader = yaml.SafeLoader(text)
        try:
            self.root = loader.get_single_node()
            if self.root is not None:
                _refuse_duplicate_keys(loader, self.root)
            # Constructing resolves merge keys in place: a mapping's nodes are then its keys in effect, merged first.
            self.data = loader.construct_document(self.root) if self.root is not None else None
        except yaml.MarkedYAMLError as error:
            problem = error.problem or "invalid YAML"
            context = (
                f" ({error.context} at line {error.context_mark.line + 1})"
                if (error.context and error.context_mark and error.context_mark != error.problem_mark)
                else ""
            )
            hint = ""
            mark = error.problem_mark
            line = text.splitlines()[mark.line] if mark and mark.line < len(text.splitlines()) else ""
            if "\t" in line[: len(line) - len(line.lstrip())] or "tab" in problem.lower() + context.lower():
                hint = "; indent with spaces, not tabs (YAML forbids tabs in indentation)"
            raise StudyFileError(f"{_mark(self.path, error.problem_mark)}: {problem}{context}{hint}") from None
        except yaml.YAMLError as error:
            raise StudyFileError(f"{self.path}: not valid YAML ({error})") from None
        finally:
            loader.dispose()
        if self.data is None:
            raise StudyFileError(f"{self.path}: the file is empty; a study needs at least `matrix:` or `imports:`")
        if not isinstance(self.data, dict):
            assert self.root is not None  # the data came from it
            kinds: dict[type, str] = {list: "a list", str: "a single text value"}
            kind = kinds.get(type(self.data), type(self.data).__name__)
            raise StudyFileError(
                f"{_mark(self.path, self.root.start_mark)}: the study is {kind}; it must be a "
                "mapping of keys at the top level (study:, matrix:, defaults:, ...)"
            )

    def line(self, where: tuple[str | int, ...]) -> int | None:
        """The 1-based line of the deepest part of `where` (a key path) found in this file: of the key in effect,
        the last of a mapping's keys of that name (the mapping's own after those a merge key brought in)."""
        node, line = self.root, None
        for part in where:
            child = None
            if isinstance(node, yaml.MappingNode) and isinstance(part, str):
                key, child = next(((k, v) for k, v in reversed(node.value) if k.value == part), (None, None))
                if key is not None:
                    line = key.start_mark.line + 1
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                child = node.value[part]
                line = child.start_mark.line + 1
            if child is None:
                break
            node = child
        return line


_PATH_PART = re.compile(r"\.?([A-Za-z_][\w-]*)|\[(\d+)\]")


def key_path(problem: str) -> tuple[str | int, ...]:
    """The key path a problem line starts with: 'matrix.topology[0]: ...' -> ('matrix', 'topology', 0)."""
    parts: list[str | int] = []
    position = 0
    while m := _PATH_PART.match(problem, position):
        parts.append(m.group(1) if m.group(1) is not None else int(m.group(2)))
        position = m.end()
    return tuple(parts) if problem[position : position + 1] in (":", " ", "") else ()


def locate(problem: str, files: list[StudyFile]) -> str:
    """A problem line prefixed with the file (and line) its key comes from: the last file that has it."""
    where = key_path(problem)
    for study_file in reversed(files):
        line = study_file.line(where) if where else None
        if line is not None:
            return f"{study_file.path}, line {line}: {problem}"
    return f"{files[-1].path}: {problem}" if files else problem


def load_study_files(
    config: dict[str, Any], paths: Sequence[str | Path], schema_path: Path, envs_dir: Path, base_dir: Path
) -> Study:
    """dlbench.plan.study.load_study with every problem and warning placed in the study files it comes from
    ("my.yaml, line 7: matrix.topology[0]: ..."). Raises StudyFileError for a file that is not a study,
    ConfigError for a configuration that is wrong."""
    files = [StudyFile(p) for p in paths if Path(p).exists()]
    try:
        study = load_study(config, schema_path, envs_dir, base_dir)
    except ConfigError as error:
        raise ConfigError("\n".join(locate(problem, files) for problem in str(error).splitlines())) from None
    study.warnings = [locate(warning, files) for warning in study.warnings]
    return study


def main(argv: list[str] | None = None) -> int:
    paths = sys.argv[1:] if argv is None else argv
    if not paths:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    code = 0
    for path in paths:
        try:
            StudyFile(path)
            print(f"{path}: ok")
        except StudyFileError as error:
            print(error, file=sys.stderr)
            code = 1
    return code


if __name__ == "__main__":
    sys.exit(main())
