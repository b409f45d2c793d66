"""The executor's Ray backend on a REAL Ray cluster on the loopback interface: a head (no CPUs) and worker nodes, each
its own `ray start --block` process started here and ended by process id at the end.

Nodes: `a` and `b`, 2 logical CPUs and one simulated accelerator (`device`) each. The flaky steps of the exclusion
test die on node `b` like on a broken machine. The training test kills a node, so it runs last."""

import glob, json, os, sys, threading, time
import equinox as eqx, jax, numpy as np
from pathlib import Path
import pytest

ray = pytest.importorskip("ray")
TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

from marin.cluster.local import LocalRayCluster, NodeSpec
from marin.cluster.ray_backend import RayBackend, Resources
from marin.core import storage
from marin.core.executor import Executor, Step, executor_main, read_status, SUCCESS, FAILED
import cluster_steps as cs


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray")
    env = {
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "JAX_PLATFORMS": "cpu",
        "MARIN_TRACKER": "disabled",
        "WANDB_MODE": "offline",
    }
    # a stray ~/.ray/auth_token (Ray writes one whenever some `ray.init()` starts a local cluster) must not matter:
    # plant one that differs from the cluster's own token
    home = root / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("stray-token-that-is-not-the-clusters")
    mp = pytest.MonkeyPatch()
    mp.setenv("HOME", str(home))
    env["HOME"] = str(home)
    c = LocalRayCluster(root, env=env)
    try:
        c.start(
            [NodeSpec("a", num_cpus=2, resources={"device": 1}), NodeSpec("b", num_cpus=2, resources={"device": 1})]
        )
        c.connect()
        yield c
    finally:
        c.stop()
        mp.undo()


@pytest.fixture
def store(tmp_path, monkeypatch, cluster):
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path / "store"))
    monkeypatch.setenv("MARIN_LEASE_SECONDS", "5")
    monkeypatch.setenv("MARIN_TRACKER", "disabled")
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    return tmp_path


def node_names(cluster) -> dict[str, str]:
    return {v: k for k, v in cluster.alive_nodes().items()}


def test_sweep_packs_fractional_devices_and_equals_local(cluster, store):
    "6 tiny steps at half a device each run 4 at a time on 2 devices; outputs, hashes and metrics equal the local backend's."

    def sweep(seconds):
        points = [
            Step(
                f"sweep/p{i}",
                cs.sweep_point,
                cs.SweepConfig(index=i, seconds=seconds),
                resources=Resources(cpus=0.5, custom={"device": 0.5}),
            )
            for i in range(6)
        ]
        return Step("sweep/table", cs.gather, cs.GatherConfig(points=tuple(points)), resources=Resources(cpus=0.25))

    table = sweep(2.0)  # each point holds its slot 2 s: time for 4 of them to overlap on the cluster
    backend = RayBackend(verbose=True)
    ex = Executor(str(store / "ray"), backend=backend, verbose=False)
    r = ex.run([table])
    assert sorted(r.statuses.values()) == [SUCCESS] * 7, r.statuses
    rep = backend.report
    s = rep.summary()
    print("sweep on ray:", s)
    assert rep.max_concurrency() >= 2, rep.table()
    assert s["device_resource"] == "device" and 0 < s["utilisation"] <= 1
    # every attempt is in the ledger with its node, attempt number and timings
    led = ex.ledger.sql(
        "SELECT step, attempt, retries, hardware->>'ray_node_id' AS node, duration_s FROM runs WHERE status='SUCCESS'"
    )
    assert len(led) == 7 and set(led.attempt) == {1} and set(led.retries) == {0}
    assert led.node.str.len().min() == 56 and (led.duration_s > 0).all()
    assert set(led.node) <= set(cluster.alive_nodes().values())
    # the local backend gives the same outputs: same names (hashes of configs), same content hashes, same metrics
    # (its points hold no slot: `seconds` is not versioned, so they are the same steps, and one after another they
    # would only add 12 s)
    loc = Executor(str(store / "local"), backend="local", verbose=False)
    rl = loc.run([sweep(0.0)])
    assert {k for k in rl.statuses} == {k for k in r.statuses}
    for name in r.statuses:
        assert read_status(r.outputs[name])["output_hash"] == read_status(rl.outputs[name])["output_hash"], name
    q = "SELECT step, metrics FROM runs ORDER BY step"
    assert ex.ledger.sql(q).equals(loc.ledger.sql(q))
    # a second run on the cluster is fully cached and submits nothing
    r2 = ex.run([table])
    assert set(r2.statuses.values()) == {"cached"} and backend.report.attempts == []


def test_balanced_placement_spreads_equal_steps(cluster, store):
    "placement='balanced': 6 equal half-device steps on 2 one-device nodes go 3 + 3 (Ray's own placement may give 4 + 2)."
    points = [
        Step(
            f"spread/p{i}",
            cs.sweep_point,
            cs.SweepConfig(index=100 + i, seconds=1.5),
            resources=Resources(cpus=0.5, custom={"device": 0.5}),
        )
        for i in range(6)
    ]
    backend = RayBackend(placement="balanced", verbose=True)
    r = Executor(str(store / "ray"), backend=backend, verbose=False).run(points)
    assert set(r.statuses.values()) == {SUCCESS}, r.statuses
    per_node = {}
    for a in backend.report.attempts:
        per_node[a.node_id] = per_node.get(a.node_id, 0) + 1
    assert sorted(per_node.values()) == [3, 3], backend.report.table()
    assert backend.report.max_concurrency() >= 2


def test_multihost_jax_step(cluster, store):
    "A 2-host step: two Ray actors join one jax.distributed process group (CPU, gloo) and reduce a sharded array."
    step = Step(
        "allreduce",
        cs.allreduce,
        cs.AllReduceConfig(n=8),
        resources=Resources(cpus=0.5, hosts=2, require_labels={"marin-node": "a"}),
    )
    backend = RayBackend(multihost_strategy="PACK", verbose=True)
    ex = Executor(str(store / "mh"), backend=backend, verbose=False)
    r = ex.run([step])
    assert r.statuses[step.output_name] == SUCCESS
    out = storage.read_json(storage.join(r[step], "result.json"))
    assert out == {"process_count": 2, "device_count": 2, "ids": [0, 1], "sum": 28.0}
    rec = ex.ledger.sql("SELECT hardware->>'process_count' AS pc, metrics->>'system/process_count' AS m FROM runs")
    assert list(rec.pc) == ["2"] and list(rec.m) == ["2"]


def test_multihost_training_writes_sharded_orbax_checkpoints(cluster, store):
    """A 2-host training step (fsdp over the two processes) with format='orbax': each process writes its own shards,
    process 0 alone writes the run's files, and one process reads the model back: the 1-process run's, within float tolerance."""
    from cluster_train_steps import tiny_train_config
    from marin.train.checkpoint import CheckpointConfig, latest_checkpoint
    from marin.train.sharding import MeshConfig
    from marin.models.io import load_model
    from marin.train.trainer import train

    cfg = tiny_train_config(steps=6).replace(
        mesh=MeshConfig(data=1, fsdp=2), checkpoint=CheckpointConfig(every=3, keep_last=2, format="orbax")
    )
    step = Step("mh-train", train, cfg, resources=Resources(cpus=0.5, hosts=2, require_labels={"marin-node": "a"}))
    r = Executor(str(store / "mh"), backend=RayBackend(multihost_strategy="PACK", verbose=True), verbose=False).run(
        [step]
    )
    assert r.statuses[step.output_name] == SUCCESS
    out = Path(r[step])
    ck = latest_checkpoint(str(out / "checkpoints"))
    assert ck[0] == 6 and {"ocdbt.process_0", "ocdbt.process_1"} <= set(os.listdir(Path(ck[1]) / "state.orbax"))
    assert [json.loads(l)["step"] for l in (out / "history.jsonl").read_text().splitlines()] == list(
        range(6)
    )  # one writer
    ref_step = Step("ref-train", train, cfg.replace(mesh=MeshConfig(data=1, devices=1)))
    ref = Executor(str(store / "ref"), backend="local", verbose=False).run([ref_step])
    a, b = (jax.tree.leaves(eqx.filter(load_model(p)[0], eqx.is_array)) for p in (str(out), ref[ref_step]))
    assert max(float(np.abs(np.asarray(x) - np.asarray(y)).max()) for x, y in zip(a, b)) < 1e-4


def test_secrets_stay_out_of_workers_and_ledger(cluster, store, monkeypatch):
    "Planted secrets in the driver's environment: not forwarded to workers, never in the ledger or any output file."
    secrets = {
        "WANDB_API_KEY": "planted-wandb-7f3a9c",
        "AWS_SECRET_ACCESS_KEY": "planted-aws-0b1e77",
        "MARIN_TEST_TOKEN": "planted-marin-42aa19",
        "HF_TOKEN": "planted-hf-5c5c5c",
    }
    for k, v in secrets.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("MARIN_CLUSTER", "ray")  # the backend comes from the settings, the address from RAY_ADDRESS
    probe = Step("probe", cs.env_probe, cs.ProbeConfig(names=tuple(secrets)), resources=Resources(cpus=0.25))
    r = executor_main([probe], prefix=str(store / "sec"), experiment="secrets")
    assert storage.read_json(storage.join(r[probe], "seen.json")) == {k: False for k in secrets}
    ex = Executor(str(store / "sec"), backend="local", verbose=False)
    rec = ex.ledger.sql("SELECT hardware->>'ray_node_id' AS node, metrics FROM runs WHERE status='SUCCESS'")
    assert len(rec) == 1 and len(rec.node[0]) == 56  # it ran on the cluster
    blobs = b"".join(
        Path(f).read_bytes() for f in glob.glob(str(store / "sec" / "**" / "*"), recursive=True) if Path(f).is_file()
    )
    assert len(blobs) > 1000
    for v in [*secrets.values(), cluster.address, cluster.token_path.read_text()]:  # nor the cluster's own auth token
        assert v.encode() not in blobs, f"{v} was written under the prefix"


def test_data_stages_run_as_ray_tasks_with_the_bytes_of_one_local_worker(cluster, store):
    """The data chain of tests/test_data_scale.py (import, decontamination, quality, dedup, tokenizer, tokens) from this
    process, which is connected to the cluster: every stage's shards go out as Ray tasks (`RayShardPool`), and every
    step's output hash equals a one-worker local run's (a separate process, not connected to Ray). Half the corpus of
    that file (6 files: 4 to 12 tasks a stage; exact and near duplicates and the contaminated document still dropped):
    the hashes' equality does not depend on its size."""
    import subprocess
    from marin.cluster.ray_backend import RayShardPool
    from marin.core.tasks import shard_pool
    from test_data_scale import CHAIN_SCRIPT, chain, hashes, write_corpus

    assert isinstance(shard_pool(4), RayShardPool)
    src = write_corpus(store / "data", files=6)
    steps = chain(src)
    r = executor_main(list(steps.values()), prefix=str(store / "on-ray"), verbose=False, backend="local")
    local = store / "local"
    script = CHAIN_SCRIPT.format(tests=str(TESTS), src=str(src), prefix=str(local), shard_docs=50)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    subprocess.run([sys.executable, "-c", script], env={**env, "MARIN_DATA_WORKERS": "1"}, check=True, timeout=600)
    assert hashes(r, steps) == {
        k: read_status(str(next(local.glob(f"{s.name}-*"))))["output_hash"] for k, s in steps.items()
    }


def test_failing_node_is_excluded(cluster, store):
    "Steps that prefer node `b` die there: after two losses the node is excluded and every step finishes on node `a`."
    bad_id = cluster.node_id("b")
    steps = [
        Step(
            f"flaky/{i}",
            cs.crash_on_bad_node,
            cs.FlakyConfig(index=i, bad_node="b"),
            resources=Resources(cpus=0.5, custom={"device": 0.5}, prefer_labels={"marin-node": "b"}),
        )
        for i in range(3)
    ]
    backend = RayBackend(max_attempts=4, exclude_after=2, verbose=True)
    ex = Executor(str(store / "flaky"), backend=backend, verbose=False)
    r = ex.run(steps)
    assert set(r.statuses.values()) == {SUCCESS}
    rep = backend.report
    assert rep.excluded_nodes == [bad_id]
    lost = [a for a in rep.attempts if a.status == "LOST"]
    assert len(lost) >= 2 and all(a.node_id == bad_id for a in lost)
    assert all(a.node_id != bad_id for a in rep.attempts if a.status == SUCCESS)
    # nothing started on the bad node after it was excluded (at most the attempts already in flight)
    assert len(lost) <= 2 + 1
    led = ex.ledger.sql(
        "SELECT step, status, attempt, retries, hardware->>'ray_node_id' AS node, error, ended_at FROM records "
        "WHERE status != 'RUNNING' ORDER BY step, attempt"
    )
    assert (led[led.status == FAILED].node == bad_id).all() and led[led.status == FAILED].error.str.contains(
        "WorkerCrashedError"
    ).all()
    assert len(led[led.status == FAILED]) == len(lost) and led[led.status == FAILED].ended_at.notna().all()
    for s in steps:  # each step: attempts 1..k, only the last one succeeded
        rows = led[led.step == s.name]
        assert list(rows.attempt) == list(range(1, len(rows) + 1)) and list(rows.status)[-1] == SUCCESS
        assert list(rows.retries) == [a - 1 for a in rows.attempt]


def test_training_step_migrates_after_node_loss(cluster, store):
    "Kill the node running a training step after its checkpoint at step >= 10: the retry resumes there on another node, bit-exact."
    from cluster_train_steps import tiny_train_config
    from marin.train.checkpoint import latest_checkpoint
    from marin.train.trainer import final_params_hash, train

    ref = Executor(str(store / "ref"), backend="local", verbose=False)
    ref_step = Step("train", train, tiny_train_config(delay=0.0))
    ref_hash = final_params_hash(ref.run([ref_step])[ref_step])

    step = Step("train", train, tiny_train_config(delay=0.15), resources=Resources(cpus=1, custom={"device": 1}))
    backend = RayBackend(max_attempts=3, verbose=True)
    ex = Executor(str(store / "ray"), backend=backend, verbose=False)
    out = ex.output_path(step)
    box = {}
    th = threading.Thread(target=lambda: box.setdefault("r", ex.run([step])), daemon=True)
    th.start()
    t = time.time()
    while not ((lt := latest_checkpoint(str(Path(out) / "checkpoints"))) and lt[0] >= 10):
        assert th.is_alive() and time.time() - t < 150, "no checkpoint at step >= 10"
        time.sleep(0.05)
    marker = json.loads(next((store / "ray" / ".cluster").glob("*/*.attempt1.json")).read_text())
    victim = node_names(cluster)[marker["ray_node_id"]]
    cluster.kill_node(victim)
    th.join(timeout=180)
    assert not th.is_alive() and box["r"].statuses[step.output_name] == SUCCESS
    assert final_params_hash(out) == ref_hash  # the migrated run ends bit-identical
    led = ex.ledger.sql(
        "SELECT attempt, status, hardware->>'ray_node_id' AS node, metrics->>'train/resumed_from' AS resumed "
        "FROM records WHERE status != 'RUNNING' ORDER BY attempt"
    )
    assert list(led.attempt) == [1, 2] and list(led.status) == [FAILED, SUCCESS]
    assert led.node[0] == marker["ray_node_id"] and led.node[1] != marker["ray_node_id"]
    assert int(led.resumed[1]) >= 10  # resumed from the checkpoint, not from scratch
