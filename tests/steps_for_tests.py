"Step functions and configs used by the executor tests (importable from subprocesses)."

import json, os, sys, time
from dataclasses import dataclass, field
from marin.core import storage
from marin.core.config import versioned
from marin.core.executor import Executor, Step


@dataclass(frozen=True)
class SourceConfig:
    n: int = versioned(5)
    log: str = ""  # where each execution appends a line (not versioned)
    sleep_s: float = 0.0
    marker: str = ""  # file created when the step starts


def make_numbers(cfg: SourceConfig, out: str):
    if cfg.marker:
        open(cfg.marker, "w").write(str(os.getpid()))
    if cfg.log:
        with open(cfg.log, "a") as f:
            f.write(f"source {os.getpid()}\n")
    time.sleep(cfg.sleep_s)
    storage.write_json(storage.join(out, "numbers.json"), list(range(cfg.n)))
    return {"data/n": cfg.n}


@dataclass(frozen=True)
class ScaleConfig:
    numbers: object = None
    factor: int = versioned(2)
    log: str = ""


def scale(cfg: ScaleConfig, out: str):
    if cfg.log:
        with open(cfg.log, "a") as f:
            f.write(f"scale{cfg.factor} {os.getpid()}\n")
    xs = storage.read_json(storage.join(cfg.numbers, "numbers.json"))
    storage.write_json(storage.join(out, "scaled.json"), [x * cfg.factor for x in xs])


def dag(log: str, n: int = 5, f1: int = 2, f2: int = 3, sleep_s: float = 0.0, marker: str = ""):
    src = Step("source", make_numbers, SourceConfig(n=n, log=log, sleep_s=sleep_s, marker=marker))
    return (
        src,
        Step("scale-a", scale, ScaleConfig(numbers=src, factor=f1, log=log)),
        Step("scale-b", scale, ScaleConfig(numbers=src, factor=f2, log=log)),
    )


if __name__ == "__main__":
    # python steps_for_tests.py PREFIX LOG SLEEP MARKER : run the DAG once (used by the race and kill tests)
    prefix, log, sleep_s, marker = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    src, a, b = dag(log, sleep_s=sleep_s, marker=marker)
    r = Executor(prefix, lease_seconds=float(os.environ.get("LEASE", "3")), poll_seconds=0.05).run([a, b])
    print(json.dumps(r.statuses))
