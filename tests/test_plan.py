"""A study's jobs without Snakemake: the configuration a job's ids name (a search's size found from its result
file), the harness command lines of runs and searches (dlbench.plan.plan), and the data-preparation jobs' inputs and
arguments (dlbench.plan.data_plan). The expected command lines are those the workflow's dry runs of the shipped
studies print."""

from __future__ import annotations

import json
import shlex
import textwrap
from pathlib import Path

import pytest
import yaml

from conftest import CASES_DIR, REPO
from dlbench.plan import plan
from dlbench.plan.data_plan import DataPlan
from dlbench.plan.study import load_study
from dlbench.vocabulary import identity

SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
STUDIES = REPO / "workflow" / "studies"


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the working directory, as with Snakemake: results/ is here


def study(path: Path | None = None, text: str = "", base_dir: Path = Path(".")):
    config = yaml.safe_load(path.read_text() if path else textwrap.dedent(text))
    return load_study(config, SCHEMA, REPO / "envs", base_dir)


def write_search(search_id: str, status: str, batch_size: int | None) -> None:
    path = Path(identity.search_path(search_id))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"status": status, "batch_size": batch_size}))


# ---- runs and searches
def test_a_runs_command_line():
    jobs = plan.Plan(study(CASES_DIR / "config_basic" / "config.yaml"))
    config_id = "resnet50/pytorch/1x2/bs2-fp32-nocompile-synthetic-img32"
    assert jobs.run_arguments(config_id, "1") == (
        "--framework pytorch --model resnet50 --topology 1x2 --batch-size 2 --precision fp32 --compiler off "
        "--data synthetic --image-size 32 --warmup-steps 1 --measured-steps 2 --repeat 1 "
        f"--config-id {config_id} --device cpu --timeout-s 600 --telemetry-ms 100"
    )
    assert jobs.gpu_gres(jobs.configuration(config_id)) == ""
    with pytest.raises(ValueError, match="resnet50/pytorch/1x4/bs2-fp32 is not a configuration of this study"):
        jobs.configuration("resnet50/pytorch/1x4/bs2-fp32")
    with pytest.raises(ValueError, match="is not a configuration"):
        jobs.configuration("no/such/id")  # not even a config id: no search could have found it


def test_time_to_quality_real_data_and_strategies_in_a_runs_command_line():
    jobs = plan.Plan(study(STUDIES / "time-to-quality-cpu.yaml"))
    config_id = "resnet_tiny/pytorch/1x1/bs16-fp32-nocompile-real-img32-ttq70_fa8edf"
    c = jobs.configuration(config_id)
    assert plan.dataset_ready(c) == ["results/data/imagenet/verified.txt"]
    quality = (
        '{"base_lr": 0.05, "decay": "cosine", "decay_steps": 400, "end_lr": 0.0, "eval_every_steps": 20, '
        '"max_minutes": 10, "max_steps": 400, "momentum": 0.9, "target": 0.7, "warmup_steps": 10, '
        '"weight_decay": 5e-05}'
    )
    assert jobs.run_arguments(config_id, "3") == (
        "--framework pytorch --model resnet_tiny --topology 1x1 --batch-size 16 --precision fp32 --compiler off "
        "--data real --image-size 32 --data-dir results/data/imagenet --warmup-steps 20 --measured-steps 100 "
        f"--repeat 3 --config-id {config_id} --device auto --timeout-s 900 --telemetry-ms 100 "
        f"--quality {shlex.quote(quality)} --seed 2"
    )
    jobs = plan.Plan(study(STUDIES / "strategies.yaml"))
    config_id = "resnet50/tensorflow/1x2/bs4-fp32-nocompile-synthetic-img32-via_mwms_pack1mb"
    assert plan.dataset_ready(jobs.configuration(config_id)) == []
    assert jobs.run_arguments(config_id, "2") == (
        "--framework tensorflow --model resnet50 --topology 1x2 --batch-size 4 --precision fp32 --compiler off "
        "--data synthetic --image-size 32 --strategy mwms_pack1mb --warmup-steps 2 --measured-steps 6 --repeat 2 "
        f"--config-id {config_id} --device auto --timeout-s 600 --telemetry-ms 100"
    )


def test_a_searchs_command_line_and_the_runs_at_the_size_it_found():
    the_study = study(STUDIES / "max-batch.yaml")
    jobs = plan.Plan(the_study)
    search = "bert_tiny/pytorch/1x1/bsmax-fp32-nocompile-synthetic-seq128-adam-noclip"
    assert jobs.search_arguments(search, "1x1") == (
        f"--search-id {search} --multiple 16 --max-batch-size 512 --framework pytorch --model bert_tiny "
        "--topology 1x1 --precision fp32 --compiler off --data synthetic --seq-length 128 --optimizer adam "
        "--grad-clip off --device cpu --timeout-s 600 --memory-limit-gb 1"
    )
    with pytest.raises(ValueError, match="batch_size max runs at the size its search finds"):
        jobs.run_arguments(search, "1")
    assert jobs.search_results() == [identity.search_path(s) for s in the_study.searches()]
    assert len(jobs.search_results()) == 3

    # The searches end: PyTorch's found 96, TensorFlow's ran out of memory, MXNet's found 16 (a size listed too).
    found_96 = "bert_tiny/pytorch/1x1/bs96-fp32-nocompile-synthetic-seq128-adam-noclip"
    with pytest.raises(ValueError, match="is not a configuration"):
        jobs.configuration(found_96)  # not before its search is done
    write_search(search, "ok", 96)
    write_search(search.replace("pytorch", "tensorflow"), "oom", None)
    write_search(search.replace("pytorch", "mxnet"), "ok", 16)
    assert jobs.configuration(found_96).batch_size == 96
    assert jobs.run_arguments(found_96, "2").startswith("--framework pytorch --model bert_tiny --topology 1x1 --batch")
    assert "--batch-size 96 " in jobs.run_arguments(found_96, "2")
    assert jobs.found_configuration(found_96.replace("bs96", "bs64")) is None  # not the size found
    assert jobs.found_configuration(found_96.replace("pytorch", "tensorflow")) is None  # found none

    waited = []
    logs = jobs.found_run_logs(waited.append)
    assert sorted(waited) == sorted(the_study.searches())  # each search's checkpoint, waited for
    assert logs == [identity.run_log(found_96, 1), identity.run_log(found_96, 2)]  # MXNet's bs16: listed already


def test_the_aggregates_list_is_named_by_what_the_study_reads():
    jobs = plan.Plan(study(STUDIES / "max-batch.yaml"))
    name = jobs.aggregated_list([])
    assert name.startswith(f"{identity.AGGREGATE_DIR}/inputs-") and len(Path(name).stem) == len("inputs-") + 16
    assert jobs.aggregated_list([]) == name
    assert jobs.aggregated_list(["results/imports/a.jsonl"]) != name
    other = plan.Plan(study(CASES_DIR / "config_basic" / "config.yaml"))
    assert other.aggregated_list([]) != name


def test_gpus_per_node_under_slurm():
    jobs = plan.Plan(study(STUDIES / "gpu.yaml"))
    c = next(iter(jobs.study.configurations.values()))
    assert jobs.gpu_gres(c) == f"gpu:{c.devices_per_node}"
    jobs.settings["platform"]["gpu_model"] = "h100"
    assert jobs.gpu_gres(c) == f"gpu:h100:{c.devices_per_node}"


# ---- prepared data
def test_the_samples_preparation_arguments():
    data = DataPlan(study(REPO / "config.yaml").config["datasets"])
    assert data.sample_imagenet_arguments() == "--classes 10 --train-per-class 30 --validation-per-class 5"
    assert data.imagenet_inputs() == ["resources/sample/imagenet/sample.json"]
    tree = "resources/sample/imagenet"
    assert data.imagenet_arguments() == (
        f"--train-dir {tree}/train --validation-dir {tree}/validation --validation-labels "
        f"{tree}/validation_labels.txt --synsets {tree}/synsets.txt --metadata {tree}/metadata.txt "
        f"--bounding-boxes {tree}/bounding_boxes.csv --train-shards 8 --validation-shards 2 --seed 12345"
    )
    wiki = "resources/sample/bert/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
    assert data.bert_inputs() == [wiki]
    assert data.bert_dumps() == {"enwiki-latest-pages-articles1": wiki}
    assert data.bert_text_files() == ["results/data/bert/text/enwiki-latest-pages-articles1.txt"]
    assert data.bert_vocab() == "resources/sample/bert/vocab.txt"
    assert data.bert_shard_arguments(128) == (
        "--max-seq-length 128 --max-predictions 20 --dupe-factor 5 --seed 12345 --shards 4 --do-lower-case"
    )
    assert data.bert_group_manifests("128") == [
        "results/data/bert/seq128/manifest.group-00000-of-00002.json",
        "results/data/bert/seq128/manifest.group-00001-of-00002.json",
    ]
    assert data.llama_arguments() == "--vocab-size 8192 --shards 4"
    # Options beyond the defaults: only where set, so that data prepared before they existed is not made again.
    ttq = DataPlan(study(STUDIES / "time-to-quality-cpu.yaml").config["datasets"])
    assert ttq.sample_imagenet_arguments() == (
        "--classes 10 --train-per-class 60 --validation-per-class 20 --photo-per-class --long-side 64 96"
    )


def test_the_users_own_data(tmp_path):
    raw = tmp_path / "my data"
    for name in ("train", "validation"):
        (raw / name).mkdir(parents=True)
    (raw / "synsets.txt").write_text("n01440764\n")
    (raw / "corpus.txt").write_text("One sentence. Another.\n")
    (raw / "dump.xml.bz2").write_bytes(b"")
    (raw / "vocab.txt").write_text("[PAD]\n")
    the_study = study(
        text=f"""\
        matrix: {{framework: [pytorch], model: [resnet50, bert_tiny], topology: ["1x1"], batch_size: [2],
                  data: [real]}}
        datasets:
          imagenet: {{source: raw, train_dir: {raw}/train, validation_dir: {raw}/validation,
                      synsets: {raw}/synsets.txt, recordio: true}}
          bert: {{source: raw, inputs: [{raw}/corpus.txt, {raw}/dump.xml.bz2], vocab: {raw}/vocab.txt,
                  lower_case: false, whole_word_mask: true, random_doc_block: 64, shuffle_buffer: 0, jobs: 8}}
        """,
        base_dir=tmp_path,
    )
    data = DataPlan(the_study.config["datasets"])
    assert data.imagenet_inputs() == [f"{raw}/train", f"{raw}/validation", f"{raw}/synsets.txt"]
    assert shlex.split(data.imagenet_arguments()) == [  # a path with a space: one word
        *("--train-dir", f"{raw}/train", "--validation-dir", f"{raw}/validation", "--synsets", f"{raw}/synsets.txt"),
        *("--train-shards", "1024", "--validation-shards", "128", "--seed", "12345", "--recordio"),
    ]
    assert data.bert_dumps() == {"dump": f"{raw}/dump.xml.bz2"}
    assert data.bert_text_files() == [f"{raw}/corpus.txt", "results/data/bert/text/dump.txt"]
    assert data.bert_vocab() == f"{raw}/vocab.txt"
    assert data.bert_shard_arguments(512) == (
        "--max-seq-length 512 --max-predictions 80 --dupe-factor 10 --seed 12345 --shards 64 --no-do-lower-case "
        "--whole-word-mask --random-doc-block 64 --shuffle-buffer 0"
    )
    assert len(data.bert_group_manifests(512)) == 8
    bert = next(c for c in the_study.configurations.values() if c.model == "bert_tiny")
    assert plan.dataset_ready(bert) == ["results/data/bert/seq128/verified.txt"]
