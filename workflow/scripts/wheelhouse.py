"""Fill a wheelhouse for `bootstrap.sh --wheelhouse DIR` on an offline machine (wheelhouse.sh calls this; pip only).

    python wheelhouse.py DIR --requirements FILE [FILE ...] [--python-version X.Y] [--platform TAG ...]
                         [--have FREEZE]
    python wheelhouse.py --core-requirements envs/core.yaml [--lean | --wheelhouse DIR]
                                                    envs/core.yaml's pip pins (both scripts), one a line
    python wheelhouse.py --relax-installed FILE ...     bootstrap.sh --system-site-packages, before pip install
    python wheelhouse.py --base-scripts FILE ...        and after it

DIR receives a wheel of every requirement and of every dependency the target lacks, for the target's Python and
platform (default: this machine's), and of pip. The set is the one pip resolves on the target: each package of
--have (a `pip list --format=freeze` or `pip freeze` taken there) counts as installed at its version, with the
dependencies that the index lists for that version (pip on the target reads them from the installed package),
and a requirement naming one loses its pin (as bootstrap.sh --system-site-packages relaxes it there). Where the
requirements need another version of a package the target has, the wheelhouse holds the one pip picks, which
pip on the target installs into .venv over the target's. A dependency published only as an sdist is built here
when it is pure Python; any other is refused.

The resolution runs pip's resolver (`pip install --dry-run --report`) in a child interpreter started with -I -S:
its installed packages are stubs for --have (name, version, dependencies), not this machine's. pip evaluates
environment markers against the interpreter that runs it, so the child evaluates them for the target
(python_version, and the platform's markers when --platform is given), and it lifts pip's refusal of platform
options without --target in older pips (--target would ignore the installed stubs).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

# A requirement line: its name and extras, the rest (version specifier, marker).
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*([^;#]*)(;[^#]*)?")
FREEZE_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*===?\s*([^\s;#]+)")
FREEZE_URL = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*@\s*(\S+)")
MANYLINUX = re.compile(r"manylinux_2_(\d+)_(\w+)")
MANYLINUX_LEGACY = {"manylinux1": 5, "manylinux2010": 12, "manylinux2014": 17}
MUSLLINUX = re.compile(r"musllinux_1_(\d+)_(\w+)")
# A pip entry of envs/core.yaml: `- name==version`, optionally followed by a comment; `# optional` marks a package
# that the workflow can do without (wheelhouse.sh --lean leaves it out).
CORE_PIN = re.compile(r"^ *- ([A-Za-z0-9_.-]+==[^ #]+) *(#.*)?$")
OPTIONAL = "# optional"
BARE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# A package the target has at a version not known here (--have lists it by name) is carried as a fallback when its
# wheel is at most this size: pip on the target keeps the target's copy whenever it meets the requirements and
# installs the fallback only when it does not. A larger one is left to the target, and bootstrap.sh says so when
# the target's copy does not serve.
FALLBACK_MIB = 1.0
NO_MATCH = re.compile(r"No matching distribution found for ([^\n]+?)(?: \(from [^\n]*\))?$", re.MULTILINE)


def fail(message: str) -> None:
    raise SystemExit(f"wheelhouse: {message}")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def same_version(a: str | None, b: str) -> bool:
    from pip._vendor.packaging.version import InvalidVersion, Version

    try:
        return a is not None and Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def url_version(url: str) -> str | None:
    """The version in a direct URL's file name (a wheel or an sdist), or None."""
    file = url.rstrip("/").rsplit("/", 1)[-1]
    if file.endswith(".whl"):
        return file.split("-")[1]
    stem = re.sub(r"\.(tar\.gz|tar\.bz2|zip)$", "", file)
    return stem.rsplit("-", 1)[1] if stem != file and "-" in stem else None


def read_have(path: Path) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """The packages of a freeze file: normalized name -> (name, version), and normalized name -> name of those
    listed by name alone (installed there at a version not known here)."""
    if not path.is_file():
        fail(f"--have {path}: no such file")
    have, unknown = {}, {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if pin := FREEZE_PIN.match(line):
            name, version = pin.groups()
        elif (url := FREEZE_URL.match(line)) and (version := url_version(url[2])):
            name = url[1]
        elif BARE_NAME.fullmatch(line):
            unknown[normalize(line)] = line
            continue
        else:
            print(f"wheelhouse: --have {path}:{number}: no version in {line!r}: not counted", file=sys.stderr)
            continue
        have[normalize(name)] = (name, version)
    return have, unknown


def core_requirements(core_yaml: Path, lean: bool = False, wheelhouse: Path | None = None) -> list[str]:
    """The pins of envs/core.yaml's pip list. lean: without the optional ones (`# optional`). wheelhouse: without
    the optional ones that it holds no wheel of (a lean wheelhouse), each said on stderr."""
    pins = []
    for line in core_yaml.read_text().splitlines():
        if not (m := CORE_PIN.match(line)):
            continue
        pin, comment = m[1], m[2] or ""
        if comment.startswith(OPTIONAL):
            name = normalize(pin.split("==")[0])
            if lean:
                continue
            if (
                wheelhouse is not None
                and not any(normalize(wheel.name.split("-")[0]) == name for wheel in wheelhouse.glob("*.whl"))
                and name not in installed_outside()
            ):
                why = comment.removeprefix(OPTIONAL).lstrip(": ")
                print(
                    f"bootstrap: optional {pin} is not in the wheelhouse {wheelhouse}: left out (what it adds: {why})",
                    file=sys.stderr,
                )
                continue
        pins.append(pin)
    return pins


def core_requirements_command(args: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="wheelhouse.py --core-requirements")
    parser.add_argument("core_yaml", type=Path)
    parser.add_argument("--lean", action="store_true")
    parser.add_argument("--wheelhouse", type=Path)
    parsed = parser.parse_args(args)
    print("\n".join(core_requirements(parsed.core_yaml, parsed.lean, parsed.wheelhouse)))


RANGES = Path(__file__).resolve().parents[2] / "envs" / "core.ranges.txt"
TAKEN = "taken-from-the-interpreter.txt"  # in .venv: name==version of each requirement taken from the base
NOT_TAKEN = "not-taken-from-the-interpreter.txt"  # in .venv: "name version (dlbench's range R)", one a line


def installed_outside() -> dict[str, str]:
    """normalized name -> version of the packages that a site-packages outside this environment provides."""
    own = os.path.join(sys.prefix, "")
    paths = [path for path in sys.path if path and not os.path.join(path, "").startswith(own)]
    installed: dict[str, str] = {}
    for dist in importlib.metadata.distributions(path=paths):
        if dist.metadata["Name"]:
            installed.setdefault(normalize(dist.metadata["Name"]), dist.version)
    return installed


def read_ranges(path: Path = RANGES) -> dict[str, str]:
    """envs/core.ranges.txt: normalized name -> version specifier."""
    ranges = {}
    for line in path.read_text().splitlines():
        if (m := REQUIREMENT.match(line)) and not line.lstrip().startswith("#"):
            ranges[normalize(m[1])] = m[3].strip()
    return ranges


def as_on_the_target(
    lines: list[str], installed: dict[str, str | None], ranges: dict[str, str]
) -> tuple[list[str], list[tuple[str, str, str]], list[str]]:
    """The requirement lines as bootstrap.sh --system-site-packages hands them to pip on the target: a requirement
    that the interpreter's site-packages provide (installed: normalized name -> version there, None where it is
    not known here) at a version inside dlbench's range (ranges; a package not listed: its pinned version) gets
    that range instead of its pin, so pip keeps it; a version not known here is counted inside. Also the ones
    taken, (name, version, pin), and those outside their range, said."""
    from pip._vendor.packaging.specifiers import SpecifierSet

    out, taken, refused = [], [], []
    for line in lines:
        m = REQUIREMENT.match(line)
        key = normalize(m[1]) if m and not line.lstrip().startswith(("#", "-")) else None
        if key not in installed:
            out.append(line)
            continue
        pin, version = m[3].strip(), installed[key]
        allowed = ranges.get(key, pin)
        if version is not None and not SpecifierSet(allowed).contains(version, prereleases=True):
            refused.append(f"{key} {version} (dlbench's range {allowed})")
            out.append(line)
            continue
        out.append(f"{m[1]}{m[2] or ''}{allowed}{m[4] or ''}".rstrip())
        taken.append((key, version or "?", pin))
    return out, taken, refused


def relax_installed(files: list[Path]) -> None:
    """bootstrap.sh --system-site-packages, in place before pip install: each requirement that a site-packages
    outside this environment provides inside dlbench's range (as_on_the_target) is taken from there; those taken
    are said and written to .venv/taken-from-the-interpreter.txt, those outside their range said too."""
    installed: dict[str, str | None] = dict(installed_outside())
    ranges = read_ranges()
    taken, refused = [], []
    for file in files:
        lines, taken_here, refused_here = as_on_the_target(file.read_text().splitlines(), installed, ranges)
        file.write_text("\n".join(lines) + "\n")
        taken += taken_here
        refused += refused_here
    (Path(sys.prefix) / TAKEN).write_text("".join(f"{key}=={version}\n" for key, version, _ in taken))
    (Path(sys.prefix) / NOT_TAKEN).write_text("".join(f"{line}\n" for line in refused))
    if taken:
        said = [
            f"{key} {version}" + (f" (pinned {pin})" if pin != f"=={version}" else "") for key, version, pin in taken
        ]
        print(f"bootstrap: taken from the interpreter's site-packages: {', '.join(said)}", file=sys.stderr)
    if refused:
        print(
            "bootstrap: not taken from the interpreter's site-packages, outside dlbench's range (the wheelhouse's "
            f"pinned copy is installed in .venv instead): {', '.join(refused)}",
            file=sys.stderr,
        )


def base_scripts(files: list[Path]) -> None:
    """bootstrap.sh --system-site-packages: the commands of each requirement that a site-packages outside this
    environment provides, in this environment's bin/ (pip made only those of the packages it installed here): a
    console script runs this interpreter, any other file of that bin/ is called by a shell script."""
    own = os.path.join(sys.prefix, "")
    bindir = Path(sysconfig.get_path("scripts"))
    names = {m[1] for file in files for line in file.read_text().splitlines() if (m := REQUIREMENT.match(line))}
    for name in sorted(names):
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if os.path.join(str(dist.locate_file("")), "").startswith(own):
            continue
        commands = {}
        for file in dist.files or []:
            path = Path(os.path.normpath(dist.locate_file(file)))
            if path.parent.name == "bin" and path.is_file():
                commands[path.name] = f'#!/bin/sh\nexec {shlex.quote(str(path))} "$@"\n'
        for entry in dist.entry_points.select(group="console_scripts"):
            if entry.attr:
                call = f"from {entry.module} import {entry.attr.split('.')[0]}\nsys.exit({entry.attr}())"
            else:
                call = f"import runpy\nrunpy.run_module({entry.module!r}, run_name='__main__')"
            commands[entry.name] = f"#!{sys.executable}\nimport sys\n{call}\n"
        for command, text in commands.items():
            if not (bindir / command).exists():
                (bindir / command).write_text(text)
                (bindir / command).chmod(0o755)


def platform_tags(tags: list[str]) -> list[str]:
    """pip matches --platform exactly: a manylinux or musllinux tag stands for every older one of its family."""
    out = []
    for tag in tags:
        legacy = tag.split("_", 1)
        if legacy[0] in MANYLINUX_LEGACY and len(legacy) == 2:
            tag = f"manylinux_2_{MANYLINUX_LEGACY[legacy[0]]}_{legacy[1]}"
        if m := MANYLINUX.fullmatch(tag):
            glibc, arch = int(m[1]), m[2]
            out += [f"manylinux_2_{minor}_{arch}" for minor in range(glibc, 4, -1)]
            aliases = MANYLINUX_LEGACY.items() if arch in ("x86_64", "i686") else [("manylinux2014", 17)]
            out += [f"{alias}_{arch}" for alias, minor in aliases if glibc >= minor]
        elif m := MUSLLINUX.fullmatch(tag):
            out += [f"musllinux_1_{minor}_{m[2]}" for minor in range(int(m[1]), 0, -1)]
        else:
            out.append(tag)
    out.append("any")
    return list(dict.fromkeys(out))


def platform_markers(tag: str) -> dict[str, str]:
    """The environment markers that a platform tag fixes."""
    if tag.startswith(("manylinux", "musllinux", "linux")):
        return {
            "os_name": "posix",
            "sys_platform": "linux",
            "platform_system": "Linux",
            "platform_machine": re.sub(r"^(manylinux_2_\d+|musllinux_1_\d+|manylinux\d+|linux)_", "", tag),
        }
    if tag.startswith("macosx"):
        return {
            "os_name": "posix",
            "sys_platform": "darwin",
            "platform_system": "Darwin",
            "platform_machine": tag.rsplit("_", 1)[1],
        }
    if tag.startswith("win"):
        machine = {"win_amd64": "AMD64", "win32": "x86", "win_arm64": "ARM64"}.get(tag, tag)
        return {"os_name": "nt", "sys_platform": "win32", "platform_system": "Windows", "platform_machine": machine}
    return {}


def python_markers(version: str) -> dict[str, str]:
    parts = (version.split(".") + ["0"])[:3]
    full = ".".join(parts)
    return {
        "python_version": ".".join(parts[:2]),
        "python_full_version": full,
        "implementation_version": full,
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
    }


def resolve_child(config_path: str) -> int:
    """In the child (-I -S): pip's resolver over the stub environment, markers evaluated for the target."""
    config = json.loads(Path(config_path).read_text())
    sys.path[:0] = [config["piplib"]]
    sys.path.append(config["site"])
    from pip._internal.cli import cmdoptions
    from pip._internal.cli.main import main
    from pip._vendor.packaging import markers

    check = cmdoptions.check_dist_restriction

    def check_without_target(options, check_target=False):
        check(options, check_target=False)

    cmdoptions.check_dist_restriction = check_without_target
    environment = dict(markers.default_environment(), **config["markers"])
    markers.default_environment = lambda: dict(environment)
    return main(config["args"])


def pure_wheel(wheel: Path, python: str) -> bool:
    """A wheel any interpreter of that version can install: abi none, platform any, a py3 (or pyXY) tag."""
    python_tags, abi, plat = wheel.stem.split("-")[-3:]
    major, minor = python.split(".")[:2]
    return (
        abi == "none" and plat == "any" and any(tag in ("py3", f"py{major}{minor}") for tag in python_tags.split("."))
    )


def build_pure(spec: str, house: Path, python: str, env: dict[str, str]) -> Path:
    """Build the wheel of an sdist-only dependency with this machine's Python; refuse unless it is pure Python."""
    name = REQUIREMENT.match(spec)[1]
    with tempfile.TemporaryDirectory() as out:
        build = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-binary", name, "-w", out, spec],
            env=env,
            capture_output=True,
            text=True,
        )
        wheels = list(Path(out).glob("*.whl"))
        if build.returncode or len(wheels) != 1:
            fail(
                f"{spec}: no wheel for Python {python} on the index, and no wheel built from an sdist either:\n"
                f"{build.stdout}{build.stderr}"
            )
        if not pure_wheel(wheels[0], python):
            fail(
                f"{spec}: no wheel for Python {python} and the target's platform on the index, and its sdist "
                f"builds a binary wheel here ({wheels[0].name}): build it on a machine like the target "
                f"(pip wheel --no-deps '{spec}') and put the wheel into {house}"
            )
        target = house / wheels[0].name
        shutil.copy2(wheels[0], target)
    print(
        f"wheelhouse: {spec}: only an sdist on the index: built {target.name} (pure Python) with this machine's "
        f"Python {sys.version_info[0]}.{sys.version_info[1]}",
        file=sys.stderr,
    )
    return target


def child_pip(work: Path, args: list[str], markers: dict, env: dict) -> subprocess.CompletedProcess:
    """pip in the child interpreter: the stubs in work/site are its installed packages, markers are the target's."""
    config = {"piplib": str(work / "piplib"), "site": str(work / "site"), "markers": markers, "args": args}
    (work / "child.json").write_text(json.dumps(config))
    child = [sys.executable, "-I", "-S", __file__, "--resolve-child", str(work / "child.json")]
    return subprocess.run(child, env=env, capture_output=True, text=True)


def missing_name(run: subprocess.CompletedProcess) -> str | None:
    """The requirement pip found no distribution for, as a normalized name."""
    missing = NO_MATCH.search(run.stdout + run.stderr)
    return normalize(REQUIREMENT.match(missing[1])[1]) if missing else None


def have_metadata(work: Path, have: dict, target: list[str], markers: dict, env: dict) -> dict[str, dict]:
    """The index's metadata of each --have package at its version, for its dependencies (pip on the target reads
    them from the installed package). A package the index lacks at that version keeps none, with a warning."""
    pending = dict(have)
    while pending:
        (work / "have.txt").write_text("".join(f"{name}=={version}\n" for name, version in pending.values()))
        args = [
            "install",
            "--dry-run",
            "--quiet",
            "--ignore-installed",
            "--ignore-requires-python",
            "--no-deps",
            "--report",
            str(work / "have.json"),
        ]
        run = child_pip(work, [*args, *target, "-r", str(work / "have.txt")], markers, env)
        if run.returncode == 0:
            report = json.loads((work / "have.json").read_text())["install"]
            return {normalize(item["metadata"]["name"]): item["metadata"] for item in report}
        key = missing_name(run)
        if key not in pending:
            fail(f"pip cannot read the metadata of the --have packages:\n{run.stderr}")
        name, version = pending.pop(key)
        note = f"{name} {version}: no wheel on the index for the target: its own dependencies are not checked"
        print(f"wheelhouse: --have {note}", file=sys.stderr)
    return {}


def resolve(
    lines: list[str], have: dict, unknown: dict, house: Path, target: list[str], markers: dict, env: dict
) -> list[dict]:
    """pip's resolution on the target: the report's packages to install, building pure sdist-only ones on the way."""
    with tempfile.TemporaryDirectory(prefix="wheelhouse-") as tmp:
        work = Path(tmp)
        (work / "site").mkdir()
        (work / "piplib").mkdir()
        (work / "piplib" / "pip").symlink_to(importlib.util.find_spec("pip").submodule_search_locations[0])
        metadata = have_metadata(work, have, target, markers, env) if have else {}
        for key, (name, version) in have.items():
            info = work / "site" / f"{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info"
            info.mkdir()
            fields = [("Name", name), ("Version", version)]
            fields += [("Requires-Dist", req) for req in metadata.get(key, {}).get("requires_dist", [])]
            fields += [("Provides-Extra", extra) for extra in metadata.get(key, {}).get("provides_extra", [])]
            (info / "METADATA").write_text("Metadata-Version: 2.1\n" + "".join(f"{k}: {v}\n" for k, v in fields))

        installed: dict[str, str | None] = {key: version for key, (_, version) in have.items()}
        installed |= dict.fromkeys(unknown)
        on_target, _, _ = as_on_the_target(lines, installed, read_ranges())
        (work / "requirements.txt").write_text("\n".join(on_target) + "\n")
        report = work / "report.json"
        args = ["install", "--dry-run", "--quiet", "--report", str(report), "--find-links", str(house), *target]
        args += ["-r", str(work / "requirements.txt")]
        built: list[str] = []
        while (run := child_pip(work, args, markers, env)).returncode:
            missing = NO_MATCH.search(run.stdout + run.stderr)
            if not missing or missing_name(run) in built:
                fail(f"pip cannot resolve the requirements for Python {markers['python_version']}:\n{run.stderr}")
            build_pure(missing[1].strip(), house, markers["python_version"], env)
            built.append(missing_name(run))
        return json.loads(report.read_text())["install"]


def leave_large_unknowns(
    house: Path, before: set[Path], pins: dict[str, str], unknown: dict[str, str]
) -> list[tuple[str, float]]:
    """Drop from pins (and from house, unless it held them before this fill) the wheels of packages that the
    target has at an unknown version and that are over FALLBACK_MIB: (name, MiB) of each, largest first."""
    left = []
    for wheel in sorted(house.glob("*.whl")):
        name, version = wheel.name.split("-")[:2]
        key = normalize(name)
        mib = wheel.stat().st_size / 2**20
        if key in unknown and same_version(pins.get(key), version) and mib > FALLBACK_MIB:
            left.append((unknown[key], mib))
            del pins[key]
            if wheel not in before:
                wheel.unlink()
    return sorted(left, key=lambda item: -item[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--requirements", type=Path, nargs="+", required=True)
    parser.add_argument("--python-version", default=platform.python_version())
    parser.add_argument("--platform", action="append", default=[], metavar="TAG")
    parser.add_argument("--have", type=Path)
    args = parser.parse_args()
    if re.fullmatch(r"3\d+", args.python_version):
        args.python_version = f"3.{args.python_version[1:]}"
    if not re.fullmatch(r"3(\.\d+){1,2}", args.python_version):
        fail(f"--python-version {args.python_version}: expected X.Y (such as 3.12)")
    if importlib.util.find_spec("pip") is None:
        fail(f"{sys.executable} has no pip")
    have, unknown = read_have(args.have) if args.have else ({}, {})
    house = args.dir.resolve()
    house.mkdir(parents=True, exist_ok=True)
    before = set(house.glob("*.whl"))
    # A pip configuration may name a constraints file written for the machine's own Python (this one's does);
    # pip applies it to every command, and a pin without a wheel for the target's Python or platform would fail
    # the resolution. The wheelhouse's versions come from the requirement lists and the resolver alone, so every
    # pip here gets an empty constraints file: PIP_CONSTRAINT=/dev/null overrides the configuration files, an
    # empty PIP_CONSTRAINT does not, and --isolated would also drop the configured index, proxy and certificates.
    env = dict(os.environ, PIP_CONSTRAINT=os.devnull)
    target = ["--only-binary=:all:", "--implementation", "cp", "--python-version", args.python_version]
    markers = python_markers(args.python_version)
    if args.platform:
        tags = platform_tags(args.platform)
        target += [option for tag in tags for option in ("--platform", tag)]
        markers |= platform_markers(tags[0])
        print(f"wheelhouse: platform tags {' '.join(tags)}", file=sys.stderr)

    lines = [line for path in args.requirements for line in path.read_text().splitlines()]
    resolved = resolve(lines, have, unknown, house, target, markers, env)
    pins = {normalize(item["metadata"]["name"]): item["metadata"]["version"] for item in resolved}
    for key, version in pins.items():
        if key in have:
            note = f"the target's {have[key][0]} {have[key][1]} does not fit the other requirements: adding {version}"
            print(f"wheelhouse: {note}", file=sys.stderr)
    # pip itself too: bootstrap.sh upgrades the new environment's pip from the wheelhouse, as it does online.
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as listing:
        listing.write("".join(f"{name}=={version}\n" for name, version in pins.items()) + "pip\n")
        listing.flush()
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *target]
        command += ["--find-links", str(house), "-d", str(house), "-r", listing.name]
        run = subprocess.run(command, env=env, capture_output=True, text=True)
        if run.returncode:
            fail(f"pip download into {house} failed:\n{run.stderr}")
    left = leave_large_unknowns(house, before, pins, unknown)

    def wanted(wheel: Path) -> bool:
        name, version = wheel.name.split("-")[:2]
        return normalize(name) == "pip" or same_version(pins.get(normalize(name)), version)

    wheels = sorted(house.glob("*.whl"))
    ours = [wheel for wheel in wheels if wanted(wheel)]
    for wheel in ours:
        print(f"  {wheel.stat().st_size / 2**20:7.2f} MiB  {wheel.name}")
    if have:
        requested = {
            normalize(m[1]) for line in lines if (m := REQUIREMENT.match(line)) and line.strip()[0] not in "#-"
        }
        present = sorted(name for key, (name, _) in have.items() if key in requested and key not in pins)
        print(f"wheelhouse: required and present on the target (--have), not downloaded: {' '.join(present) or '-'}")
    if fallbacks := sorted(unknown[key] for key in pins if key in unknown):
        print(
            "wheelhouse: on the target at a version not known here, carried in case the target's does not fit "
            f"(pip there keeps the target's when it does): {' '.join(fallbacks)}"
        )
    if left:
        print(
            f"wheelhouse: on the target at a version not known here and over {FALLBACK_MIB:g} MiB, not carried: "
            f"{', '.join(f'{name} ({mib:.1f} MiB)' for name, mib in left)}; bootstrap.sh takes the target's when "
            "it meets dlbench's range (envs/core.ranges.txt) and names any that does not"
        )
    if others := [wheel.name for wheel in wheels if wheel not in ours]:
        print(f"wheelhouse: {house} also holds {len(others)} wheels that this fill does not need: {' '.join(others)}")
    size = sum(wheel.stat().st_size for wheel in ours) / 2**20
    print(f"wheelhouse: {house}: {len(ours)} wheels, {size:.1f} MiB, for Python {args.python_version}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--resolve-child"]:
        sys.exit(resolve_child(sys.argv[2]))
    if sys.argv[1:2] == ["--core-requirements"]:
        sys.exit(core_requirements_command(sys.argv[2:]))
    if sys.argv[1:2] == ["--relax-installed"]:
        sys.exit(relax_installed([Path(file) for file in sys.argv[2:]]))
    if sys.argv[1:2] == ["--base-scripts"]:
        sys.exit(base_scripts([Path(file) for file in sys.argv[2:]]))
    main()
