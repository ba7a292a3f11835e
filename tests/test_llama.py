"""Llama decoder pretraining, for real on CPU: the published shapes and parameter counts (built on the meta device,
so the 8B allocates nothing), the same logits and loss as Hugging Face's LlamaForCausalLM, harness runs of
llama_tiny (tokens/s, FLOPs, amp, activation checkpointing, compiler, DDP and FSDP2 over two ranks, `oom`,
`unsupported` in the frameworks without it), the workflow's token shards, and a study through Snakemake to the
report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import env_python, harness_env, read_log, run_checks, run_harness, run_tool, snakemake, write_config
from dlbench import layout, logformats
from dlbench.harness import flops, llama

TINY = ["--batch-size", "2", "--seq-length", "32", "--warmup-steps", "1", "--measured-steps", "3", "--device", "cpu"]


@pytest.fixture(scope="module")
def api(torch_python) -> dict:
    """The direct-API checks below, run once in one PyTorch interpreter (importing torch and transformers takes
    seconds): each CHECKS entry is the body of a function whose returned dict is api[its name]."""
    imports = (
        "import dataclasses, json, torch\n"
        "from dlbench.harness import llama\n"
        "from dlbench.harness.backends.pytorch import llama as torch_llama\n"
    )
    return run_checks(torch_python, imports, CHECKS)


CHECKS: dict[str, str] = {}

# ----------------------------------------------------------------------------- shapes and parameters
CHECKS["parameters"] = """
out = {}
for name, cfg in llama.CONFIGS.items():
    with torch.device("meta"):  # shapes only: the 8B allocates nothing
        model = torch_llama.LlamaForCausalLM(cfg)
    out[name] = {
        "count": torch_llama.parameter_count(model),
        "tied": model.lm_head.weight is model.embed_tokens.weight,
        "q": list(model.layers[0].self_attn.q_proj.weight.shape),
        "k": list(model.layers[0].self_attn.k_proj.weight.shape),
        "gate": list(model.layers[0].mlp.gate_proj.weight.shape),
        "layers": len(model.layers),
    }
return out
"""


def test_published_shapes_and_parameter_counts(api):
    out = api["parameters"]
    assert out["llama3_1b"] == {
        "count": 1_235_814_400,  # Llama 3.2 1B: 1.24 B
        "tied": True,
        "q": [2048, 2048],
        "k": [512, 2048],  # 8 key/value heads of 64
        "gate": [8192, 2048],
        "layers": 16,
    }
    assert out["llama3_8b"] == {
        "count": 8_030_261_248,  # Llama 3.1 8B: 8.03 B
        "tied": False,
        "q": [4096, 4096],
        "k": [1024, 4096],  # 8 key/value heads of 128
        "gate": [14336, 4096],
        "layers": 32,
    }
    for name, cfg in llama.CONFIGS.items():
        assert out[name]["count"] == llama.parameter_count(cfg)
    assert llama.PUBLISHED_PARAMETERS == {name: out[name]["count"] for name in ("llama3_1b", "llama3_8b")}


def test_flops_per_token_are_palms_count():
    """6 N + 12 L H T, N without the input embedding (the output projection once, tied or not)."""
    cfg = llama.CONFIGS["llama3_8b"]
    n = 8_030_261_248 - 128_256 * 4096  # the input embedding table is a lookup
    assert llama.flop_parameters(cfg) == n
    assert llama.train_flops_per_token("llama3_8b", 8192) == 6 * n + 12 * 32 * 4096 * 8192
    assert llama.flop_parameters(llama.CONFIGS["llama3_1b"]) == 1_235_814_400  # tied: the table is the head
    counted = flops.model_flops("llama3_1b", seq_length=2048)
    assert counted["train_flops_per_sample"] == 6 * 1_235_814_400 + 12 * 16 * 2048 * 2048  # per token
    assert counted["train_flops_per_sample"] == 3 * 2 * counted["forward_macs_per_sample"]


# ----------------------------------------------------------------------------- against Hugging Face
CHECKS["hugging_face"] = """
from transformers import LlamaConfig, LlamaForCausalLM
out = {}
for tied in (False, True):
    cfg = dataclasses.replace(llama.CONFIGS["llama_tiny"], tie_embeddings=tied)
    torch.manual_seed(0)
    ours = torch_llama.LlamaForCausalLM(cfg).eval()
    hf = LlamaForCausalLM(LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads,
        rms_norm_eps=cfg.norm_eps, rope_theta=cfg.rope_theta, tie_word_embeddings=tied, hidden_act="silu",
        max_position_embeddings=4096, attention_bias=False, mlp_bias=False, attn_implementation="sdpa",
    )).eval()
    hf.load_state_dict(torch_llama.hf_state_dict(ours), strict=True)  # the same weights, every one named
    tokens = torch.randint(0, cfg.vocab_size, (2, 49), generator=torch.Generator().manual_seed(1))
    inputs, targets = tokens[:, :-1], tokens[:, 1:].contiguous()
    row = {"rope": hf.config.rope_parameters}
    for precision in ("fp32", "bf16"):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits, loss = ours.logits(inputs).float(), ours(tokens)
            theirs = hf(input_ids=inputs, labels=targets, shift_labels=targets)
        row[precision] = {
            "logits": (logits - theirs.logits.float()).abs().max().item(),
            "loss": loss.item(),
            "hf_loss": theirs.loss.item(),
        }
    out["tied" if tied else "untied"] = row
return out
"""


def test_same_logits_and_loss_as_hugging_face_llama(api):
    for tied in ("untied", "tied"):
        row = api["hugging_face"][tied]
        assert row["rope"] == {"rope_theta": 500000.0, "rope_type": "default"}
        assert row["fp32"]["logits"] < 1e-5, row
        assert row["fp32"]["loss"] == pytest.approx(row["fp32"]["hf_loss"], abs=1e-6)
        assert row["fp32"]["loss"] == pytest.approx(np.log(8192), rel=0.02)  # untrained: about uniform
        assert row["bf16"]["logits"] < 0.05, row  # bf16 autocast: the same ops in the same order, rounding apart
        assert row["bf16"]["loss"] == pytest.approx(row["bf16"]["hf_loss"], abs=1e-3)


# ----------------------------------------------------------------------------- harness runs
def run_llama(log: Path, *args: str, model: str = "llama_tiny", framework: str = "pytorch") -> dict:
    python = env_python(framework)
    result = run_harness(python, log, *args, framework=framework, model=model, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    entries = read_log(log)
    entries["stderr"] = [{"text": result.stderr}]
    return entries


def assert_tokens_counted(entries: dict, ranks: int, batch: int, seq: int, steps: int) -> dict:
    summary = entries["summary"][-1]
    assert summary["status"] == "ok", (summary, entries["stderr"][0]["text"][-2000:])
    assert summary["unit"] == "tokens/s"
    assert summary["samples"] == ranks * batch * seq * steps  # every position of every sequence
    assert summary["sequences_per_s"] * seq == pytest.approx(summary["throughput"])
    assert summary["train_flops_per_sample"] == llama.train_flops_per_token("llama_tiny", seq)
    assert summary["achieved_tflops"] == pytest.approx(summary["throughput"] * summary["train_flops_per_sample"] / 1e12)
    return summary


def test_tokens_per_second_with_bf16_autocast_and_activation_checkpointing(tmp_path):
    log = tmp_path / "run.jsonl"
    entries = run_llama(log, "--topology", "1x1", *TINY, "--precision", "amp", "--activation-checkpointing", "on")
    assert_tokens_counted(entries, 1, 2, 32, 3)
    env = entries["environment"][0]
    assert env["amp_dtype"] == "bfloat16" and env["activation_checkpointing"] is True
    assert env["parameters"] == llama.parameter_count(llama.CONFIGS["llama_tiny"])
    assert env["optimizer"] == "AdamW fused"
    assert env["seq_length"] == 32 and env["attention"].startswith("scaled_dot_product_attention")
    record = logformats.parse(log)
    assert record["unit"] == "tokens/s" and record["activation_checkpointing"] is True
    assert record["sequences_per_s"] == pytest.approx(record["throughput"] / 32)
    assert record["seq_length"] == 32 and record["optimizer"] is None


@pytest.mark.slow
def test_compiler_on(tmp_path):
    entries = run_llama(tmp_path / "run.jsonl", "--topology", "1x1", *TINY, "--precision", "amp", "--compiler", "on")
    assert_tokens_counted(entries, 1, 2, 32, 3)
    assert entries["environment"][0]["compiler"] == "torch.compile"


@pytest.mark.slow
def test_two_ranks_ddp_and_fsdp2(tmp_path):
    ddp = run_llama(tmp_path / "ddp.jsonl", "--topology", "1x2", *TINY)
    assert_tokens_counted(ddp, 2, 2, 32, 3)
    assert ddp["environment"][0]["strategy_in_effect"]["wrapper"] == "DistributedDataParallel"
    fsdp = run_llama(
        tmp_path / "fsdp.jsonl", "--topology", "1x2", *TINY, "--strategy", "fsdp", "--activation-checkpointing", "on"
    )
    assert_tokens_counted(fsdp, 2, 2, 32, 3)
    sharded = fsdp["environment"][0]["strategy_in_effect"]
    assert sharded["wrapper"] == "fully_shard" and sharded["placements"] == ["S(0)"] and sharded["mesh_size"] == 2
    assert fsdp["environment"][0]["optimizer"] == "AdamW foreach"  # no fused AdamW for DTensors on CPU


@pytest.mark.slow
def test_8b_with_adamw_beyond_the_memory_budget_is_oom(tmp_path):
    """8 B parameters with AdamW need about 16 bytes each; a 2 GiB budget per rank fails in a real allocation."""
    entries = run_llama(
        tmp_path / "run.jsonl",
        "--topology",
        "1x1",
        "--batch-size",
        "1",
        "--seq-length",
        "2048",
        "--device",
        "cpu",
        "--memory-limit-gb",
        "2",
        model="llama3_8b",
    )
    summary = entries["summary"][-1]
    assert summary["status"] == "oom", summary
    assert "allocate" in summary["error"]


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["tensorflow", "mxnet", "jax"])
def test_frameworks_without_llama_record_unsupported(tmp_path, framework):
    entries = run_llama(tmp_path / "run.jsonl", "--topology", "1x1", *TINY, framework=framework)
    summary = entries["summary"][-1]
    assert summary["status"] == "unsupported"
    assert f"model 'llama_tiny' is not implemented for {framework} yet" in summary["error"]


# ----------------------------------------------------------------------------- token shards
@pytest.fixture(scope="module")
def token_data(tmp_path_factory) -> dict[str, Path]:
    """The workflow's tools from the Wikipedia sample in gensim's wheel to token shards, twice (determinism)."""
    root = tmp_path_factory.mktemp("llama_data")
    wheels, sample = root / "wheels", root / "sample"
    dataprep = env_python("dataprep")
    run_tool(sys.executable, "dlbench.sample_wheels", "--dest", str(wheels), "--manifest", str(wheels / "w.json"))
    run_tool(sys.executable, "dlbench.sample_wheels", "--dest", str(wheels), "--bert-sample", str(sample))
    dump = next(sample.glob("*.bz2"))
    run_tool(dataprep, "dlbench.dataprep.wikitext", "--input", str(dump), "--output", str(sample / "wiki.txt"))
    for name in ("tokens", "again"):
        run_tool(
            dataprep,
            "dlbench.dataprep.llama_tokens",
            "create",
            "--input",
            str(sample / "wiki.txt"),
            "--out",
            str(root / name),
            "--vocab-size",
            "4096",
            "--shards",
            "3",
        )
    run_tool(dataprep, "dlbench.dataprep.llama_tokens", "verify", "--out", str(root / "tokens"))
    return {"tokens": root / "tokens", "again": root / "again", "dataprep": dataprep}


@pytest.mark.slow
def test_token_shards_are_deterministic_packed_and_read_in_place(tmp_path, token_data):
    root = token_data["tokens"]
    manifest = json.loads((root / layout.MANIFEST).read_text())
    assert manifest["vocab_size"] == 4096 and manifest["dtype"] == "uint16" and manifest["eot_id"] == 0
    shards = layout.token_shards(root)
    assert [p.name for p in shards] == [layout.token_shard(i, 3) for i in range(3)]
    for path in [*shards, root / layout.TOKENIZER]:  # the same text and vocabulary: the same bytes
        assert path.read_bytes() == (token_data["again"] / path.name).read_bytes()
    ids = np.concatenate([np.fromfile(p, dtype="<u2") for p in shards])
    assert len(ids) == manifest["tokens"] and ids.max() < 4096
    assert np.count_nonzero(ids == 0) == manifest["documents"] and ids[-1] == 0  # end of text after each document
    # the first document decodes back to the text's first document (its lines joined by newlines), byte for byte
    decode = (
        "import sys, numpy as np; from tokenizers import Tokenizer; "
        "ids = np.fromfile(sys.argv[1], dtype='<u2'); "
        "print(Tokenizer.from_file(sys.argv[2]).decode(ids[: int(np.argmax(ids == 0))].tolist()), end='')"
    )
    first = subprocess.run(
        [str(token_data["dataprep"]), "-c", decode, str(shards[0]), str(root / layout.TOKENIZER)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    text = (root.parent / "sample" / "wiki.txt").read_text(encoding="utf-8")
    assert first == text.split("\n\n")[0].strip("\n") and len(first) > 1000

    entries = run_llama(tmp_path / "real.jsonl", "--topology", "1x2", *TINY, "--data", "real", "--data-dir", str(root))
    assert_tokens_counted(entries, 2, 2, 32, 3)
    pipeline = entries["environment"][0]["input_pipeline"]
    assert pipeline.startswith("np.memmap token shards (3,") and "windows of 33 tokens" in pipeline


@pytest.mark.slow
def test_bad_token_data_is_a_clear_error_before_timing(tmp_path, token_data):
    bad = tmp_path / "bad"
    bad.mkdir()
    for path in token_data["tokens"].iterdir():
        (bad / path.name).write_bytes(path.read_bytes())
    manifest = json.loads((bad / layout.MANIFEST).read_text())
    (bad / layout.MANIFEST).write_text(json.dumps({**manifest, "vocab_size": 9000}))  # more than llama_tiny's 8192
    entries = run_llama(tmp_path / "vocab.jsonl", "--topology", "1x1", *TINY, "--data", "real", "--data-dir", str(bad))
    summary = entries["summary"][-1]
    assert summary["status"] == "error" and "step" not in entries
    assert (
        f"{bad / layout.MANIFEST}: the tokenizer's vocabulary has 9000 tokens, more than llama_tiny's 8192"
        in (summary["error"])
    )

    (bad / layout.MANIFEST).write_text(json.dumps(manifest))
    shard = layout.token_shards(bad)[1]
    shard.write_bytes(shard.read_bytes()[:-7])
    entries = run_llama(tmp_path / "short.jsonl", "--topology", "1x1", *TINY, "--data", "real", "--data-dir", str(bad))
    summary = entries["summary"][-1]
    assert summary["status"] == "error" and "step" not in entries
    assert f"{shard}: truncated:" in summary["error"]
    verify = subprocess.run(
        [str(token_data["dataprep"]), "-m", "dlbench.dataprep.llama_tokens", "verify", "--out", str(bad)],
        env=harness_env(),
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 1 and f"{shard}: " in verify.stderr


# ----------------------------------------------------------------------------- a study to the report
@pytest.mark.slow
def test_study_through_snakemake_to_the_report(tmp_path):
    """llama_tiny on synthetic tokens and the workflow's token shards, and TensorFlow's unsupported record: the
    report shows tokens/s, TFLOP/s and the MFU column, blank with the reason on a CPU (no peak is known)."""
    config = {
        "study": "llm-test",
        "software": {"venv_dir": str(Path(__file__).resolve().parents[1] / ".venvs")},
        "platform": {"device": "cpu"},
        "defaults": {"repeats": 1, "warmup_steps": 1, "measured_steps": 3, "timeout_minutes": 10},
        "datasets": {"llama": {"vocab_size": 2048, "shards": 2}},
        "matrix": {
            "framework": ["pytorch"],
            "model": ["llama_tiny"],
            "topology": ["1x1"],
            "data": ["synthetic", "real"],
            "seq_length": [64],
            "batch_size": [2],
        },
        "include": [{"framework": "tensorflow", "model": "llama_tiny", "topology": "1x1", "batch_size": 2}],
    }
    result = snakemake(tmp_path, "--cores", "2", "--configfile", str(write_config(tmp_path / "llm.yaml", config)))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    report = tmp_path / "results/reports/v1"
    records = pd.read_csv(report / "records.csv").set_index("config_id")
    ok = records[records["framework"] == "pytorch"]
    assert set(ok["status"]) == {"ok"} and set(ok["unit"]) == {"tokens/s"}
    assert sorted(ok.index) == [
        "llama_tiny/pytorch/1x1/bs2-fp32-nocompile-real-seq64-nockpt",
        "llama_tiny/pytorch/1x1/bs2-fp32-nocompile-synthetic-seq64-nockpt",
    ]
    unsupported = records.loc["llama_tiny/tensorflow/1x1/bs2-fp32-nocompile-synthetic-seq128-nockpt"]
    assert unsupported["status"] == "unsupported" and "not implemented for tensorflow" in unsupported["error"]
    summary = pd.read_csv(report / "summary.csv")
    mine = summary[summary["framework"] == "pytorch"]
    assert (mine["tflops"] > 0).all() and mine["mfu"].isna().all()
    assert mine["mfu_note"].str.startswith("no peak known for device").all()
    html = (report / "index.html").read_text()
    assert "Throughput in tokens/s" in html and "MFU" in html and "— (no peak known for device" in html
    assert "Llama decoder pretraining (causal LM), throughput in tokens/s" in html
    manifest = json.loads((tmp_path / "results/data/llama/manifest.json").read_text())
    assert manifest["vocab_size"] == 2048 and (tmp_path / "results/data/llama/verified.txt").exists()


@pytest.mark.slow
def test_batch_size_max_search_ends_at_the_memory_budget(tmp_path):
    """batch_size max for llama_tiny at 128 tokens under a 1 GiB budget per rank (~16 MB per sequence: logits over
    the 8,192-token vocabulary in fp32, their gradients): the largest multiple of 16 that trains; the next one
    ran out of memory."""
    out = tmp_path / "search.json"
    subprocess.run(
        [str(env_python("pytorch")), "-m", "dlbench.harness.batchsearch", "--out", str(out), "--multiple", "16"]
        + ["--framework", "pytorch", "--model", "llama_tiny", "--topology", "1x1", "--seq-length", "128"]
        + ["--device", "cpu", "--memory-limit-gb", "1"],
        env=harness_env(),
        check=True,
        capture_output=True,
        timeout=1200,
    )
    result = json.loads(out.read_text())
    assert result["status"] == "ok" and result["batch_size"] % 16 == 0, result
    statuses = {p["batch_size"]: p["status"] for p in result["probes"]}
    assert statuses[result["batch_size"]] == "ok" and statuses[result["batch_size"] + 16] == "oom", statuses
    ok = next(p for p in result["probes"] if p["status"] == "ok")
    assert read_log(Path(ok["log"]))["summary"][-1]["unit"] == "tokens/s"
