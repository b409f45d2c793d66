"""`marin serve` as a real process on 127.0.0.1, queried with the official `openai` client: completions, chat and
streaming; lm-eval's `local-completions` log-likelihood requests agree with in-process scoring; bad requests get
the right 4xx while the server keeps serving; 64 concurrent requests all complete correctly."""

import concurrent.futures as cf
import json, socket, urllib.error, urllib.request
from operator import itemgetter
import jax, jax.numpy as jnp, numpy as np
import pytest

openai = pytest.importorskip("openai")
from conftest import marin_server
from marin.models.transformer import LlamaConfig, forward, init
from marin.serve.hf import export_hf, import_hf

VOCAB = ["\n"] + [chr(c) for c in range(32, 127)]
KEY = "sk-marin-test"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve") / "tiny-llama"
    cfg = LlamaConfig(vocab_size=96, seq_len=128, d_model=48, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=96)
    model = jax.tree.map(lambda a: a * 6 if a.ndim >= 2 else a, init(cfg, key=jax.random.PRNGKey(0)))
    export_hf(model, str(d), tokenizer=VOCAB)
    with marin_server(d, "--api-key", KEY, "--max-batch", "8") as (base, proc):
        client = openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0, timeout=120)
        yield {"base": base, "client": client, "model": model, "dir": str(d), "name": "tiny-llama", "proc": proc}


def _raw(server, path, body, key=KEY, method="POST"):
    data = body if isinstance(body, bytes) else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(
        server["base"] + path,
        data=data,
        method=method,
        headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _ids(text):
    return [VOCAB.index(c) for c in text]


_forward = jax.jit(forward)


def _greedy(model, ids, n):
    "Reference greedy continuation by full recompute (one compiled program for every call)."
    ids = list(ids)
    for _ in range(n):
        w = np.zeros((1, model.cfg.seq_len), np.int32)
        w[0, : len(ids)] = ids
        ids.append(int(jnp.argmax(_forward(model, jnp.asarray(w))[0, len(ids) - 1])))
    return ids[-n:]


def test_binds_loopback_and_lists_the_model(server):
    assert server["base"].startswith("http://127.0.0.1:")
    models = server["client"].models.list()
    assert [m.id for m in models.data] == [server["name"]]


def test_completions_chat_and_streaming_with_the_openai_client(server):
    c, name = server["client"], server["name"]
    prompt = "To be, or not to be"
    r = c.completions.create(model=name, prompt=prompt, max_tokens=12, temperature=0)
    ref = _greedy(server["model"], _ids(prompt), 12)
    want = "".join(VOCAB[t] for t in ref)
    assert r.choices[0].text == want and r.usage.completion_tokens == 12 and r.choices[0].finish_reason == "length"
    # a batch of token-id lists, and a list of strings
    r = c.completions.create(model=name, prompt=[_ids(prompt), _ids("Hello")], max_tokens=4, temperature=0)
    assert [ch.index for ch in r.choices] == [0, 1] and r.choices[0].text == want[:4]
    r = c.completions.create(model=name, prompt=[prompt, "Hello"], max_tokens=4, temperature=0)
    assert r.choices[0].text == want[:4] and len(r.choices) == 2
    # streaming gives the same text, token by token
    chunks = list(c.completions.create(model=name, prompt=prompt, max_tokens=12, temperature=0, stream=True))
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == want
    assert chunks[-1].choices[0].finish_reason == "length"
    # chat: the default template renders "user: ...\nassistant:"
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who are you?"}]
    r = c.chat.completions.create(
        model=name, messages=msgs, max_tokens=10, temperature=0, logprobs=True, top_logprobs=3
    )
    chat_prompt = "system: Be brief.\nuser: Who are you?\nassistant:"
    ref = _greedy(server["model"], _ids(chat_prompt), 10)
    assert r.choices[0].message.content == "".join(VOCAB[t] for t in ref) and r.usage.prompt_tokens == len(chat_prompt)
    assert len(r.choices[0].logprobs.content) == 10 and len(r.choices[0].logprobs.content[0].top_logprobs) == 3
    stream = c.chat.completions.create(model=name, messages=msgs, max_tokens=10, temperature=0, stream=True)
    assert "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices) == r.choices[0].message.content
    # seeded sampling is reproducible, stop strings cut the text
    a = c.completions.create(model=name, prompt=prompt, max_tokens=8, temperature=1.0, top_p=0.9, seed=11)
    b = c.completions.create(model=name, prompt=prompt, max_tokens=8, temperature=1.0, top_p=0.9, seed=11)
    assert a.choices[0].text == b.choices[0].text
    stop = want[3:5]
    r = c.completions.create(model=name, prompt=prompt, max_tokens=12, temperature=0, stop=[stop])
    assert r.choices[0].text == want[: want.index(stop)] and r.choices[0].finish_reason == "stop"


def test_lm_eval_local_completions_loglikelihood_matches_in_process(server):
    "The payload lm-eval's local-completions sends for log-likelihood, parsed the way lm-eval parses it."
    pairs = [("The quick brown fox", " jumps"), ("To be, or not", " to be"), ("Hello", ", world!")]
    ctx = [_ids(a) for a, _ in pairs]
    full = [_ids(a + b) for a, b in pairs]
    st, out = _raw(
        server,
        "/v1/completions",
        {
            "model": server["name"],
            "prompt": full,
            "temperature": 0,
            "max_tokens": 1,
            "logprobs": 1,
            "seed": 1234,
            "echo": True,
        },
    )
    assert st == 200
    got = []
    for choice, ctxlen in zip(sorted(out["choices"], key=itemgetter("index")), [len(c) for c in ctx]):
        lps = choice["logprobs"]["token_logprobs"][ctxlen:-1]
        tops = choice["logprobs"]["top_logprobs"][ctxlen:-1]
        got.append((sum(lps), all(t == max(top.values()) for t, top in zip(lps, tops))))
    model, _ = import_hf(server["dir"])
    for (ll, greedy), c, f in zip(got, ctx, full):
        logp = jax.nn.log_softmax(forward(model, jnp.asarray([f]))[0], -1)
        want = sum(float(logp[i - 1, f[i]]) for i in range(len(c), len(f)))
        assert abs(ll - want) < 1e-3, (ll, want)
        assert greedy == all(int(jnp.argmax(logp[i - 1])) == f[i] for i in range(len(c), len(f)))
    # echo with max_tokens=0 scores the prompt alone
    st, out = _raw(
        server,
        "/v1/completions",
        {"model": server["name"], "prompt": full[0], "max_tokens": 0, "echo": True, "logprobs": 0},
    )
    assert st == 200 and len(out["choices"][0]["logprobs"]["token_logprobs"]) == len(full[0])


def test_bad_requests_get_4xx_and_the_server_keeps_serving(server):
    name = server["name"]
    cases = [
        (b"{oops", KEY, 400, "malformed JSON"),
        ({"model": "gpt-5", "prompt": "a"}, KEY, 404, "does not exist"),
        ({"model": name, "prompt": "a", "max_tokens": -3}, KEY, 400, "max_tokens"),
        ({"model": name, "prompt": "a", "max_tokens": 10**9}, KEY, 400, "maximum context length is 128"),
        ({"model": name, "prompt": "x" * 200, "max_tokens": 1}, KEY, 400, "maximum context length"),
        ({"model": name, "prompt": [[1, 2, 999]]}, KEY, 400, "token ids"),
        ({"model": name, "prompt": "a", "temperature": "hot"}, KEY, 400, "temperature"),
        ({"model": name, "prompt": "a"}, "sk-wrong", 401, "API key"),
        ({"model": name, "prompt": "a"}, None, 401, "API key"),
        ({"model": name}, KEY, 400, "prompt"),
    ]
    for body, key, status, words in cases:
        st, out = _raw(server, "/v1/completions", body, key=key)
        assert st == status and words in out["error"]["message"], (body, st, out)
    st, out = _raw(server, "/v1/chat/completions", {"model": name, "messages": "hi"})
    assert st == 400 and "messages" in out["error"]["message"]
    assert _raw(server, "/v1/nothing", {}, key=KEY)[0] == 404
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server["base"] + "/v1", api_key="bad", max_retries=0).models.list()
    with pytest.raises(openai.BadRequestError):
        server["client"].completions.create(model=name, prompt="a", max_tokens=100000)
    # a streaming client that hangs up mid-stream
    port = int(server["base"].rsplit(":", 1)[1])
    body = json.dumps({"model": name, "prompt": "Bye", "max_tokens": 100, "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", port)) as sk:
        sk.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {KEY}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        assert b"200 OK" in sk.recv(4096)
    assert server["proc"].poll() is None
    r = server["client"].completions.create(model=name, prompt="still here", max_tokens=2, temperature=0)
    assert len(r.choices[0].text) == 2


def test_64_concurrent_requests_all_complete_correctly(server):
    c, name = server["client"], server["name"]
    prompts = [
        "Once upon a time",
        "It was",
        "ACT I",
        "Scene",
        "Romeo",
        "Juliet, my",
        "Now is the winter",
        "Friends, Romans",
    ]
    refs = {p: "".join(VOCAB[t] for t in _greedy(server["model"], _ids(p), 6)) for p in prompts}
    jobs = [prompts[i % len(prompts)] for i in range(64)]
    before = _metrics(server)

    def one(p):
        r = c.completions.create(model=name, prompt=p, max_tokens=6, temperature=0)
        return p, r.choices[0].text

    with cf.ThreadPoolExecutor(64) as pool:
        results = list(pool.map(one, jobs))
    assert len(results) == 64 and all(text == refs[p] for p, text in results), [
        (p, t, refs[p]) for p, t in results if t != refs[p]
    ][:3]
    after = _metrics(server)  # Prometheus' view of the same 64 requests
    delta = lambda k: after.get(k, 0) - before.get(k, 0)
    assert delta('marin_requests_total{route="/v1/completions",status="200"}') == 64
    assert (
        delta('marin_tokens_total{kind="generated"}') == 64 * 6
        and delta("marin_time_to_first_token_seconds_count") == 64
    )
    assert delta("marin_inter_token_latency_seconds_count") == 64 * 5 and after["marin_queue_length"] == 0
    assert delta('marin_tokens_total{kind="prompt"}') == sum(len(_ids(p)) for p in jobs)


def _metrics(server) -> dict:
    "`GET /metrics` (with the API key, as every route but /health) parsed: sample name with labels -> value."
    req = urllib.request.Request(server["base"] + "/metrics", headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
        lines = r.read().decode().splitlines()
    return {k: float(v) for k, v in (l.rsplit(" ", 1) for l in lines if l and not l.startswith("#"))}
