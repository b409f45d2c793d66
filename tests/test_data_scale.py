"""Every data stage on the sharded stage model (`marin.core.tasks`): the chain import → quality → dedup → decontaminate
→ tokenize gives the same output bytes (the executor's manifest hashes) with 1, 2 and 4 local workers and on Ray, and
a run killed with SIGKILL in the middle of a stage resumes: the rerun redoes only the shards that had not finished,
and its output equals the uninterrupted run's."""

import json, os, random, signal, subprocess, sys, time
from pathlib import Path
import pytest

from marin.core.executor import executor_main, read_status

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
FILES, DOCS_PER_FILE = 12, 60
ARC_QUESTION = json.loads((SHARED / "eval" / "arc_easy_test.jsonl").read_text().splitlines()[0])["query"]


def write_corpus(root: Path, files: int = FILES) -> Path:
    """`files` JSONL files of paragraph documents from the shared novels, with exact and near duplicates across files
    and one document that quotes an ARC-Easy test question (in the sixth file: `files` >= 6)."""
    assert files >= 6, "the ARC-Easy question goes into the sixth file"
    paras = [
        " ".join(p.split())
        for f in ("pride_and_prejudice.txt", "little_women.txt")
        for p in (SHARED / "text" / f).read_text().split("\n\n")
        if len(p) > 300
    ]
    rng = random.Random(0)
    src = root / "corpus"
    src.mkdir(parents=True)
    for i in range(files):
        docs = []
        for j in range(DOCS_PER_FILE):
            text = paras[(i * DOCS_PER_FILE + j) % len(paras)]
            if j % 10 == 3:  # an exact copy of a document in another file
                text = paras[rng.randrange(len(paras))]
            if j % 10 == 7:  # a near copy: one word changed
                words = paras[rng.randrange(len(paras))].split()
                words[len(words) // 2] = "changed"
                text = " ".join(words)
            if (i, j) == (5, 11):
                text += " " + ARC_QUESTION
            docs.append({"id": f"{i}-{j}", "text": text})
        (src / f"part-{i:02d}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    return src


def chain(src: Path, shard_docs: int = 50) -> dict:
    "The data steps of a pretraining corpus, in order (each step's output is the next one's input)."
    from marin.data import decontam as dc
    from marin.data.dedup import DedupConfig, dedup_step
    from marin.data.filters import QualityConfig, quality_step
    from marin.data.shards import TokenizeConfig, tokenize_step
    from marin.data.sources import SourceConfig, import_step
    from marin.data.tokenizers import BPETrainConfig, train_bpe_step

    # small import tasks and shards, so that every stage has a dozen tasks to spread over workers
    out = {
        "import": import_step(
            SourceConfig("novels", (str(src),), format="jsonl", task_bytes=20_000, shard_docs=shard_docs)
        )
    }
    index = dc.contamination_index_step(dc.ContaminationIndexConfig((dc.EvalTexts("arc_easy", "arc_easy_test.jsonl"),)))
    out["decontam"] = dc.decontam_step(dc.DecontamConfig(out["import"], index), "decontam/novels")
    out["quality"] = quality_step(QualityConfig(out["decontam"]), "quality/novels")
    out["dedup"] = dedup_step(DedupConfig(out["quality"]), "dedup/novels")
    tok = train_bpe_step(BPETrainConfig(out["dedup"], vocab_size=300, max_documents=200))
    out["tokens"] = tokenize_step(TokenizeConfig(out["dedup"], tok, docs_per_shard=100), "tokens/novels")
    return out


def hashes(result, steps: dict) -> dict:
    return {k: read_status(result[s])["output_hash"] for k, s in steps.items()}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("scale"))


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory):
    "The chain run with one worker: (output hashes, result)."
    os.environ["MARIN_DATA_WORKERS"] = "1"
    try:
        steps = chain(corpus)
        r = executor_main(
            list(steps.values()), prefix=str(tmp_path_factory.mktemp("w1")), verbose=False, backend="local"
        )
    finally:
        del os.environ["MARIN_DATA_WORKERS"]
    return hashes(r, steps), r, steps


def test_worker_count_does_not_change_output(corpus, reference, tmp_path, monkeypatch, workers=4):
    """4 workers give the one-worker bytes. (2 workers: the killed-and-resumed run of the next test ends with them
    too.)"""
    want, ref, ref_steps = reference
    summary = lambda k: json.loads(Path(ref[ref_steps[k]], "summary.json").read_text())
    assert summary("import")["files"] >= 12  # a sharded set, really
    assert summary("decontam")["dropped"] == {"contaminated": 1}  # the planted ARC question
    assert summary("dedup")["dropped"].get("exact-duplicate", 0) > 0 and summary("dedup")["documents"] > 300
    monkeypatch.setenv("MARIN_DATA_WORKERS", str(workers))
    steps = chain(corpus)
    r = executor_main(list(steps.values()), prefix=str(tmp_path), verbose=False, backend="local")
    assert hashes(r, steps) == want


CHAIN_SCRIPT = """
import os, sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from marin.core.executor import executor_main
from test_data_scale import chain
steps = chain(Path({src!r}), shard_docs={shard_docs})
executor_main(list(steps.values()), prefix={prefix!r}, verbose=False, backend="local")
"""


def _markers(prefix: Path, step: str) -> dict[str, float]:
    return {str(p.relative_to(prefix)): p.stat().st_mtime_ns for p in prefix.glob(f"{step}-*/.tasks/*/*.json")}


def test_sigkill_mid_stage_then_rerun_redoes_only_unfinished_shards(corpus, reference, tmp_path):
    """The chain in a subprocess with 2 workers, frozen (SIGSTOP) as soon as the decontamination stage has finished
    its first shards and killed (SIGKILL, the whole process group): the rerun (2 workers) keeps the finished shards'
    markers, redoes the rest, and ends with the same bytes as the uninterrupted one-worker run (`reference`, the same
    steps)."""
    prefix = tmp_path / "killed"
    env = {**os.environ, "MARIN_DATA_WORKERS": "2", "MARIN_TRACKER": "disabled"}
    script = CHAIN_SCRIPT.format(tests=str(Path(__file__).parent), src=str(corpus), prefix=str(prefix), shard_docs=50)
    p = subprocess.Popen([sys.executable, "-c", script], env=env, start_new_session=True)
    try:
        t = time.time()
        while not _markers(prefix, "decontam/novels") and time.time() - t < 300:
            assert p.poll() is None, "the run ended before the stage could be killed"
            time.sleep(0.001)
        os.killpg(p.pid, signal.SIGSTOP)
        before = _markers(prefix, "decontam/novels")
        os.killpg(p.pid, signal.SIGKILL)
    finally:
        p.wait()
    n_tasks = len(list(next(prefix.glob("documents/novels-*")).glob("documents-*.parquet")))
    assert 0 < len(before) < n_tasks, (len(before), n_tasks)  # killed mid-stage, really
    out = next(prefix.glob("decontam/novels-*"))
    assert read_status(str(out))["status"] == "RUNNING"  # what a kill leaves

    steps = chain(corpus)
    os.environ["MARIN_DATA_WORKERS"] = "2"
    try:
        r = executor_main(list(steps.values()), prefix=str(prefix), verbose=False, backend="local")
    finally:
        del os.environ["MARIN_DATA_WORKERS"]
    after = _markers(prefix, "decontam/novels")
    assert {k: after[k] for k in before} == before  # the finished shards were not redone
    assert len(after) == n_tasks
    assert hashes(r, steps) == reference[0]
