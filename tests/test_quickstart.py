"""The quickstart experiment end to end (the main job of the README), through `marin run` on a private prefix, with small
parameters: the whole chain of steps is in the ledger under the experiment run, the model beats the unigram baseline on
held-out data, and a second run reuses every step."""

import json, math, os, subprocess
from conftest import marin_cmd, REPO

SMALL = {
    "prose_documents": 240,
    "code_files": 6,
    "vocab_size": 512,
    "seq_len": 64,
    "batch_size": 8,
    "train_steps": 150,
    "d_model": 64,
    "n_layers": 2,
    "eval_tokens": 2048,
    "mc_items": 8,
}
STEPS = {
    "decontam-index",
    "documents/prose",
    "decontam/prose",
    "dedup/prose",
    "quality/prose",
    "quickstart/holdout/prose",
    "documents/code",
    "decontam/code",
    "dedup/code",
    "quickstart/holdout/code",
    "quickstart/tokenizer-documents",
    "quickstart/tokenizer",
    "quickstart/tokens/prose-train",
    "quickstart/tokens/code-train",
    "quickstart/tokens/prose-validation",
    "quickstart/tokens/code-validation",
    "quickstart/mixture",
    "quickstart/train",
    "quickstart/eval",
    "quickstart/unigram",
}


def _run(nb):
    args = [a for k, v in SMALL.items() for a in ("-p", k, str(v))]
    r = subprocess.run(
        marin_cmd("run", str(nb), *args), capture_output=True, text=True, env=os.environ, cwd=REPO, timeout=600
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def test_quickstart_end_to_end_then_cached(lab):
    nb = REPO / "experiments_nb" / "quickstart.ipynb"
    _run(nb)
    from marin.core.ledger import Ledger

    led = Ledger(str(lab / "store" / "ledger"))
    exp = led.sql("SELECT * FROM runs WHERE kind = 'experiment'")
    assert list(exp.status) == ["SUCCESS"] and exp.issue[0] == "#4"
    run_id = exp.run_id[0]
    steps = led.sql(
        "SELECT step, status, parent_run_id, metrics, tracker_url, output_path FROM runs WHERE kind = 'step' AND status != 'RUNNING'"
    )
    assert set(steps.step) == STEPS and len(steps) == len(STEPS), sorted(steps.step)
    assert set(steps.status) == {"SUCCESS"} and set(steps.parent_run_id) == {run_id}, (
        "every step links to its experiment run"
    )
    by = steps.set_index("step")
    sm = {s: json.loads(by.metrics[s] or "{}") for s in STEPS}
    # the data chain: dedup and quality keep most prose, the split holds some out, the tokenizer has the asked-for vocabulary
    assert sm["documents/prose"]["data/documents"] == 240 and 0 < sm["quality/prose"]["data/documents"] <= 240
    # decontamination checked every imported document against ARC-Easy (the task evaluated) before dedup
    assert sm["decontam-index"]["data/decontam_index/arc_easy/items"] == 2376
    for src in ("prose", "code"):
        dc = sm[f"decontam/{src}"]
        assert dc["data/documents_in"] == sm[f"documents/{src}"]["data/documents"]
        assert dc["data/documents"] + dc["data/dropped/contaminated"] == dc["data/documents_in"]
        assert dc["data/decontam/arc_easy"] == dc["data/dropped/contaminated"]
        assert sm[f"dedup/{src}"]["data/documents_in"] == dc["data/documents"]
    split = sm["quickstart/holdout/prose"]
    assert (
        split["data/validation_documents"] >= 1
        and split["data/train_documents"] + split["data/validation_documents"] == sm["quality/prose"]["data/documents"]
    )
    assert (
        sm["quickstart/tokenizer"]["data/vocab_size"] == 512
        and sm["quickstart/tokens/prose-train"]["data/tokens"] > 10_000
    )
    assert 0 < sm["quickstart/mixture"]["mixture/share/code"] < sm["quickstart/mixture"]["mixture/share/prose"]
    # training was tracked and its metrics are sane; the model beats each source's unigram baseline on held-out data
    tr = sm["quickstart/train"]
    assert tr["train/steps"] == 150 and math.isfinite(tr["train/final_loss"]) and tr["train/final_loss"] < math.log(512)
    assert "wandb" in by.tracker_url["quickstart/train"]
    ev, base = sm["quickstart/eval"], sm["quickstart/unigram"]
    for src in ("prose", "code"):
        assert 0 < ev[f"eval/{src}/bpb"] < base[f"eval/{src}/unigram_bpb"] < 8, (
            src,
            ev[f"eval/{src}/bpb"],
            base[f"eval/{src}/unigram_bpb"],
        )
        assert (
            ev[f"eval/{src}/tokens"] == base[f"eval/{src}/tokens"]
            and ev[f"eval/{src}/bytes"] == base[f"eval/{src}/bytes"]
        ), "same held-out targets"
        assert abs(tr[f"eval/{src}/bpb"] - ev[f"eval/{src}/bpb"]) < 1e-4, (
            "the trainer's in-loop evaluation agrees with the eval step"
        )
    assert ev["eval/arc_easy/n"] == 8 and 0 <= ev["eval/arc_easy/acc"] <= 1
    m = json.loads(exp.metrics[0])
    assert m["eval/prose/bpb"] == ev["eval/prose/bpb"] and m["eval/prose/unigram_bpb"] == base["eval/prose/unigram_bpb"]
    assert (lab / "reports" / "_site" / "quickstart" / f"{run_id}.html").exists()
    # the second run reuses every step: no new step record, a second successful experiment record
    _run(nb)
    assert len(led.sql("SELECT * FROM runs WHERE kind = 'step' AND status != 'RUNNING'")) == len(STEPS), (
        "no step may rerun"
    )
    assert list(led.sql("SELECT status FROM runs WHERE kind = 'experiment' ORDER BY started_at").status) == [
        "SUCCESS",
        "SUCCESS",
    ]
