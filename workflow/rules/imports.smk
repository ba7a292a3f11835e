# Existing logs (other tools', or earlier dlbench runs) parsed into records by their format's parser
# (dlbench.logformats); one job per `imports:` entry, so changing one entry re-parses only that one.
import json


rule import_logs:
    input:
        import_files,
    output:
        records="results/imports/{name}.jsonl",
        notes="results/imports/{name}.notes",  # files not read as runs, and why (imports.notes_path)
    log:
        "logs/imports/{name}.log",
    wildcard_constraints:
        name="[A-Za-z0-9][A-Za-z0-9_.-]*",
    localrule: True
    conda:
        "../../envs/core.yaml"
    params:
        run=run_module("core", "dlbench.imports"),
        entry=lambda wildcards: json.dumps(IMPORTS[wildcards.name], sort_keys=True),
    shell:
        "{params.run} --entry {params.entry:q} --out {output.records:q} > {log:q} 2>&1"
