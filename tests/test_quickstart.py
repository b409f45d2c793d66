"The quickstart experiment end to end (the main job of the README), on a private prefix."
import json, os, subprocess
from conftest import marin_cmd, REPO

def test_quickstart_end_to_end_then_cached(lab):
    nb = REPO / "experiments_nb" / "quickstart.ipynb"
    r = subprocess.run(marin_cmd("run", str(nb), "-p", "train_steps", "60"), capture_output=True, text=True, env=os.environ, cwd=REPO, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    from marin.core.ledger import Ledger
    led = Ledger(str(lab / "store" / "ledger"))
    exp = led.sql("SELECT * FROM runs WHERE kind = 'experiment'")
    assert list(exp.status) == ["SUCCESS"]
    m = json.loads(exp.metrics[0])
    assert m["eval/bpb"] < m["eval/unigram_bpb"] < 8
    steps = led.sql("SELECT step, status, parent_run_id, tracker_url FROM runs WHERE kind = 'step' ORDER BY step")
    assert list(steps.step) == ["quickstart/bigram", "quickstart/byte_counts", "quickstart/documents", "quickstart/eval"]
    assert set(steps.status) == {"SUCCESS"} and set(steps.parent_run_id) == {exp.run_id[0]}, "steps link to their experiment run"
    assert steps.set_index("step").tracker_url["quickstart/bigram"].endswith(".tracking/wandb") or "wandb" in steps.set_index("step").tracker_url["quickstart/bigram"]
    assert (lab / "reports" / "_site" / "quickstart" / f"{exp.run_id[0]}.html").exists()
    # the second run reuses every step
    r = subprocess.run(marin_cmd("run", str(nb), "-p", "train_steps", "60"), capture_output=True, text=True, env=os.environ, cwd=REPO, timeout=600)
    assert r.returncode == 0
    assert len(led.sql("SELECT * FROM runs WHERE kind = 'step'")) == 4, "no step may rerun"
