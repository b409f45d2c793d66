"""Cluster benchmark: a packed sweep of tiny training runs on a real local Ray cluster against the same steps one at a
time, and Ray's per-step overhead against the local executor.

    .venv/bin/python bench/cluster_sweep.py [--points 6] [--train-steps 40] [--noop 20] [--placement balanced|ray] [--worker-pool 2]

Cluster: a head (no CPUs) and 2 worker nodes on loopback with 1 CPU and 1 simulated device (`device`) each, i.e. the
2 cores of this machine; each node is pinned to its own core (`NodeSpec.cpu_affinity`, unless `--no-pin`), so a node
really has the one CPU it advertises, as the machines of a real cluster do. Each node keeps `--worker-pool` idle Ray
workers (`RAY_num_workers_soft_limit`; Ray's default is one per CPU, and it stops the extra workers a packed node
needs between steps). Packed: every sweep point asks for half a device and half a CPU (4 at a time), placed by the
backend's `--placement` rule; sequential: the same steps with `max_parallel=1` on the same cluster. Prints Markdown
tables, with every attempt's node and start/end times."""

import argparse, dataclasses, os, sys, tempfile, time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def noop(cfg, out):
    "A step that does nothing (measures the scheduling overhead)."
    return None


def warm(cfg, out):
    "Import the training stack, so each worker pays JAX's import once, before either run (both then start warm)."
    import marin.train.trainer  # noqa: F401

    return None


@dataclasses.dataclass(frozen=True)
class NoopConfig:
    index: int = 0


def sweep(points: int, train_steps: int):
    from marin.core.config import versioned
    from marin.core.executor import Step
    from marin.models.transformer import LlamaConfig
    from marin.train.checkpoint import CheckpointConfig
    from marin.train.optim import OptimizerConfig
    from marin.train.trainer import CharDataConfig, TrainConfig, train
    from marin.cluster.ray_backend import Resources

    lrs = [1e-3 * (1.5**i) for i in range(points)]
    return [
        Step(
            f"sweep/lr{i}",
            train,
            TrainConfig(
                model=LlamaConfig(vocab_size=65, seq_len=32, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64),
                data=CharDataConfig(batch_size=8, seq_len=32),
                num_train_steps=train_steps,
                optimizer=OptimizerConfig(learning_rate=lr, warmup=3),
                tracker="disabled",
                checkpoint=CheckpointConfig(every=0),
                progress=False,
                log_every=10,
            ),
            resources=Resources(cpus=0.5, custom={"device": 0.5}),
        )
        for i, lr in enumerate(lrs)
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=6)
    ap.add_argument("--train-steps", type=int, default=40)
    ap.add_argument("--noop", type=int, default=20)
    ap.add_argument("--no-pin", dest="pin", action="store_false", help="let every node use every core")
    ap.add_argument(
        "--placement", default="balanced", choices=("balanced", "ray"), help="RayBackend.placement of the packed run"
    )
    ap.add_argument(
        "--worker-pool", type=int, default=2, help="idle Ray workers each node keeps (0: Ray's default, one per CPU)"
    )
    a = ap.parse_args()
    os.environ.update(MARIN_TRACKER="disabled", JAX_PLATFORMS="cpu", WANDB_MODE="offline")
    sys.path.insert(0, str(HERE))
    from marin.cluster.local import LocalRayCluster, NodeSpec
    from marin.cluster.ray_backend import RayBackend, Resources
    from marin.core.executor import Executor, Step

    root = Path(tempfile.mkdtemp(prefix="cluster-bench-"))
    env = {"PYTHONPATH": str(HERE), "JAX_PLATFORMS": "cpu", "MARIN_TRACKER": "disabled"}
    t0 = time.time()
    with LocalRayCluster(root / "ray", env=env) as c:
        pin = (lambda core: (core,)) if a.pin and (os.cpu_count() or 1) >= 2 else (lambda core: ())
        pool = {"RAY_num_workers_soft_limit": str(a.worker_pool)} if a.worker_pool else {}
        c.start(
            [
                NodeSpec("a", num_cpus=1, resources={"device": 1}, cpu_affinity=pin(0), env=pool),
                NodeSpec("b", num_cpus=1, resources={"device": 1}, cpu_affinity=pin(1), env=pool),
            ]
        )
        c.connect()
        start_s = time.time() - t0
        # warm the worker pool once (process start + imports of the training stack are paid once per worker, not per step)
        Executor(str(root / "warm"), backend=RayBackend(verbose=False), verbose=False).run(
            [
                Step(f"warm/{i}", warm, NoopConfig(i), resources=Resources(cpus=0.5, custom={"device": 0.5}))
                for i in range(4)
            ]
        )
        rows, timelines = [], []
        names = {n["NodeID"]: n["Labels"].get("marin-node", n["NodeID"][:8]) for n in __import__("ray").nodes()}
        for label, par, placement in (
            ("sequential (max_parallel=1)", 1, "ray"),
            (f"packed (0.5 device each, placement={a.placement})", 0, a.placement),
        ):
            b = RayBackend(max_parallel=par, placement=placement, verbose=False)
            t = time.time()
            Executor(str(root / f"sweep-{par}"), backend=b, verbose=False).run(sweep(a.points, a.train_steps))
            wall = time.time() - t
            s = b.report.summary()
            rows.append((label, wall, s["utilisation"], s["max_concurrency"]))
            timelines.append(
                (
                    label,
                    [
                        (
                            x.step,
                            names.get(x.node_id, x.node_id[:8]),
                            x.started - b.report.started,
                            x.ended - b.report.started,
                        )
                        for x in b.report.attempts
                    ],
                )
            )
        seq, packed = rows[0][1], rows[1][1]
        # per-step overhead: no-op steps one at a time on Ray vs the local executor
        noops = lambda: [Step(f"noop/{i}", noop, NoopConfig(i), resources=Resources(cpus=0.5)) for i in range(a.noop)]
        Executor(str(root / "noop-warm"), backend="local", verbose=False).run(
            [Step("warm", noop, NoopConfig(-1))]
        )  # first-call costs (git, versions)
        t = time.time()
        Executor(str(root / "noop-ray"), backend=RayBackend(max_parallel=1, verbose=False), verbose=False).run(noops())
        ray_noop = time.time() - t
        t = time.time()
        Executor(str(root / "noop-local"), backend="local", verbose=False).run(noops())
        local_noop = time.time() - t
        load = os.getloadavg()[0]
    print(
        f"\nCluster: head + 2 worker nodes (1 CPU, 1 device each{', each pinned to its own core' if a.pin else ', not pinned'}) on loopback, started in {start_s:.1f}s; "
        f"{a.points} sweep points x {a.train_steps} training steps (d_model 32, 2 layers); 1-min load average at the end: {load:.1f}\n"
    )
    print("| run | wall (s) | utilisation (busy / available device-s) | max concurrent steps |")
    print("|---|---|---|---|")
    for label, wall, u, mc in rows:
        print(f"| {label} | {wall:.1f} | {u:.2f} | {mc} |")
    print(f"\npacked / sequential wall time: **{packed / seq:.0%}** (target <= 60%)\n")
    for label, tl in timelines:
        print(
            f"{label}: "
            + ", ".join(
                f"{st.split('/')[-1]}@{node} {t0:.1f}-{t1:.1f}s" for st, node, t0, t1 in sorted(tl, key=lambda x: x[2])
            )
        )
    print()
    print("| per-step cost of a no-op step | ms |")
    print("|---|---|")
    print(f"| local executor | {1000 * local_noop / a.noop:.0f} |")
    print(f"| Ray backend (one at a time) | {1000 * ray_noop / a.noop:.0f} |")
    print(f"| Ray overhead per step | {1000 * (ray_noop - local_noop) / a.noop:.0f} |")


if __name__ == "__main__":
    main()
