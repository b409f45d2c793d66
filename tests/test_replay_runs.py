"""Replay cases (tests/replay.py) for runs and the command line (issue #49): `marin train`, `marin scale` and
`marin run -p` given absurd numbers in flags and config fields (1e20 steps, 1e9 layers, negative, nan, inf), experiment
notebooks that are broken or given bad parameters, a prefix or reports folder that cannot be written, a step that
runs out of memory, the dry-run plan on stdout, a missed target recorded rather than failed, the ledger's own
commands. Every case is a clear error (the flag or field named) or a correct result, in seconds; none leaves a step
RUNNING. The cases that start a kernel (`marin run` past its checks) are the four marked `seconds=120`."""

import json
from pathlib import Path

import nbformat
import pytest
from replay import Case, bytes_file

READ_ONLY = "/sys/marin-replay-read-only"  # mkdir there fails for everyone, root included (EPERM or EACCES)


def make_yaml_layers(d):
    bytes_file(d / "config.yaml", b"preset: nano\nmodel: {n_layers: 1000000000}\n")


def make_yaml_d_model_nan(d):
    bytes_file(d / "config.yaml", b"preset: nano\nmodel: {d_model: .nan}\n")


def make_yaml_steps_float(d):
    bytes_file(d / "config.yaml", b"preset: nano\nnum_train_steps: 1.0e+20\n")


def make_yaml_steps_int(d):
    bytes_file(d / "config.yaml", b"preset: nano\nnum_train_steps: 100000000000000000000\n")


def make_yaml_vocab_negative(d):
    bytes_file(d / "config.yaml", b"preset: nano\nmodel: {vocab_size: -5}\n")


def make_yaml_broken(d):
    bytes_file(d / "config.yaml", b"preset: nano\n  bad: [\n")


def make_yaml_warmup_negative(d):
    bytes_file(d / "config.yaml", b"preset: nano\noptimizer: {warmup: -1}\n")


def make_yaml_batch(d):
    bytes_file(d / "config.yaml", b"preset: nano\ndata: {batch_size: 1000000000}\n")


def make_a_file(d):
    "A regular file where the case's prefix or reports folder would need a directory."
    bytes_file(d / "file", b"not a folder")


# --- experiment notebooks -----------------------------------------------------------------------------------------
PARAMS = 'issue = "#49"\nsteps = 3  # steps of the toy step\nlr = 0.1  # a float parameter'
BODY = """assert steps >= 1, f"steps={steps} must be >= 1"
assert 0 < lr < 10, f"lr={lr} must be in (0, 10)"
import json, os
from dataclasses import dataclass
from marin.core.config import versioned
from marin.core.executor import Step, executor_main
from marin.core.experiments import record_target


@dataclass(frozen=True)
class Toy:
    steps: int = versioned(1)


def write(cfg, out):
    with open(os.path.join(out, "steps.json"), "w") as f:
        f.write(json.dumps(cfg.steps))


executor_main([Step("replay/write", write, Toy(steps))])
record_target("steps_above_5", steps > 5, f"steps {steps}")"""
OOM_BODY = """from marin.core.executor import Step, executor_main


def eat(cfg, out):
    return len(bytearray(1 << 45))  # 32 TiB: refused by the allocator at once


executor_main([Step("replay/eat", eat, None)])"""


def notebook(path: Path, body: str = BODY, params: str | None = PARAMS, tagged: bool = True) -> Path:
    cells = ([nbformat.v4.new_code_cell(params)] if params is not None else []) + [nbformat.v4.new_code_cell(body)]
    nb = nbformat.v4.new_notebook(cells=cells)
    if tagged and params is not None:
        nb.cells[0].metadata["tags"] = ["parameters"]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "python3", "language": "python"}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def make_exp(d):
    notebook(d / "exp.ipynb")


def make_exp_oom(d):
    notebook(d / "exp.ipynb", OOM_BODY)


def make_exp_untagged(d):
    notebook(d / "exp.ipynb", tagged=False)


def make_exp_no_issue(d):
    notebook(d / "exp.ipynb", params="steps = 3")


def make_exp_broken_params(d):
    notebook(d / "exp.ipynb", params="steps = (3")


def make_exp_not_json(d):
    bytes_file(d / "exp.ipynb", b"{not json")


def make_exp_no_cells(d):
    bytes_file(d / "exp.ipynb", b"{}")


def make_script(d):
    bytes_file(d / "exp.py", b"print('hello')\n")


def make_exp_and_file(d):
    make_exp(d)
    make_a_file(d)


# --- checks on the folder after a case ----------------------------------------------------------------------------
def nothing_written(d: Path, output: str) -> None:
    "A dry run writes no report, no run card, no step output, no ledger record."
    assert not (d / "reports").exists(), sorted(p.name for p in (d / "reports").rglob("*"))
    assert not (d / "store").exists() or not list((d / "store").rglob("*.json")), list((d / "store").rglob("*"))


def target_recorded(d: Path, output: str) -> None:
    "The run SUCCEEDED with its missed target in the ledger; its executed notebook went to the reports folder."
    from marin.core.ledger import Ledger

    (m,) = Ledger(str(d / "store" / "ledger")).sql("SELECT metrics FROM runs WHERE kind = 'experiment'").metrics
    assert json.loads(m) == {"target/steps_above_5": False}, m
    assert len(list((d / "reports" / "exp").glob("*.ipynb"))) == 1


def failed_step_recorded(d: Path, output: str) -> None:
    "The step that ran out of memory is FAILED, with its reason, in its status file and in the ledger."
    from marin.core.ledger import Ledger

    (status,) = (d / "store" / "replay").glob("eat-*/.executor_status.json")
    assert json.loads(status.read_text())["status"] == "FAILED"
    (err,) = Ledger(str(d / "store" / "ledger")).sql("SELECT error FROM runs WHERE kind = 'step'").error
    assert "ran out of memory" in err, err


NANO = ("train", "--config", "nano")
CONFIG = ("train", "--config", "{d}/config.yaml", "--dry-run")
RUN = ("run", "{d}/exp.ipynb")

CASES = [
    # marin train: flags
    Case("train/steps-1e20-text", argv=(*NANO, "--steps", "1e20"), code=2, says=("--steps", "integer")),
    Case("train/steps-nan", argv=(*NANO, "--steps", "nan"), code=2, says=("--steps", "integer")),
    Case(
        "train/steps-1e20-int",
        argv=(*NANO, "--steps", "100000000000000000000"),
        code=2,
        says=("--steps: 100,000,000,000,000,000,000 steps", "int32 step counter"),
    ),
    Case("train/steps-negative", argv=(*NANO, "--steps", "-5"), code=2, says=("--steps: must be >= 1",)),
    Case("train/devices-negative", argv=(*NANO, "--devices", "-3"), code=2, says=("--devices: must be >= 0",)),
    Case(
        "train/devices-1e9",
        argv=(*NANO, "--devices", "1000000000", "--dry-run"),
        code=1,
        says=("1000000000 requested but 1 present", "does NOT fit"),
    ),
    Case(
        "train/steps-50-rescales-warmup",
        argv=(*NANO, "--steps", "50", "--dry-run"),
        expect="ok",
        says=("--steps 50: the config's warmup of 100 steps", "warmup scaled with the run to 3 steps"),
    ),
    # marin train: config fields
    Case("train/config-layers-1e9", argv=CONFIG, make=make_yaml_layers, code=1, says=("1000000000L", "does NOT fit")),
    Case(
        "train/config-d_model-nan",
        argv=CONFIG,
        make=make_yaml_d_model_nan,
        code=2,
        says=("config.yaml", "model.d_model", "nan"),
    ),
    Case(
        "train/config-steps-1e20-float",
        argv=CONFIG,
        make=make_yaml_steps_float,
        code=2,
        says=("config.yaml", "num_train_steps", "1e+20"),
    ),
    Case(
        "train/config-steps-1e20-int",
        argv=CONFIG,
        make=make_yaml_steps_int,
        code=2,
        says=("config.yaml: num_train_steps", "int32 step counter"),
    ),
    Case(
        "train/config-vocab-negative",
        argv=CONFIG,
        make=make_yaml_vocab_negative,
        code=2,
        says=("config.yaml", "vocab_size", "-5"),
    ),
    Case("train/config-warmup-negative", argv=CONFIG, make=make_yaml_warmup_negative, code=2, says=("warmup", ">= 0")),
    Case("train/config-batch-1e9", argv=CONFIG, make=make_yaml_batch, code=1, says=("does NOT fit",)),
    Case("train/config-not-yaml", argv=CONFIG, make=make_yaml_broken, code=2, says=("config.yaml", "line 2")),
    Case("train/config-missing", argv=CONFIG, code=2, says=("config.yaml", "no such file")),
    # a prefix that cannot be written: refused before any step starts, naming it and the fix
    Case(
        "prefix/read-only-train",
        argv=(*NANO, "--steps", "1"),
        env={"MARIN_PREFIX": READ_ONLY},
        code=2,
        says=(f"storage prefix {READ_ONLY} is not writable", "MARIN_PREFIX"),
    ),
    Case(
        "prefix/under-a-file-train",
        argv=(*NANO, "--steps", "1"),
        make=make_a_file,
        env={"MARIN_PREFIX": "{d}/file/store"},
        code=2,
        says=("file/store is not writable", "MARIN_PREFIX"),
    ),
    # marin scale
    Case("scale/flops-inf", argv=("scale", "--flops", "inf", "--dry-run"), code=2, says=("budget", "inf")),
    Case("scale/flops-nan", argv=("scale", "--flops", "nan", "--dry-run"), code=2, says=("budget", "nan")),
    Case("scale/flops-negative", argv=("scale", "--flops", "-1", "--dry-run"), code=2, says=("budget", "positive")),
    Case("scale/flops-1e300", argv=("scale", "--flops", "1e300", "--dry-run"), code=1, says=("does NOT fit",)),
    Case(
        "scale/tokens-per-param-nan",
        argv=("scale", "--flops", "1e20", "--tokens-per-param", "nan", "--dry-run"),
        code=2,
        says=("tokens_per_param", "nan"),
    ),
    Case(
        "scale/vocab-negative",
        argv=("scale", "--flops", "1e20", "--vocab-size", "-1", "--dry-run"),
        code=2,
        says=("vocab_size", "-1"),
    ),
    Case(
        "scale/devices-negative",
        argv=("scale", "--flops", "1e20", "--devices", "-4", "--dry-run"),
        code=2,
        says=("devices", ">= 0"),
    ),
    # marin run: refused before a kernel starts
    Case(
        "run/param-unknown",
        argv=(*RUN, "-p", "stepz", "3"),
        make=make_exp,
        code=2,
        says=("unknown parameter(s) stepz",),
    ),
    Case("run/param-int-1e20", argv=(*RUN, "-p", "steps", "1e20"), make=make_exp, code=2, says=("steps='1e20'", "int")),
    Case("run/param-int-nan", argv=(*RUN, "-p", "steps", "nan"), make=make_exp, code=2, says=("steps='nan'",)),
    Case("run/param-float-text", argv=(*RUN, "-p", "lr", "fast"), make=make_exp, code=2, says=("lr='fast'", "float")),
    Case("run/param-missing-value", argv=(*RUN, "-p", "steps"), make=make_exp, code=2, says=("missing the value",)),
    Case("run/notebook-missing", argv=RUN, code=2, says=("experiment not found",)),
    Case("run/notebook-a-script", argv=("run", "{d}/exp.py"), make=make_script, code=2, says=("a .ipynb notebook",)),
    Case(
        "run/notebook-not-json", argv=RUN, make=make_exp_not_json, code=2, says=("exp.ipynb: not a readable notebook",)
    ),
    Case(
        "run/notebook-no-cells", argv=RUN, make=make_exp_no_cells, code=2, says=("exp.ipynb: not a readable notebook",)
    ),
    Case("run/no-parameters-cell", argv=RUN, make=make_exp_untagged, code=2, says=("no cell tagged 'parameters'",)),
    Case("run/no-issue", argv=RUN, make=make_exp_no_issue, code=2, says=("must declare `issue`",)),
    Case("run/parameters-not-python", argv=RUN, make=make_exp_broken_params, code=2, says=("not valid Python",)),
    Case("run/cluster-bogus", argv=(*RUN, "--cluster", "moon"), make=make_exp, code=2, says=("--cluster 'moon'",)),
    Case(
        "prefix/read-only-run",
        argv=RUN,
        make=make_exp,
        env={"MARIN_PREFIX": READ_ONLY},
        code=2,
        says=(f"storage prefix {READ_ONLY} is not writable",),
    ),
    Case(
        "reports/under-a-file-run",
        argv=RUN,
        make=make_exp_and_file,
        env={"MARIN_REPORTS_DIR": "{d}/file/reports"},
        code=2,
        says=("reports folder", "is not writable", "MARIN_REPORTS_DIR"),
    ),
    # marin run: a kernel runs the notebook
    Case(
        "run/dry-run-prints-the-plan",
        argv=(*RUN, "--dry-run"),
        make=make_exp,
        expect="ok",
        says=("action  step", "run     replay/write", "1 to run, 0 cached, 0 skipped", "dry run complete"),
        check=nothing_written,
        seconds=120,
    ),
    Case(
        "run/missed-target-is-recorded-not-failed",
        argv=RUN,
        make=make_exp,
        expect="ok",
        says=("SUCCESS", "target/steps_above_5=False"),
        check=target_recorded,
        seconds=120,
    ),
    Case(
        "run/param-nan-refused-by-the-notebook",
        argv=(*RUN, "-p", "lr", "nan"),
        make=make_exp,
        code=1,
        says=("FAILED", "AssertionError: lr=nan must be in (0, 10)"),
        seconds=120,
    ),
    Case(
        "run/step-out-of-memory-is-failed",
        argv=RUN,
        make=make_exp_oom,
        code=1,
        says=("FAILED", "MemoryError: the step ran out of memory"),
        check=failed_step_recorded,
        seconds=120,
    ),
    # the ledger's commands
    Case("runs/list-limit-negative", argv=("runs", "list", "--limit", "-1"), code=2, says=("--limit -1",)),
    Case("runs/list-limit-1e20", argv=("runs", "list", "--limit", "100000000000000000000"), expect="ok"),
    Case("runs/show-unknown", argv=("runs", "show", "no-such-run"), code=2, says=("no run with id 'no-such-run'",)),
    Case("runs/sql-writes", argv=("runs", "sql", "DELETE FROM runs"), code=2, says=("SQL error",)),
    Case(
        "runs/sql-reads-a-file",
        argv=("runs", "sql", "SELECT * FROM read_csv('/etc/passwd')"),
        code=2,
        says=("read-only",),
    ),
    # `marin sample`'s flags are checked before a model loads (NaN and -1 used to mean greedy, a huge seed a traceback)
    *(
        Case(
            f"sample/{flag[2:]}-{value}", argv=("sample", "nowhere", flag, value), code=2, says=(flag, "Invalid value")
        )
        for flag, value in [
            ("--temperature", "nan"),
            ("--temperature", "-1"),
            ("--temperature", "inf"),
            ("--seed", "100000000000000000000"),
            ("--seed", "-1"),
            ("--top-k", "-1"),
            ("--max-tokens", "0"),
            ("--max-tokens", "1000000000000"),
        ]
    ),
    # `marin train --dry-run --target`: a slice the lab does not know, or a target without --dry-run, before anything
    Case("train/target-unknown", argv=(*NANO, "--dry-run", "--target", "v9x-4"), code=2, says=("--target", "v5e-8")),
    Case("train/target-garbage", argv=(*NANO, "--dry-run", "--target", "v5e-1e9"), code=2, says=("--target",)),
    Case("train/target-without-dry-run", argv=(*NANO, "--target", "v5e-4"), code=2, says=("--target", "--dry-run")),
    Case("train/slices-0", argv=(*NANO, "--dry-run", "--target", "v5e-4", "--slices", "0"), code=2, says=("--slices",)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_replay(case, replayed):
    replayed.check(case)
