"""Versioned publishing: every report is a new directory under results/reports/ that is never overwritten;
`latest` (symlink) and `latest.json` name the newest. Both change only once a new version is complete, so a
report that fails before that leaves the published state as it was; publish_changed does not publish unchanged
results again, and mends a latest.json left behind `latest`. Nothing is written while the publisher's own paths
hold something it could not replace (check_own_paths): every state it leaves, the next report can go on from."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from ..collect.compare import load_records
from ..harness import nospace
from ..vocabulary.identity import LATEST_INFO, LATEST_LINK, RESERVED_VERSIONS
from .render import render_report

VERSION_RE = re.compile(r"^[A-Za-z0-9._-]+\Z")  # \Z: the true end (a "$" lets "v1\n" through)
AUTO_VERSION_RE = re.compile(r"^v(\d+)\Z")


class CannotPublish(Exception):
    """A report that cannot be published as things stand, found before anything is written; the message names
    the path and what to do."""


class ReportVersionExists(CannotPublish):
    """Raised when a report version directory already exists (it is never overwritten)."""


def validate_version(version: str) -> None:
    if not version or not VERSION_RE.match(version) or version in RESERVED_VERSIONS or version.startswith("."):
        raise ValueError(
            f"invalid report.version {version!r}: use letters, digits, '.', '_' and '-' "
            f"(not starting with '.'), not {' or '.join(RESERVED_VERSIONS)} (the publisher's own), or 'auto'"
        )


def check_own_paths(reports_dir: Path) -> None:
    """The publisher replaces `latest` (a link) and latest.json (a file) once a version is in place: anything else
    there (a directory an older dlbench published under such a name) would fail that report and every later one
    after their versions were published, so it is refused first (CannotPublish), naming what to move."""
    for name, kind in ((LATEST_LINK, "a link"), (LATEST_INFO, "a file")):
        path = reports_dir / name
        wrong = path.is_dir() if name == LATEST_INFO else path.exists()  # `latest`: any file or directory
        if wrong and not path.is_symlink():
            raise CannotPublish(
                f"{path} is a {'directory' if path.is_dir() else 'file'}, not {kind}: the publisher writes its own "
                f"{name} there, naming the newest report; move it away (mv {path} {reports_dir}/<another name>) and "
                "run the same command again"
            )


def next_auto_version(reports_dir: Path) -> str:
    numbers = [int(m.group(1)) for p in reports_dir.iterdir() if (m := AUTO_VERSION_RE.match(p.name))]
    return f"v{max(numbers, default=0) + 1}"


def exists_error(target: Path) -> ReportVersionExists:
    return ReportVersionExists(
        f"report version directory {target} already exists and is never overwritten; "
        "pick another report.version (or 'auto') or remove that directory"
    )


def atomic_write_text(path: Path, text: str) -> None:
    """`path` holds the old text or the new one, never a part; a failure (a full disk) leaves no temporary file."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _environment_without_time(path: Path) -> object:
    """environment.json as data, without the time it was written (aggregate rewrites it for the same runs)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(data, dict):
        data.pop("generated_at", None)
    return data


def same_results(version_dir: Path, records_csv: Path, summary_csv: Path, environment_json: Path) -> bool:
    """Whether a published version holds exactly these results (it keeps byte copies of its inputs)."""
    version_dir = Path(version_dir)
    try:
        if any(
            (version_dir / name).read_bytes() != Path(source).read_bytes()
            for name, source in (("records.csv", records_csv), ("summary.csv", summary_csv))
        ):
            return False
    except OSError:
        return False
    return _environment_without_time(version_dir / "environment.json") == _environment_without_time(environment_json)


def latest_version(reports_dir: Path) -> str | None:
    link = Path(reports_dir) / LATEST_LINK
    return os.readlink(link) if link.is_symlink() else None


def versions(reports_dir: Path) -> set[str]:
    """The published versions' names: the directories but for the publisher's own and its staging (hidden)."""
    if not Path(reports_dir).is_dir():
        return set()
    return {
        p.name
        for p in Path(reports_dir).iterdir()
        if p.is_dir() and not p.is_symlink() and not p.name.startswith(".") and p.name not in RESERVED_VERSIONS
    }


def what_is_published(reports_dir: Path, before: set[str], copy_dir: Path) -> str:
    """After a report failed: what it published nonetheless (`before`: the versions before it ran), in words that
    end its message; the copy (copy_dir) it has cleared (clear_copy)."""
    copy = f"{copy_dir} (the copy Snakemake's report carries) is empty"
    new = sorted(versions(reports_dir) - before)
    if not new:
        return f"the published versions in {reports_dir} are unchanged; {copy}"
    latest, info = latest_version(reports_dir), latest_info_version(reports_dir)
    said = [
        f"report {version} is published ({reports_dir}/{version})"
        + (", `latest` points at it" if version == latest else f", `latest` still points at {latest or 'nothing'}")
        for version in new
    ]
    if info != latest:
        said.append(f"{reports_dir}/{LATEST_INFO} still names {info or 'no version'} (the next report mends it)")
    return "; ".join([*said, copy])


def latest_info_version(reports_dir: Path) -> str | None:
    """The version latest.json names (None: none, or unreadable)."""
    try:
        return json.loads((Path(reports_dir) / LATEST_INFO).read_text(encoding="utf-8"))["version"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_latest_info(reports_dir: Path, version: str) -> None:
    target = reports_dir / version
    info = {
        "version": version,
        "path": str(target),
        "index": str(target / "index.html"),
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    atomic_write_text(reports_dir / LATEST_INFO, json.dumps(info, indent=2) + "\n")


def mend_latest_info(reports_dir: Path) -> str | None:
    """latest.json names the version the `latest` link points at, whatever removed or changed it since: made again
    from the link (a link to no version is left as it is: nothing to name). What it did, or None."""
    reports_dir = Path(reports_dir)
    newest = latest_version(reports_dir)
    if newest is None or newest not in versions(reports_dir) or latest_info_version(reports_dir) == newest:
        return None
    write_latest_info(reports_dir, newest)
    return (
        f"{reports_dir / LATEST_INFO} named no version or another one: it names {newest} again, as {LATEST_LINK} does"
    )


def publish_changed(
    records_csv: Path,
    summary_csv: Path,
    environment_json: Path,
    reports_dir: Path,
    version: str,
    compare_to: str | None = None,
) -> tuple[Path, bool]:
    """Publish these results unless they are published already: (the version's directory, whether it is new).

    With "auto" the newest version is reused when it holds the same results (a report rule rerun for any
    other reason, e.g. after a failure, publishes nothing new); a fixed version that exists is reused when it
    holds the same results and refused (ReportVersionExists) otherwise."""
    reports_dir = Path(reports_dir)
    check_own_paths(reports_dir)
    candidate = latest_version(reports_dir) if version == "auto" else version
    if candidate and same_results(reports_dir / candidate, records_csv, summary_csv, environment_json):
        if candidate == latest_version(reports_dir) and latest_info_version(reports_dir) != candidate:
            write_latest_info(reports_dir, candidate)  # `latest` moved, its latest.json not written (a full disk)
        return reports_dir / candidate, False
    return publish_report(records_csv, summary_csv, environment_json, reports_dir, version, compare_to), True


def comparison_baseline(reports_dir: Path, compare_to: str | None) -> tuple[pd.DataFrame | None, str]:
    """The records report.compare_to names, and its label: `previous` (the newest published version, none yet:
    no comparison), a version under reports_dir, or another study's report directory / records.csv."""
    if not compare_to:
        return None, ""
    if compare_to == "previous":
        previous = latest_version(reports_dir)
        if previous is None:
            return None, ""
        return load_records(Path(reports_dir) / previous), previous
    path = Path(reports_dir) / compare_to if (Path(reports_dir) / compare_to).exists() else Path(compare_to)
    return load_records(path), compare_to


def earlier_results(reports_dir: Path) -> list[tuple[str, pd.DataFrame]]:
    """The published versions' records, oldest first (by the time their results were aggregated, then name): the
    history a new version is set against. A version whose records cannot be read is left out of it."""
    found = []
    for name in versions(reports_dir):
        version_dir = Path(reports_dir) / name
        try:
            when = json.loads((version_dir / "environment.json").read_text(encoding="utf-8"))["generated_at"]
            records = load_records(version_dir)
        except (OSError, ValueError, KeyError, TypeError, pd.errors.ParserError):
            continue
        found.append((str(when), name, records))
    return [(name, records) for _, name, records in sorted(found, key=lambda f: (f[0], f[1]))]


def publish_report(
    records_csv: Path,
    summary_csv: Path,
    environment_json: Path,
    reports_dir: Path,
    version: str,
    compare_to: str | None = None,
) -> Path:
    """Render a new report version under reports_dir and return its directory.

    version == "auto" picks v<N+1> for the highest existing vN. Existing versions are never
    overwritten (ReportVersionExists). Rendering happens in reports_dir/.tmp-* and is renamed
    into place; then reports_dir/latest (relative symlink) and latest.json are updated."""
    reports_dir = Path(reports_dir)
    reports_dir.mkdir(parents=True, exist_ok=True)
    if version == "auto":
        version = next_auto_version(reports_dir)
    else:
        validate_version(version)
    target = reports_dir / version
    if target.exists() or target.is_symlink():
        raise exists_error(target)
    check_own_paths(reports_dir)  # found before anything is written

    tmp_dir = Path(tempfile.mkdtemp(prefix=".tmp-", dir=reports_dir))
    try:
        os.chmod(tmp_dir, 0o755)  # mkdtemp makes it 0700; reports are meant to be shared
        baseline, label = comparison_baseline(reports_dir, compare_to)
        earlier = earlier_results(reports_dir)
        render_report(
            records_csv,
            summary_csv,
            environment_json,
            tmp_dir,
            version=version,
            baseline=baseline,
            baseline_label=label,
            earlier=earlier,
        )
        if target.exists() or target.is_symlink():  # appeared while rendering
            raise exists_error(target)
        try:
            os.rename(tmp_dir, target)  # fails on a non-empty existing directory
        except OSError as exc:
            if target.exists():
                raise exists_error(target) from exc
            raise
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise

    tmp_link = reports_dir / f".{LATEST_LINK}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    os.symlink(version, tmp_link)
    os.replace(tmp_link, reports_dir / LATEST_LINK)
    write_latest_info(reports_dir, version)
    return target


def copy_version(
    version_dir: Path, manifest_path: Path, manifest: dict[str, object], texts: dict[str, str] | None = None
) -> None:
    """Make the manifest's directory (results/report/, the report rule's outputs) a copy of one published version
    and the manifest, all at once: every file is written beside the copy first, then renamed into place (a rename
    needs no space), the manifest last; `texts` gives some files' content in the copy instead of the version's.
    A failure (a full disk) leaves no half-written copy: see clear_copy."""
    copy_dir, manifest_name = manifest_path.parent, manifest_path.name
    copy_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=copy_dir))
    try:
        names = [item.name for item in sorted(version_dir.iterdir()) if item.is_file()]
        for name in names:
            with nospace.writing(copy_dir / name):  # the file of the copy, not the staging file or the source
                if texts and name in texts:
                    (staging / name).write_text(texts[name], encoding="utf-8")
                else:
                    shutil.copyfile(version_dir / name, staging / name)
        with nospace.writing(manifest_path):
            (staging / manifest_name).write_text(json.dumps(manifest, indent=2) + "\n")
        for old in copy_dir.iterdir():  # files of an earlier version this one does not have
            if old.is_file() and old.name not in names and old.name != manifest_name:
                old.unlink()
        for name in [*names, manifest_name]:
            os.replace(staging / name, copy_dir / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def clear_copy(copy_dir: Path) -> None:
    """After a failed report: results/report/ holds no file of a version (Snakemake deletes the rule's outputs
    of a failed job, and the rest of an older copy alone would read as a report). The versions under
    results/reports/ are the record and are untouched."""
    if copy_dir.is_dir():
        for item in copy_dir.iterdir():
            if item.is_file() or item.is_symlink():
                item.unlink(missing_ok=True)
