"""Benchmarks of the lab's spine: executor overhead on a cached 1,000-step DAG, ledger append/query for 10,000 records,
and log-structured compaction against folding the whole ledger at every compaction.

Run: .venv/bin/python bench/core_executor.py   (prints a Markdown table; numbers go to BENCHMARKS.md)
Each measurement is shown beside a baseline measured in the same run (the bare I/O the operation cannot avoid).
"""

import io, json, os, sys, tempfile, time
from dataclasses import dataclass
import pyarrow as pa, pyarrow.parquet as pq

from marin.core import storage
from marin.core.config import versioned
from marin.core.executor import Executor, Step, STATUS_FILE
from marin.core.ledger import Ledger, RunRecord, utcnow, LEDGER_SCHEMA, _row


@dataclass(frozen=True)
class Cfg:
    i: int = versioned(0)
    a: object = None
    b: object = None


def write_one(cfg: Cfg, out: str):
    storage.write_text(storage.join(out, "x.txt"), str(cfg.i))


def build_dag(n: int) -> list[Step]:
    steps = []
    for i in range(n):
        steps.append(
            Step(f"bench/s{i}", write_one, Cfg(i, steps[i - 1] if i else None, steps[i // 2] if i > 1 else None))
        )
    return steps


def best(f, repeat=3) -> float:
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def bench_executor(n: int = 1000) -> list[tuple]:
    with tempfile.TemporaryDirectory() as d:
        steps = build_dag(n)
        ex = Executor(d, verbose=False)
        t0 = time.perf_counter()
        ex.run([steps[-1]])
        first = time.perf_counter() - t0
        cached = best(lambda: ex.run([build_dag(n)[-1]]))  # fresh Step objects: hashing is part of the cost
        paths = [ex.output_path(s) for s in steps]
        bare = best(lambda: [json.load(open(os.path.join(p, STATUS_FILE))) for p in paths])
        return [
            (
                "executor: first run of a 1,000-step DAG (per step, writes + ledger)",
                f"{first / n * 1e3:.2f} ms",
                "",
                "",
            ),
            (
                "executor: cached 1,000-step DAG (per step: hash + plan + status read)",
                f"{cached / n * 1e3:.3f} ms",
                f"{bare / n * 1e3:.3f} ms (json.load of each status file)",
                f"{cached / bare:.1f}×",
            ),
        ]


def bench_ledger(n: int = 10_000) -> list[tuple]:
    with tempfile.TemporaryDirectory() as d:
        L = Ledger(d)
        recs = [
            RunRecord(
                run_id=f"r{i}",
                kind="step",
                status="SUCCESS" if i % 7 else "FAILED",
                started_at=utcnow(),
                ended_at=utcnow(),
                step=f"step{i % 50}",
                experiment="bench",
                config={"i": i},
                metrics={"train/loss": i / n},
            )
            for i in range(n)
        ]
        t0 = time.perf_counter()
        for r in recs:
            L.append(r)
        append = (time.perf_counter() - t0) / n
        # baseline: the same rows written as one Parquet table in one go
        base = (
            best(
                lambda: pq.write_table(
                    pa.Table.from_pylist([_row(r) for r in recs], schema=LEDGER_SCHEMA), io.BytesIO()
                ),
                1,
            )
            / n
        )
        q = "SELECT status, count(*) AS n, avg(CAST(metrics->>'train/loss' AS DOUBLE)) AS loss FROM runs GROUP BY status"
        t0 = time.perf_counter()
        res = L.sql(q)
        first = time.perf_counter() - t0
        assert int(res.n.sum()) == n and len(L._files()) <= L.COMPACT_AFTER + 1
        after = best(lambda: L.sql(q))
        L.compact()
        one_file = L._files()[0]
        import duckdb

        bare_q = best(
            lambda: duckdb.sql(f"SELECT status, count(*) FROM read_parquet('{one_file}') GROUP BY status").df()
        )
        return [
            (
                "ledger: append one record (one atomic Parquet file; amortised auto-compaction every 128)",
                f"{append * 1e3:.2f} ms",
                f"{base * 1e3:.4f} ms (row in one bulk write)",
                f"{append / base:.0f}×",
            ),
            ("ledger: first query after 10,000 appends", f"{first:.2f} s", "", ""),
            (
                "ledger: query 10,000 records after compaction (dedup views)",
                f"{after * 1e3:.1f} ms",
                f"{bare_q * 1e3:.1f} ms (bare DuckDB group-by on the file)",
                f"{after / bare_q:.1f}×",
            ),
        ]


class FullCompactionLedger(Ledger):
    "The ledger before log-structured compaction: every auto-compaction folds the whole ledger into one file."

    def compact(self, full: bool = False) -> int:
        return super().compact(full=True)


def bench_compaction(n: int = 10_000) -> list[tuple]:
    "Amortised append cost and rows rewritten by compaction over n appends: log-structured vs folding everything."
    out = {}
    for name, cls in (("log-structured", Ledger), ("full", FullCompactionLedger)):
        with tempfile.TemporaryDirectory() as d:
            L, rewritten = cls(d), [0]
            fold = L._fold

            def counting_fold(files, level, fold=fold, rewritten=rewritten):
                rewritten[0] += sum(pq.read_metadata(f).num_rows for f in files)
                fold(files, level)

            L._fold = counting_fold
            t0 = time.perf_counter()
            for i in range(n):
                L.append(RunRecord(run_id=f"r{i}", kind="step", status="SUCCESS", started_at=utcnow(), config={"i": i}))
            out[name] = ((time.perf_counter() - t0) / n, rewritten[0], len(L._files()))
            assert len(L.sql("SELECT * FROM records")) == n
    (a, ra, fa), (b, rb, fb) = out["log-structured"], out["full"]
    return [
        (
            f"ledger: {n:,} appends, amortised per append (log-structured compaction)",
            f"{a * 1e3:.2f} ms",
            f"{b * 1e3:.2f} ms (fold everything every 128)",
            f"{a / b:.2f}×",
        ),
        (
            f"ledger: rows rewritten by compaction over {n:,} appends",
            f"{ra:,} ({ra / n:.1f} per record; {fa} files left)",
            f"{rb:,} ({rb / n:.1f} per record; {fb} files left)",
            f"{ra / rb:.3f}×",
        ),
    ]


if __name__ == "__main__":
    rows = bench_executor() + bench_ledger() + bench_compaction()
    print("| measurement | ours | baseline (same run) | ratio |\n|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
