"""The whole `marin run experiments_nb/shakespeare_char.ipynb`, before and after, alternated (issue #22).

What the issue times as "the whole marin run": papermill, the imports, the training step (the trainer's wall is
also read from the run's metrics), the sample, the plot, the ledger and the rendered page. Each round runs the
experiment three times, each in fresh storage and report folders: "before" (a checkout of an older commit,
`--before DIR`: its own notebook, its `marin` on PYTHONPATH, this checkout's environment), "after, cold" (this
checkout with an empty compilation cache) and "after, warm" (the cache the cold run filled). Rounds alternate so
that a VM whose speed drifts hits before and after alike; the table gives each run and the ratio of each after to
the before of its round.

    git worktree add /tmp/before 035fdad
    .venv/bin/python bench/shakespeare_marin_run.py --before /tmp/before [--rounds 2]"""

import argparse, json, os, subprocess, sys, tempfile, time
from pathlib import Path

NOTEBOOK = "experiments_nb/shakespeare_char.ipynb"
HERE = Path(__file__).resolve().parent.parent


def cell_seconds(executed: Path) -> dict:
    "Papermill's duration of the training cell (`executor_main`) and the sampling cell (`generate`)."
    cells = [c for c in json.loads(executed.read_text())["cells"] if c["cell_type"] == "code"]
    secs = lambda word: sum(c["metadata"]["papermill"]["duration"] for c in cells if word in "".join(c["source"]))
    return {"train_cell_s": secs("executor_main("), "sample_cell_s": secs("generate(")}


def run(label: str, tree: Path, tmp: Path, cache: Path) -> dict:
    out = Path(tempfile.mkdtemp(dir=tmp))
    env = dict(os.environ, MARIN_PREFIX=str(out / "store"), MARIN_REPORTS_DIR=str(out / "reports"))
    env.update(MARIN_COMPILATION_CACHE=str(cache), MARIN_SHARED_DATA=str(HERE.parent / "shared" / "data"))
    if tree != HERE:
        env["PYTHONPATH"] = str(tree)  # ahead of the editable install's finder, which sys.meta_path appends
    marin = Path(sys.executable).parent / "marin"
    t, load = time.perf_counter(), os.getloadavg()[0]
    p = subprocess.run([str(marin), "run", NOTEBOOK], cwd=tree, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t
    if p.returncode:
        raise SystemExit(f"{label} failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    metrics = dict(kv.split("=") for kv in p.stdout.split("metrics:")[1].split()[0:4] if "=" in kv)
    executed = next((out / "reports" / "shakespeare_char").glob("*.ipynb"))
    r = {"label": label, "wall_s": wall, "trainer_s": float(metrics["throughput/wall_s"].rstrip(",")), "load": load}
    r.update(val_loss=float(metrics["eval/val/loss"].rstrip(",")), **cell_seconds(executed))
    print(json.dumps(r), flush=True)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="a checkout of the older commit (git worktree add DIR REV)")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    print(f"load {os.getloadavg()}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for i in range(a.rounds):
            cache = tmp / f"jax-cache-{i}"
            b = run("before", Path(a.before).resolve(), tmp, tmp / "unused")
            rows += [(b, b)] + [(run(label, HERE, tmp, cache), b) for label in ("after, cold", "after, warm")]
    print("\n| run | marin run s | trainer s | training cell s | sample cell s | val loss | vs before (marin run) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r, b in rows:
        print(
            f"| {r['label']} | {r['wall_s']:.1f} | {r['trainer_s']:.1f} | {r['train_cell_s']:.1f} | "
            f"{r['sample_cell_s']:.1f} | {r['val_loss']:.3f} | {b['wall_s'] / r['wall_s']:.2f}x |"
        )
    print(f"load at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()
