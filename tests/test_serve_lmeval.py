"""A real lm-eval-harness run against `marin serve`: an exported tiny Mixtral (marin MoE) checkpoint with a BPE
tokenizer is served on 127.0.0.1, lm_eval's `local-completions` model scores a 20-item multiple-choice task (ARC-Easy
items from the shared data, as a custom task YAML) through `/v1/completions`, and its per-item log-likelihoods,
predictions and accuracy agree with in-process scoring by `marin.eval.tasks` on the same checkpoint."""

import json, time
import jax, numpy as np
import pytest

lm_eval = pytest.importorskip("lm_eval")
pytest.importorskip("transformers")
from conftest import marin_server
from marin.core.settings import shared_data_dir
from marin.data.tokenizers import train_bpe
from marin.eval.perplexity import model_logits_fn
from marin.eval.tasks import Task, eval_tokenizer, evaluate_multiple_choice, load_items
from marin.models.moe import MoEConfig
from marin.models.transformer import LlamaConfig, init
from marin.serve.hf import export_hf, import_hf

N_ITEMS = 20


def test_lm_eval_local_completions_through_the_server_agrees_with_in_process_scoring(tmp_path, monkeypatch):
    t0 = time.perf_counter()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    # the task: the first 20 ARC-Easy items of the shared data, as lm-eval's and marin's task formats
    src = shared_data_dir() / "eval" / "arc_easy_test.jsonl"
    lines = [l for l in src.read_text().splitlines() if l.strip()][:N_ITEMS]
    (tmp_path / "items.jsonl").write_text("\n".join(lines) + "\n")
    task = Task("arc20", str(tmp_path / "items.jsonl"))  # context: query + "\nAnswer: ", as lm-eval below
    items = load_items(task)
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "marin_arc20.yaml").write_text(
        "task: marin_arc20\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {tmp_path / 'items.jsonl'}\n  cache_dir: {tmp_path / 'hf_datasets'}\n"
        "test_split: test\noutput_type: multiple_choice\n"
        f"doc_to_text: {json.dumps('{{query}}' + task.delimiter.rstrip(' '))}\n"
        "doc_to_choice: '{{choices}}'\ndoc_to_target: '{{gold}}'\ntarget_delimiter: ' '\n"
        "metric_list:\n  - metric: acc\n  - metric: acc_norm\n"
    )
    # the model: a tiny Mixtral-layout MoE with a byte-level BPE tokenizer, exported the way users export
    tok = train_bpe([it["query"] + " " + c for it in items for c in it["choices"]] * 2, 400)
    cfg = LlamaConfig(
        vocab_size=400,
        seq_len=256,
        d_model=48,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        d_ff=64,
        moe=MoEConfig(n_experts=4, top_k=2, balance="switch"),
    )
    model = jax.tree.map(lambda a: a * 4 if a.ndim >= 2 else a, init(cfg, key=jax.random.PRNGKey(0)))
    d = tmp_path / "tiny-mixtral"
    export_hf(model, str(d), tokenizer=tok)
    with marin_server(d, "--max-batch", "8", timeout=120) as (base, proc):
        t_up = time.perf_counter()
        from lm_eval.tasks import TaskManager

        res = lm_eval.simple_evaluate(
            model="local-completions",
            model_args=f"base_url={base}/v1/completions,model=tiny-mixtral,tokenizer_backend=huggingface,"
            f"tokenizer={d},tokenized_requests=True,max_length={cfg.seq_len},batch_size=8,max_retries=1",
            tasks=["marin_arc20"],
            task_manager=TaskManager(include_path=str(tmp_path / "tasks"), include_defaults=False),
            limit=N_ITEMS,
            log_samples=True,
        )
        assert proc.poll() is None
    t_lm = time.perf_counter()
    samples = sorted(res["samples"]["marin_arc20"], key=lambda s: s["doc_id"])
    assert len(samples) == N_ITEMS
    # in process: the same checkpoint (as the server loads it) and its tokenizer.json, scored by marin.eval
    served, _ = import_hf(str(d))
    ours = evaluate_multiple_choice(
        model_logits_fn(served), eval_tokenizer(str(d)), task, max_len=cfg.seq_len, batch_size=4 * N_ITEMS
    )
    diffs, same_pred = [], 0
    for s, o in zip(samples, ours.items):
        ll = [float(r[0]) for r in s["filtered_resps"]]
        assert len(ll) == len(o["loglik"])
        diffs.append(float(np.max(np.abs(np.array(ll) - np.array(o["loglik"])))))
        same_pred += int(np.argmax(ll)) == o["pred"]
    r = res["results"]["marin_arc20"]
    print(
        f"lm_eval via server vs in-process: max |delta loglik| {max(diffs):.2e} over {N_ITEMS} items x 4 choices; "
        f"predictions {same_pred}/{N_ITEMS}; acc {r['acc,none']:.3f} vs {ours.metrics['arc20/acc']:.3f}; "
        f"acc_norm {r['acc_norm,none']:.3f} vs {ours.metrics['arc20/acc_norm']:.3f}; wall s: setup+server up {t_up - t0:.1f}, "
        f"lm_eval {t_lm - t_up:.1f}, in-process {time.perf_counter() - t_lm:.1f}"
    )
    assert max(diffs) < 1e-3, diffs
    assert same_pred == N_ITEMS
    assert r["acc,none"] == pytest.approx(ours.metrics["arc20/acc"]) and r["acc_norm,none"] == pytest.approx(
        ours.metrics["arc20/acc_norm"]
    )
