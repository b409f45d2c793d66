"""The dashboard's runs table over a ledger of 10,000 runs (#53): the time from request to JSON for the first page
(1,000 rows, newest first), a filtered and metric-sorted page, and the whole table (every run); beside it, the bare
`SELECT * FROM runs` the ledger answers for `marin runs list`, measured in the same run.

Run: .venv/bin/python bench/dashboard_load.py [N_RUNS]   (prints a Markdown table; numbers go to BENCHMARKS.md)
The ledger is written as `marin` writes it (appends of 100 records, then the compaction a long-lived writer does), with
the record shapes of real runs: experiments with configs and headline metrics, training and eval steps, failures.
"""

import datetime as dt, json, random, sys, tempfile, time
from fastapi.testclient import TestClient
from marin.core.dashboard import dashboard_app
from marin.core.ledger import Ledger, RunRecord


def build(root: str, n: int) -> Ledger:
    led = Ledger(root)
    rng = random.Random(0)
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    batch = []
    for i in range(n):
        kind = rng.choice(["experiment", "train", "eval", "tokenize"])
        failed = rng.random() < 0.05
        cfg = {"model": {"n_layers": rng.choice([2, 4, 8]), "d_model": rng.choice([64, 128, 256])},
               "optimizer": {"lr": rng.choice([1e-3, 3e-3, 1e-2]), "warmup": 0.1}, "seed": i % 5,
               "data": {"path": f"/data/shards/{i % 50}", "seq_len": 256, "batch_size": 8}}  # fmt: skip
        metrics = {"train/final_loss": rng.uniform(2, 4), "throughput/tokens_per_s": rng.uniform(1e3, 1e5),
                   "throughput/mfu": rng.uniform(0.1, 0.5), "eval/val/bpb": rng.uniform(0.8, 1.5), "train/steps": 300}  # fmt: skip
        start = t0 + dt.timedelta(minutes=i)
        batch.append(
            RunRecord(
                run_id=f"{kind}-{start:%Y%m%d-%H%M%S}-{i:06x}", kind="experiment" if kind == "experiment" else "step",
                experiment=f"exp{i % 20}" if kind == "experiment" else "", step="" if kind == "experiment" else f"{kind}/run{i % 7}",
                status="FAILED" if failed else "SUCCESS", started_at=start, ended_at=start + dt.timedelta(seconds=rng.uniform(5, 500)),
                config=cfg, metrics=None if failed else metrics, headline=["eval/val/bpb"] if kind == "experiment" else None,
                issue=f"#{i % 40}", error="RuntimeError: diverged at step 17" if failed else "",
                traceback="Traceback (most recent call last):\n" + "  frame\n" * 30 if failed else "",
                git_commit="0123456789abcdef0123456789abcdef01234567", hardware={"host": "h", "cpu_count": 2},
            )
        )  # fmt: skip
        if len(batch) == 100:
            led.append(*batch)
            batch = []
    led.append(*batch)
    led.compact()
    return led


def best(f, repeat: int = 5) -> float:
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return min(ts)


def main(n: int = 10_000) -> None:
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        led = build(d, n)
        built = time.perf_counter() - t
        client = TestClient(dashboard_app(led))
        get = lambda url: (lambda r: (r.raise_for_status(), r.json())[1])(client.get(url))
        assert get("/api/runs")["total"] == n
        rows = [
            ("runs table, first page (1,000 of them, newest first)", "/api/runs"),
            ("the same, filtered (train steps, n_layers=4, final loss < 3) and sorted by a metric",
             "/api/runs?family=train&config=model.n_layers%3D4&metric=train/final_loss%3C3&sort=metric:train/final_loss"),
            ("every run in one page", f"/api/runs?limit={n}"),
            ("the filters' values (experiments, kinds, statuses, issues)", "/api/facets"),
        ]  # fmt: skip
        print(f"ledger: {n:,} runs in {len(led._files())} Parquet files (built in {built:.1f} s)\n")
        print("| request | best of 5 |\n|---|---|")
        for label, url in rows:
            print(f"| {label} (`GET {url.split('?')[0]}`) | {best(lambda: get(url)) * 1000:.0f} ms |")
        print(
            f"| baseline: `Ledger.sql('SELECT * FROM runs')` | {best(lambda: led.sql('SELECT * FROM runs')) * 1000:.0f} ms |"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)
