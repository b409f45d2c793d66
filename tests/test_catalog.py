"""The data catalog and the seed's mixture (#55), offline: a sample mirror in each source's real layout (Nemotron-CC's
`.jsonl.zstd` buckets and paths index, StarCoderData's `<lang>/train-*.parquet`, ProofPile 2's `*/train/*.jsonl.zst`)
built from the shared data at test time. The seed recipe (import → decontaminate → dedup → quality → tokenizer →
tokens → mixture) gives the same token-shard hashes with 1 and 4 local workers and on Ray; the download path is the
same code, run against a local HTTP server that answers Range requests and drops a connection mid-file."""

import http.server, json, os, re, socket, threading
from pathlib import Path
from typing import ClassVar
import pytest

from marin.core.executor import executor_main, read_status
from marin.data.catalog import FETCH_DIR, SAMPLE_MIRROR, catalog_import, catalog_step, sample_mirror
from marin.data.mixture import MixtureStepConfig, describe_mixture
from marin.data.recipe import seed_recipe
from marin.data.sources import read_documents

NCC_HIGH = "contrib/Nemotron/Nemotron-CC/data-jsonl/quality=high/kind=actual/kind2=actual"


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> str:
    return sample_mirror(tmp_path_factory.mktemp("mirror"))


def recipe(mirror: str, workers: int, **overrides):
    """The seed recipe on the sample mirror, small: a shard per 40 documents, so every stage has tasks to spread (and
    no decontamination: tests/test_data_scale.py checks that stage across worker counts; CI time is tight)."""
    r = seed_recipe(
        root=mirror,
        stand_in=SAMPLE_MIRROR,
        workers=workers,
        vocab_size=300,
        tokenizer_documents=100,
        seq_len=64,
        batch_size=4,
        **overrides,
    )
    small = {"shard_docs": 40, "task_bytes": 40_000}
    return r.replace(web=r.web.replace(**small), code=r.code.replace(**small), math=r.math.replace(**small))


def run_recipe(mirror: str, prefix: Path, workers: int, monkeypatch=None) -> tuple[dict, dict, object]:
    "The token sets' output hashes and the mixture's batch hash, the steps, and the executor's result."
    if monkeypatch is not None:
        monkeypatch.setenv("MARIN_DATA_WORKERS", str(workers))  # dedup and quality read the setting
    st = recipe(mirror, workers, decontaminate=()).steps()
    r = executor_main([st["mixture"]], prefix=str(prefix), verbose=False, backend="local")
    out = {f"tokens/{k}": read_status(r[s])["output_hash"] for k, s in st["tokens"].items()}
    # the mixture's own folder names the token sets' paths (other prefixes here): its batches' hash is the content
    out["mixture_batches"] = json.loads(Path(r[st["mixture"]], "mixture.json").read_text())["batch_hash"]
    return out, st, r


@pytest.fixture(scope="module")
def reference(mirror, tmp_path_factory):
    "The chain with one worker."
    mp = pytest.MonkeyPatch()
    try:
        return run_recipe(mirror, tmp_path_factory.mktemp("w1"), 1, mp)
    finally:
        mp.undo()


def test_seed_recipe_funnel_and_mixture_shares(reference):
    hashes, st, r = reference
    summary = lambda s: json.loads(Path(r[s], "summary.json").read_text())
    imported = {k: summary(s) for k, s in st["documents"].items()}
    # the default subsets only: Nemotron-CC's high bucket (2 of its 3 files), StarCoderData's python, all of ProofPile 2
    assert imported["web"]["documents"] == 80 and imported["code"]["documents"] == 40
    assert imported["math"]["documents"] == 100  # arXiv 40, OpenWebMath 40, AlgebraicStack 20
    dedup_web = next(s for s in st["clean"]["web"].inputs if s.name == "dedup/web")
    assert summary(dedup_web)["dropped"].get("exact-duplicate", 0) > 0  # the planted copies
    desc = describe_mixture(
        MixtureStepConfig(
            st["mixture_config"].replace(
                components=tuple(c.replace(tokens=r[c.tokens]) for c in st["mixture_config"].components)
            ),
            planned_steps=200,
        )
    )
    assert [c["name"] for c in desc["components"]] == ["web", "code", "math"]
    assert max(abs(c["realised_share"] - c["token_share"]) for c in desc["components"]) < 0.02
    assert all(len(h) >= 16 for h in hashes.values())


def test_worker_count_does_not_change_token_shards(mirror, reference, tmp_path, monkeypatch):
    """4 local workers give the hashes of one. (Two workers proved nothing four do not: both split every stage's
    tasks over several processes; tests/test_data_dedup.py checks dedup with 1, 2 and 4.)"""
    want = reference[0]
    got, _, _ = run_recipe(mirror, tmp_path, 4, monkeypatch)
    print("workers=4:", got)
    assert got == want


@pytest.mark.slow  # starting a local Ray cluster costs a minute on 2 busy cores: `make test-slow` (CI: see the note)
def test_ray_gives_the_token_shards_of_one_local_worker(mirror, reference, tmp_path, monkeypatch):
    """Every stage's tasks as Ray tasks (`RayShardPool`) on the lab's local Ray cluster (a head and one 2-CPU node, as
    tests/test_cluster_ray.py starts them): the same hashes as one local worker. (In CI the data chain's Ray bytes are
    checked by tests/test_cluster_ray.py on the cluster it starts anyway; this is the seed recipe's own check.)"""
    pytest.importorskip("ray")
    from marin.cluster.local import LocalRayCluster, NodeSpec
    from marin.cluster.ray_backend import RayShardPool
    from marin.core.tasks import shard_pool

    home = tmp_path / "home"  # Ray's auth token and caches stay in the test's folder
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    env = {"JAX_PLATFORMS": "cpu", "MARIN_TRACKER": "disabled", "WANDB_MODE": "offline", "HOME": str(home)}
    c = LocalRayCluster(tmp_path / "ray", env=env)
    try:
        c.start([NodeSpec("a", num_cpus=2)])
        c.connect()
        assert isinstance(shard_pool(4), RayShardPool)
        got, _, _ = run_recipe(mirror, tmp_path / "store", 0)
    finally:
        c.stop()
    print("ray:", got)
    assert got == reference[0]


# ------------------------------------------------------------------------------------------------ over HTTP
class RangeHandler(http.server.SimpleHTTPRequestHandler):
    "Serves a folder and answers `Range: bytes=a-b`; cuts the first ranged answer past byte 0 of `drop` paths."

    requests: ClassVar[list] = []  # (path, first byte) of every ranged GET
    drop: ClassVar[set] = set()
    fail_from: ClassVar[dict] = {}  # path -> every ranged GET from this byte on fails (a connection that stays down)
    ignore_range: ClassVar[bool] = False  # answer 200 with the whole file, as a server without Range support does

    def log_message(self, *args):
        pass

    def do_GET(self):
        path, rng = self.translate_path(self.path), self.headers.get("Range")
        if not rng or not os.path.isfile(path) or RangeHandler.ignore_range:
            return super().do_GET()
        data = Path(path).read_bytes()
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng)
        a = int(m[1])
        b = min(int(m[2]) if m[2] else len(data) - 1, len(data) - 1)
        body = data[a : b + 1]
        RangeHandler.requests.append((self.path, a))
        if a >= RangeHandler.fail_from.get(self.path, 1 << 62):
            self.send_error(503, "down")
            return
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {a}-{b}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if a > 0 and self.path in RangeHandler.drop:  # a dropped connection, half-way through the answer
            RangeHandler.drop.discard(self.path)
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        self.wfile.write(body)


@pytest.fixture(scope="module")
def server(mirror):
    handler = lambda *a, **kw: RangeHandler(*a, directory=str(Path(mirror) / "nemotron_cc"), **kw)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_import_over_http_resumes_a_dropped_connection_and_a_killed_fetch(mirror, server, tmp_path):
    """Nemotron-CC's high bucket from the HTTP root (listed by its paths index, fetched in 4 KB ranges): the server
    drops the connection in the middle of part 1's second range, and part 0 has a `.part` left by a killed run; the
    import retries the range from where it broke, resumes part 0 at the `.part`'s end, and its documents are the
    mirror's, byte for byte."""
    rel = [f"{NCC_HIGH}/CC-MAIN-2024-30-part-{i:05d}.jsonl.zstd" for i in range(2)]
    local = [Path(mirror, "nemotron_cc", r) for r in rel]
    out = tmp_path / "over-http"
    part0 = out / FETCH_DIR / (rel[0] + ".part")
    part0.parent.mkdir(parents=True)
    part0.write_bytes(local[0].read_bytes()[:5000])  # what a killed fetch leaves
    RangeHandler.requests.clear()
    RangeHandler.drop = {"/" + rel[1]}
    cfg = catalog_step("nemotron_cc", root=server, workers=1, chunk_bytes=4096).config
    catalog_import(cfg, str(out))
    got = {p: [a for q, a in RangeHandler.requests if q == "/" + p] for p in rel}
    assert got[rel[0]][0] == 5000, got[rel[0]]  # resumed where the killed run stopped
    starts = got[rel[1]]
    assert starts[:3] == [0, 4096, 4096], starts  # the second range dropped half-way, asked again from its start
    assert starts[-1] == (local[1].stat().st_size - 1) // 4096 * 4096 and len(starts) == len(set(starts)) + 1
    assert not (out / FETCH_DIR).exists()
    via_mirror = tmp_path / "via-mirror"
    catalog_import(
        catalog_step("nemotron_cc", root=str(Path(mirror, "nemotron_cc")), workers=1).config, str(via_mirror)
    )
    docs = list(read_documents(str(out)))
    assert len(docs) == 80 and docs == list(read_documents(str(via_mirror)))
    # a sample streams the first documents straight from the server, without fetching whole files
    sample = tmp_path / "sample"
    catalog_import(catalog_step("nemotron_cc", root=server, limit=30).config, str(sample))
    assert list(read_documents(str(sample))) == docs[:30]


def test_an_import_that_dies_mid_file_resumes_there(mirror, server, tmp_path, monkeypatch):
    """The server goes down in the middle of part 1 (after part 0 was fetched whole): the import fails naming the
    file and the range; run again, it fetches nothing of part 0 (its task is done) and resumes part 1 where it broke."""
    from marin.data import catalog

    monkeypatch.setattr(catalog, "FETCH_RETRIES", 1)
    rel = [f"{NCC_HIGH}/CC-MAIN-2024-30-part-{i:05d}.jsonl.zstd" for i in range(2)]
    cfg = catalog_step("nemotron_cc", root=server, workers=1, chunk_bytes=4096).config
    RangeHandler.requests.clear()
    RangeHandler.fail_from = {"/" + rel[1]: 4096}
    try:
        with pytest.raises(catalog.FetchError, match=r"part-00001.jsonl.zstd bytes 4096-8191: .*503.*rerun the import"):
            catalog_import(cfg, str(tmp_path))
    finally:
        RangeHandler.fail_from = {}
    RangeHandler.requests.clear()
    catalog_import(cfg, str(tmp_path))
    assert [a for q, a in RangeHandler.requests if q == "/" + rel[0]] == []
    assert [a for q, a in RangeHandler.requests if q == "/" + rel[1]][0] == 4096
    assert len(list(read_documents(str(tmp_path)))) == 80


def test_a_server_that_ignores_range_is_an_error_naming_the_file(mirror, server, tmp_path):
    from marin.data.catalog import FetchError, fetch_file

    rel = f"{NCC_HIGH}/CC-MAIN-2024-30-part-00000.jsonl.zstd"
    RangeHandler.ignore_range = True
    try:
        with pytest.raises(
            FetchError, match=r"part-00000.jsonl.zstd bytes 0-4095: asked for 4096 bytes, got \d+ \(a server"
        ):
            fetch_file(f"{server}/{rel}", str(tmp_path / "x.jsonl.zstd"), chunk=4096, retries=1)
    finally:
        RangeHandler.ignore_range = False
    assert not (tmp_path / "x.jsonl.zstd").exists()


def test_catalog_cli_lists_sources_and_imports_from_the_mirror(mirror, tmp_path, monkeypatch):
    from typer.testing import CliRunner
    from marin.cli import app

    monkeypatch.setenv("COLUMNS", "200")
    r = CliRunner().invoke(app, ["data", "sources"])
    assert r.exit_code == 0, r.output
    for name in ("nemotron_cc", "starcoderdata", "proof_pile_2", "fineweb_edu", "dclm_baseline", "dolma"):
        assert name in r.output
    assert "common_crawl" in r.output and "jsonl.zstd" in r.output
    monkeypatch.setenv("MARIN_CATALOG_MIRROR", mirror)
    args = ["data", "import", "proof_pile_2", "--subset", "arxiv", "--limit", "7", "--prefix", str(tmp_path)]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    (out,) = tmp_path.glob("documents/proof_pile_2-*")
    docs = list(read_documents(str(out)))
    assert len(docs) == 7 and docs[0]["id"].startswith("proof_pile_2/arxiv/train/arXiv_000.jsonl.zst:")
    bad = CliRunner().invoke(app, ["data", "import", "nemotron_cc", "--subset", "best", "--prefix", str(tmp_path)])
    assert "no subset 'best'" in str(bad.exception) and "medium-high" in str(bad.exception), repr(bad.exception)
