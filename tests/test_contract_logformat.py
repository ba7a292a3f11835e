"""The log-format contract, for every format an import or a runner's log may name (logformats.FORMATS): what
logformats/__init__.py promises of a parser, whichever project wrote the log.

- a log of the format's shape is one complete, schema-valid `ok` record with its `source` and its figure;
- the import's labels win over what the log says, and a label the format does not read (a typo) or a topology
  that is not one is refused with LogError;
- a missing file, another project's text or binary garbage never raises anything but LogError: it is an
  `error` record naming the file, or a LogError naming it;
- a log cut short before its figure is an `error` record naming the file, without a throughput.

What a format's own rules say (MLPerf's scoring, DLPerf's window, DLLogger's scripts) stays in
tests/test_logformats_<name>.py. SAMPLES holds one log writer per format: a format added to the registry fails
here until it has one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.collect.records import FIELDS, LogError
from dlbench.logformats import FORMATS
from dlbench.logformats.external_log_fixtures import write_dllogger, write_mllog, write_oneflow, write_tf_cnn

ONEFLOW_TIMES = {i: 1_597_933_942.0 + i * 0.25 for i in range(0, 141, 20)}


# One log of each format's shape, and the lines to keep of it for a log cut short before its figure.
SAMPLES: dict[str, tuple[Callable[[Path], Path], Callable[[list[str]], list[str]]]] = {
    "mlperf": (lambda d: write_mllog(d / "result_0.txt"), lambda lines: lines[: len(lines) // 2]),
    "dllogger": (lambda d: write_dllogger(d / "train.log"), lambda lines: lines[:4]),
    "tf_cnn_benchmarks": (lambda d: write_tf_cnn(d / "out.log"), lambda lines: lines[:-3]),
    "dlperf": (
        lambda d: write_oneflow(d / "logs/oneflow/bz128/1n8g/rn50_b128_fp32_1.log", times=ONEFLOW_TIMES),
        lambda lines: lines[:3],
    ),
}
EXTERNAL = [name for name in FORMATS if name != "dlbench"]


def test_every_external_format_has_a_sample():
    assert sorted(SAMPLES) == sorted(EXTERNAL)


@pytest.mark.parametrize("name", EXTERNAL)
def test_a_log_of_its_shape_is_one_complete_ok_record(name, tmp_path):
    path = SAMPLES[name][0](tmp_path)
    record = FORMATS[name].parse(path, {})
    assert list(record) == FIELDS and record["source"] == name
    assert record["status"] == "ok", record["error"]
    # its figure: a throughput, or (time to quality: MLPerf) the minutes to train
    assert (record["throughput"] or record["time_to_train_min"]) > 0 and record["log_path"] == str(path)
    assert FORMATS[name].THROUGHPUT_DEFINITION


@pytest.mark.parametrize("name", EXTERNAL)
def test_the_imports_labels_win(name, tmp_path):
    path = SAMPLES[name][0](tmp_path)
    record = FORMATS[name].parse(path, {"framework": "site-build", "precision": "amp", "repeat": 4})
    assert (record["framework"], record["precision"], record["repeat"]) == ("site-build", "amp", 4)
    assert record["config_id"].split("/")[1] == "site-build" and record["run_id"].startswith(record["config_id"])


@pytest.mark.parametrize("name", EXTERNAL)
@pytest.mark.parametrize(
    ("labels", "words"), [({"frameworks": "x"}, "unknown label"), ({"topology": "8"}, "topology '8' is not")]
)
def test_a_label_it_cannot_read_is_refused(name, labels, words, tmp_path):
    path = SAMPLES[name][0](tmp_path)
    with pytest.raises(LogError, match=words):
        FORMATS[name].parse(path, labels)


@pytest.mark.parametrize("name", list(FORMATS))
@pytest.mark.parametrize(
    "content",
    [None, "nothing any benchmark wrote\n", b"\x00\xff\xfe garbage \x80\n"],
    ids=["missing", "other", "binary"],
)
def test_what_is_not_its_log_is_an_error_naming_the_file(name, content, tmp_path):
    path = tmp_path / "logs" / "result_0.txt"
    path.parent.mkdir()
    if isinstance(content, str):
        path.write_text(content)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    labels = (
        {"framework": "pytorch", "model": "resnet50", "topology": "1x1", "batch_size": 2} if name != "dlbench" else {}
    )
    try:
        record = FORMATS[name].parse(path, labels)
    except LogError as error:
        assert str(path) in str(error)
        return
    assert record["status"] == "error" and str(path) in record["error"] and record["throughput"] is None


@pytest.mark.parametrize("name", EXTERNAL)
def test_a_log_cut_short_is_an_error_record_naming_the_file(name, tmp_path):
    write, cut = SAMPLES[name]
    path = write(tmp_path)
    path.write_text("".join(line + "\n" for line in cut(path.read_text().splitlines())))
    record = FORMATS[name].parse(path, {})
    assert record["status"] == "error" and str(path) in record["error"], record
    assert record["throughput"] is None
