"""The ledger under real concurrency: three processes append with frequent log-structured compaction while a fourth
queries; no append or query fails, and every record is there exactly once at the end."""

import subprocess, sys, textwrap
from marin.core.ledger import Ledger

WRITER = textwrap.dedent("""
    import sys
    from marin.core.ledger import Ledger, RunRecord, utcnow
    L = Ledger(sys.argv[1]); L.COMPACT_AFTER = 4; L.MERGE_FANIN = 2      # compact often: races are the point
    for i in range(int(sys.argv[3])):
        L.append(RunRecord(run_id=f"{sys.argv[2]}-{i}", kind="step", status="SUCCESS", started_at=utcnow()))
""")
READER = textwrap.dedent("""
    import sys, time
    from marin.core.ledger import Ledger
    L = Ledger(sys.argv[1]); L.COMPACT_AFTER = 4
    n, t = 0, time.time()
    while time.time() - t < float(sys.argv[2]):
        L.sql("SELECT count(*) AS n FROM runs"); n += 1
    print("QUERIES", n)
""")


def test_concurrent_appends_compactions_and_queries(tmp_path):
    root, n = str(tmp_path / "ledger"), 60
    (tmp_path / "w.py").write_text(WRITER)
    (tmp_path / "r.py").write_text(READER)
    procs = [
        subprocess.Popen(
            [sys.executable, str(tmp_path / "w.py"), root, f"w{k}", str(n)], stderr=subprocess.PIPE, text=True
        )
        for k in range(3)
    ]
    reader = subprocess.Popen(
        [sys.executable, str(tmp_path / "r.py"), root, "8"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    out, err = reader.communicate(timeout=300)
    assert reader.returncode == 0, err[-3000:]
    assert int(out.split("QUERIES")[1]) > 0
    L = Ledger(root)
    runs = L.sql("SELECT run_id FROM runs")
    assert len(runs) == 3 * n and set(runs.run_id) == {f"w{k}-{i}" for k in range(3) for i in range(n)}
    assert len(L.sql("SELECT * FROM records")) == 3 * n
    L.compact(full=True)  # (0 when the writers already left one file)
    assert len(L._files()) == 1
    import pyarrow.parquet as pq

    assert pq.read_metadata(L._files()[0]).num_rows == 3 * n  # the full fold leaves no duplicate rows
