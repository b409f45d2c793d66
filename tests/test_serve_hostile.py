"""Hostile clients against a real `Server` (uvicorn on 127.0.0.1, in a thread, serving a tiny random model), each
answered with a clear OpenAI-style error naming the field (issue #19): framing over raw sockets (negative,
non-numeric and short Content-Length, chunked bodies, half-open and trickling connections, oversized bodies with
and without the API key), the rest with httpx (huge max_tokens, a prompt that fills the context, prompts x n, a 15 MB prompt,
clients that hang up mid-request, a full server); bad `marin serve` flags refused before the model loads; a
schemathesis run over /openapi.json that finds no 500; and 64 concurrent requests with /health answering within a
second while a 15 MB prompt and an abandoned fan-out are in flight. Issue #49: the API key on every route but
/health (and an empty key refused), the Host header of a key-less server (DNS rebinding), unsupported OpenAI fields
named in a 400, and NaN, infinite, huge and lone-surrogate values that JSON can carry refused by field."""

import concurrent.futures as cf
import contextlib, dataclasses, json, socket, threading, time
import httpx, jax, pytest
from marin.models.transformer import LlamaConfig, init
from marin.serve.hf import export_hf
from marin.serve.server import Server, ServedModel, ServerLimits

KEY = "sk-hostile"
VOCAB = ["\n"] + [chr(c) for c in range(32, 127)]
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile") / "tiny"
    cfg = LlamaConfig(vocab_size=96, seq_len=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)
    export_hf(
        jax.tree.map(lambda a: a * 8 if a.ndim >= 2 else a, init(cfg, key=jax.random.PRNGKey(0))),
        str(d),
        tokenizer=VOCAB,
    )
    return d


@pytest.fixture(scope="module")
def srv(model_dir):
    limits = ServerLimits(max_choices=32, body_timeout_s=1.0, header_timeout_s=1.0)
    with Server(ServedModel.load(str(model_dir), max_batch=8), port=0, api_key=KEY, limits=limits) as s:
        s.http = httpx.Client(base_url=f"http://127.0.0.1:{s.port}", headers=AUTH, timeout=30)
        s.http.post("/v1/completions", json={"prompt": "warm", "max_tokens": 2})  # compile before timing anything
        yield s


@contextlib.contextmanager
def limits(srv, **changes):
    old = srv.limits
    srv.limits = dataclasses.replace(old, **changes)
    try:
        yield
    finally:
        srv.limits = old


def _read_response(sk: socket.socket) -> tuple[int, dict | None]:
    "(status, JSON body or None) of one HTTP response read off a raw socket."
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sk.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a response: {data!r}")
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    n = int(headers.get("content-length", 0))
    while len(body) < n:
        body += sk.recv(65536)
    return int(lines[0].split()[1]), (json.loads(body[:n]) if n else None)


def raw(srv, request: bytes, timeout: float = 10) -> tuple[int, dict | None, float]:
    "Send `request` on a fresh connection: (status, JSON body, seconds to the answer)."
    with socket.create_connection(("127.0.0.1", srv.port), timeout=timeout) as sk:
        t0 = time.perf_counter()
        sk.sendall(request)
        status, body = _read_response(sk)
        return status, body, time.perf_counter() - t0


def head(length: str | None, key: str | None = KEY, extra: str = "") -> bytes:
    lines = ["POST /v1/completions HTTP/1.1", "Host: x", "Content-Type: application/json"]
    lines += [f"Authorization: Bearer {key}"] * bool(key) + [f"Content-Length: {length}"] * (length is not None)
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()


def health_answers(srv) -> None:
    "/health answers (liveness, not speed: a generous bound, so that a loaded machine does not fail it)."
    r = httpx.get(f"http://127.0.0.1:{srv.port}/health", timeout=60)
    assert r.status_code == 200


def nothing_received_yet(sk: socket.socket) -> bool:
    "True when the server has sent nothing on `sk` and not closed it (a non-blocking peek)."
    sk.setblocking(False)
    try:
        sk.recv(1, socket.MSG_PEEK)
        return False  # data, or b"": closed
    except BlockingIOError:
        return True
    finally:
        sk.setblocking(True)


def _read_until_closed(sk: socket.socket) -> bytes:
    "Everything the server sends until it closes the connection (a socket timeout if it never does)."
    data = b""
    while chunk := sk.recv(65536):
        data += chunk
    return data


def test_malformed_framing_gets_a_400_and_a_closed_connection(srv):
    # uvicorn's h11 answers what it cannot frame itself (plain text: the app never sees the request, and no public
    # setting makes that answer JSON); each is a 400, the connection is closed, and the server goes on serving
    bad = [head(n, key) + b'{"prompt": "a"}' for n in ("-1", "abc", "5\r\nContent-Length: 6") for key in (KEY, None)]
    bad += [head(None, extra="Transfer-Encoding: gzip\r\n"), head(None)[:-2] + b"X-Big: " + b"a" * 20_000]  # > 16 KiB
    for request in bad:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sk:
            sk.sendall(request)
            answer = _read_until_closed(sk)
        assert answer.split(b" ", 2)[:2] == [b"HTTP/1.1", b"400"], (request[:60], answer[:200])
    health_answers(srv)


def test_short_body_times_out_with_408_and_holds_nothing(srv):
    with limits(srv, body_timeout_s=120), socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sk:
        sk.sendall(head("100") + b'{"prompt":')  # 10 of the 100 bytes promised
        health_answers(srv)  # while the waiting request still waits: it holds nothing the others need
        assert nothing_received_yet(sk)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=60) as sk:
        sk.sendall(head("100") + b'{"prompt":')
        st, body = _read_response(sk)  # body_timeout_s=1
        assert (
            st == 408
            and body["error"]["param"] == "Content-Length"
            and "10 bytes of the 100" in body["error"]["message"]
        )


def test_chunked_body_is_read(srv):
    payload = json.dumps({"prompt": "Hello", "max_tokens": 3, "temperature": 0}).encode()
    a, b = payload[:10], payload[10:]
    chunks = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(a), a, len(b), b)
    st, body, _ = raw(srv, head(None, extra="Transfer-Encoding: chunked\r\n") + chunks)
    assert st == 200 and body["usage"] == {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}, body


def test_oversized_bodies_are_refused_before_they_are_read(srv):
    for key in (KEY, None, "sk-wrong"):  # 24 MiB promised, nothing sent: waiting for it would have been a 408
        st, body, _ = raw(srv, head(str(24 * 2**20), key))
        assert st == 413 and body["error"]["param"] == "Content-Length", (key, st, body)
    st, body, _ = raw(srv, head("1000", "sk-wrong"))  # a wrong key is refused without reading the body
    assert st == 401 and "API key" in body["error"]["message"]
    with limits(srv, max_body_bytes=64 * 2**10):  # a chunked body has no length: refused while it streams in
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sk:
            sk.sendall(head(None, extra="Transfer-Encoding: chunked\r\n"))
            with contextlib.suppress(OSError):
                for _ in range(10):
                    sk.sendall(b"%x\r\n%s\r\n" % (2**14, b" " * 2**14))
            st, body = _read_response(sk)
        assert st == 413 and "65,536 bytes" in body["error"]["message"], body


def test_half_open_connections_hold_nothing_and_are_closed(srv):
    with limits(srv, header_timeout_s=120):  # while 100 wait for their headers, the server answers
        held = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(100)]
        try:
            for sk in held:
                sk.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
            health_answers(srv)
            assert all(nothing_received_yet(sk) for sk in held)
        finally:
            for sk in held:
                sk.close()
    socks = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(100)]
    try:
        for sk in socks:
            sk.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # and never the rest
        for sk in socks:  # header_timeout_s=1: each is closed by the server
            sk.settimeout(60)
            assert sk.recv(10) == b""
    finally:
        for sk in socks:
            sk.close()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=0.25) as sk:  # a byte now and then: closed too
        sk.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        deadline, closed = time.monotonic() + 60, False  # a bound on the wait, not a speed: the server closes at ~1 s
        try:
            while not closed and time.monotonic() < deadline:
                try:
                    closed = sk.recv(10) == b""
                except TimeoutError:
                    sk.sendall(b"X")
        except ConnectionError:  # a byte sent after the server closed may be answered with a reset
            closed = True
        assert closed, "a client trickling its headers was never closed"


def test_an_idle_keep_alive_connection_outlives_the_header_deadline(srv):
    """Between requests a connection is idle keep-alive (uvicorn closes it after keep_alive_s=5), not a slow client:
    reused after header_timeout_s (1 s here) it is answered, not hung up on (a pooled client under load was); and a
    client that then sends half a request is still closed (after keep_alive_s + header_timeout_s)."""
    body = json.dumps({"prompt": "Romeo", "max_tokens": 2, "temperature": 0}).encode()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=60) as sk:
        for _ in range(2):
            sk.sendall(head(str(len(body))) + body)
            assert _read_response(sk)[0] == 200
            time.sleep(1.5)  # past the header deadline, within the keep-alive window
        sk.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # and never the rest
        assert sk.recv(10) == b""  # closed by the server (the 60 s socket timeout bounds the wait)


def test_bad_fields_are_4xx_naming_the_field(srv):
    cases = [
        ({"prompt": "a", "max_tokens": 10**300}, 400, "max_tokens", "maximum context length"),
        ({"prompt": "x" * 64}, 400, "prompt", "no room for the completion"),
        ({"prompt": ["a"] * 8, "n": 8}, 400, "n", "64 sequences exceed"),
        ({"prompt": "a", "temperature": "hot"}, 400, "temperature", "temperature: Input should be a valid number"),
        ({"prompt": "a", "stop": 5}, 400, "stop", "at most 16 strings"),
        ({"prompt": [1, -2]}, 400, "prompt", "token ids"),
        ({"prompt": None}, 400, "prompt", "prompt: expected a non-empty string"),
        ({"prompt": [[1, 2, 999]]}, 400, "prompt", "token ids must be in [0, 96)"),
        ({"prompt": "a", "model": "gpt-5"}, 404, "model", "does not exist"),
    ]
    for body, status, param, words in cases:
        r = srv.http.post("/v1/completions", json=body)
        err = r.json()["error"]
        assert r.status_code == status and err["param"] == param and words in err["message"], (body, r.text)
    r = srv.http.post("/v1/chat/completions", json={"messages": [{"role": "user"}, {"content": "hi"}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages[1].role", r.text
    r = srv.http.post("/v1/completions", content=b'{"prompt": "a"}', headers={"Content-Type": "text/plain"})
    assert r.status_code == 400 and "Content-Type: application/json" in r.json()["error"]["message"]
    r = srv.http.post("/v1/completions", content=b'{"prompt": "a"', headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "malformed JSON" in r.json()["error"]["message"]
    assert srv.http.get("/v1/nothing").json()["error"]["code"] == "not_found"
    assert srv.http.get("/v1/completions").status_code == 405


def _in_flight_soon(srv, timeout=20):
    deadline = time.monotonic() + timeout
    while srv.model.engine.in_flight == 0:
        assert time.monotonic() < deadline, "the request never reached the engine"
        time.sleep(0.01)


def _quiet_soon(srv, timeout=30) -> float:
    "Seconds until nothing is in flight (the bound leaves room for compiling a new batch bucket on a loaded machine)."
    t0 = time.monotonic()
    while srv.model.engine.in_flight:
        assert time.monotonic() - t0 < timeout, f"{srv.model.engine.in_flight} sequences still decoding"
        time.sleep(0.01)
    return time.monotonic() - t0


FAN_OUT = {"prompt": ["Once upon a time"] * 16, "n": 2, "max_tokens": 40, "ignore_eos": True, "temperature": 0}


def _send_json(sk, body: dict):
    data = json.dumps(body).encode()
    sk.sendall(head(str(len(data))) + data)


def test_a_client_that_hangs_up_has_its_sequences_cancelled(srv):
    eng = srv.model.engine
    for stream in (False, True):
        before = eng.stats["tokens"]
        with socket.create_connection(("127.0.0.1", srv.port)) as sk:
            _send_json(sk, dict(FAN_OUT, stream=stream))  # 32 sequences x 40 tokens
            _in_flight_soon(srv)
            if stream:
                assert b"200 OK" in sk.recv(4096)
        _quiet_soon(srv)  # hung up: every sequence finished (cancelled) within seconds
        assert eng.stats["tokens"] - before < 32 * 40 / 2, (stream, eng.stats["tokens"] - before)
    r = srv.http.post("/v1/completions", json={"prompt": "still here", "max_tokens": 2})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2


def test_a_full_server_answers_503(srv):
    with limits(srv, max_concurrent=1), socket.create_connection(("127.0.0.1", srv.port)) as sk:
        _send_json(sk, FAN_OUT)
        _in_flight_soon(srv)
        r = srv.http.post("/v1/completions", json={"prompt": "a", "max_tokens": 1})
        assert r.status_code == 503 and r.headers["retry-after"] == "1" and r.json()["error"]["code"] == "server_busy"
    _quiet_soon(srv)


def test_bad_serve_flags_are_refused_before_the_model_loads(model_dir):
    from typer.testing import CliRunner
    from marin.serve.cli import app

    busy = socket.create_server(("127.0.0.1", 0))
    with busy:
        for args, words in (
            (["--max-batch", "0"], "--max-batch 0: must be at least 1"),
            (["--prefill-chunk", "0"], "--prefill-chunk 0: must be at least 1"),
            (["--quantize", "int4", "--group-size", "1"], "--group-size 1: must be at least 2"),
            (["--port", "99999"], "--port 99999: must be in 0..65535"),
            (["--port", str(busy.getsockname()[1])], "already in use"),
        ):
            r = CliRunner().invoke(app, ["serve", "--model", str(model_dir / "never-loaded"), *args])
            assert r.exit_code != 0 and words in str(r.exception), (args, r.exception, r.output)  # the flag's error


def test_schemathesis_finds_no_server_error(srv):
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, Phase, given, settings
    from schemathesis import GenerationMode

    base = f"http://127.0.0.1:{srv.port}"
    schema = schemathesis.openapi.from_url(base + "/openapi.json", headers=AUTH)  # the schema needs the key too
    ops = [r.ok() for r in schema.get_all_operations()]
    assert {op.path for op in ops} == {"/health", "/v1/models", "/v1/completions", "/v1/chat/completions"}
    seen = []
    with limits(srv, max_choices=4):
        for op in ops:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)[: 2 if op.method.upper() == "POST" else 1]:

                @given(case=op.as_strategy(generation_mode=mode))
                @settings(
                    max_examples=4,
                    deadline=None,
                    database=None,
                    phases=[Phase.generate],
                    suppress_health_check=list(HealthCheck),
                )
                def check(case):
                    r = case.call(base_url=base, headers=AUTH, timeout=20)
                    seen.append(r.status_code)
                    assert r.status_code < 500, (case.as_curl_command(), r.status_code, r.text[:300])

                check()
    assert any(s == 200 for s in seen) and any(400 <= s < 500 for s in seen), sorted(set(seen))


def test_64_concurrent_requests_while_hostile_requests_are_in_flight(srv):
    want = srv.http.post("/v1/completions", json={"prompt": "Romeo", "max_tokens": 4, "temperature": 0}).json()
    want = want["choices"][0]["text"]
    big = {}

    def fifteen_mb():
        r = httpx.post(srv.url + "/completions", json={"prompt": "x" * 15_000_000}, headers=AUTH, timeout=180)
        big["status"], big["error"] = r.status_code, r.json()["error"]

    def one(i):
        r = srv.http.post("/v1/completions", json={"prompt": "Romeo", "max_tokens": 4, "temperature": 0})
        return r.status_code, r.json()["choices"][0]["text"] if r.status_code == 200 else r.text

    # The 15 MB body shares the event loop with 64 streams; on a loaded 2-core CI machine it can take longer than the
    # default 30 s body timeout to arrive (a 408), so this test gives it longer: the point is the 400 on its length.
    with (
        limits(srv, body_timeout_s=150),
        socket.create_connection(("127.0.0.1", srv.port)) as fan_out,
        cf.ThreadPoolExecutor(65) as pool,
    ):
        _send_json(fan_out, FAN_OUT)  # abandoned below, once the others are done
        _in_flight_soon(srv)
        hostile = pool.submit(fifteen_mb)
        results = [pool.submit(one, i) for i in range(64)]
        for _ in range(5):
            health_answers(srv)
        results = [r.result() for r in results]
        hostile.result()
    assert [st for st, _ in results] == [200] * 64 and all(t == want for _, t in results), results[:3]
    # /health answered while the others streamed (above); how fast is the machine's business, not this test's
    assert (
        big["status"] == 400
        and big["error"]["param"] == "prompt"
        and "15,000,000 characters" in big["error"]["message"]
    )
    _quiet_soon(srv)


@contextlib.contextmanager
def keyless(srv):
    "The fixture's server as `marin serve` without --api-key on 127.0.0.1 runs it (loopback Host names only)."
    from marin.serve.server import allowed_hosts_for

    old = srv.api_key, srv.allowed_hosts
    srv.api_key, srv.allowed_hosts = None, allowed_hosts_for("127.0.0.1", None)
    try:
        yield
    finally:
        srv.api_key, srv.allowed_hosts = old


def test_the_key_guards_every_route_but_health(srv):
    bare = httpx.Client(base_url=f"http://127.0.0.1:{srv.port}", timeout=30)
    for method, route in (("GET", "/metrics"), ("GET", "/openapi.json"), ("GET", "/docs"), ("GET", "/v1/models"),
                          ("POST", "/v1/completions"), ("GET", "/nothing")):  # fmt: skip
        for headers in ({}, {"Authorization": "Bearer sk-wrong"}, {"Authorization": KEY}):
            r = bare.request(method, route, headers=headers)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key", (route, headers, r.text)
    assert bare.get("/health").status_code == 200  # open: a load balancer probes it without the secret
    assert srv.http.get("/metrics").status_code == 200 and "marin_requests" in srv.http.get("/metrics").text
    assert srv.http.get("/openapi.json").json()["paths"]
    with pytest.raises(ValueError, match="--api-key '': empty"):  # an empty key is an error, not a server without auth
        Server(srv.model, port=0, api_key="")


def test_a_keyless_server_answers_loopback_host_names_only(srv):
    with keyless(srv):
        for host in (b"evil.example", b"evil.example:8000", b"127.0.0.1.evil.example", b"localhost.evil.example"):
            st, body, _ = raw(srv, b"GET /v1/models HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
            assert st == 403 and body["error"]["param"] == "Host" and "DNS rebinding" in body["error"]["message"], host
        for host in (b"127.0.0.1:%d" % srv.port, b"localhost", b"[::1]:80", b"LOCALHOST:1"):
            st, body, _ = raw(srv, b"GET /v1/models HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
            assert st == 200 and body["data"][0]["id"] == "tiny", (host, st, body)
    st, _, _ = raw(srv, b"GET /health HTTP/1.1\r\nHost: evil.example\r\n\r\n")  # with a key, any Host is answered
    assert st == 200


def test_unsupported_openai_fields_are_a_400_naming_them(srv):
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    for route, body, field in (
        ("/v1/completions", {"prompt": "a", "logit_bias": {"5": 100}}, "logit_bias"),
        ("/v1/completions", {"prompt": "a", "best_of": 4}, "best_of"),
        ("/v1/completions", {"prompt": "a", "suffix": "end"}, "suffix"),
        ("/v1/chat/completions", dict(chat, response_format={"type": "json_object"}), "response_format"),
        ("/v1/chat/completions", dict(chat, tools=[{"type": "function", "function": {"name": "f"}}]), "tools"),
        ("/v1/chat/completions", dict(chat, min_p=0.1), "min_p"),
    ):
        r = srv.http.post(route, json=body)
        err = r.json()["error"]
        assert r.status_code == 400 and err["param"] == field and err["code"] == "unsupported_parameter", r.text
    quiet = dict(chat, user="me", logit_bias={}, tools=[], response_format={"type": "text"}, best_of=1, suffix=None)
    assert srv.http.post("/v1/chat/completions", json=quiet).status_code == 200  # asking nothing is fine


def test_numbers_and_text_json_allows_but_no_request_means_are_refused(srv):
    for raw_body, field in (
        (b'{"prompt": "a", "temperature": NaN}', "temperature"),
        (b'{"prompt": "a", "top_p": Infinity}', "top_p"),
        (b'{"prompt": "a", "temperature": -1}', "temperature"),
        (b'{"prompt": "a", "seed": 1e20}', "seed"),
        (b'{"prompt": "a", "seed": 100000000000000000000}', "seed"),
        (b'{"prompt": "a", "max_tokens": 1e20}', "max_tokens"),
        (b'{"prompt": "\\ud800"}', "prompt"),
        (b'{"prompt": ["ok", "a\\udfffb"]}', "prompt[1]"),
        (b'{"messages": [{"role": "user", "content": "\\ud800"}]}', "messages[0].content"),
    ):
        route = "/v1/chat/completions" if b"messages" in raw_body else "/v1/completions"
        r = srv.http.post(route, content=raw_body, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["param"] == field, (raw_body, r.text)
