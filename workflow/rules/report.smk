# Parse every run log into one record, aggregate the repeats, publish a versioned report.


rule aggregate:
    input:
        logs=STUDY.run_logs(),
        imports=IMPORT_RECORDS,
        envs=study_env_markers(),
    output:
        records="results/aggregate/records.csv",
        summary="results/aggregate/summary.csv",
        environment="results/aggregate/environment.json",
    log:
        "logs/aggregate.log",
    params:
        config=SETTINGS,
    localrule: True
    conda:
        "../../envs/core.yaml"
    script:
        "../scripts/aggregate.py"


rule report:
    input:
        records=rules.aggregate.output.records,
        summary=rules.aggregate.output.summary,
        environment=rules.aggregate.output.environment,
    output:
        # The version directory is chosen when the report is written (the next free one or the
        # configured name, never an existing one); this manifest names it.
        manifest=REPORT_MANIFEST,
    log:
        "logs/report.log",
    params:
        version=SETTINGS["report"]["version"],
    localrule: True
    conda:
        "../../envs/core.yaml"
    script:
        "../scripts/report.py"
