"""forge serve against real clients, on the CPU with SmolLM2 on 127.0.0.1: the openai package and curl for chat
and completion, streaming and not; greedy replies equal to `forge run`'s; 8 concurrent clients whose replies
equal each prompt's reply alone; a client that leaves mid-stream (its sequence freed at once); every refusal
with its status and body (400, 404, 405, 413, 503 with Retry-After, 507 with the plan's numbers); a model
unloaded for another when the budget holds one; a load run of 300 requests from 16 clients with the server's
resident memory and open descriptors flat from the 50th request on; SIGTERM ending a stream and exiting 0.
Every server started here is stopped on every path. Runs in about a minute and a half on 2 cores.
usage: check_serve.py --forge build/forge --model SmolLM2.gguf --big qwen2.5-1.5b.gguf"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

passed = failed = 0
servers = []


def check(good, text):
    global passed, failed
    if good:
        passed += 1
        print("ok   " + text, flush=True)
    else:
        failed += 1
        print("FAIL " + text, flush=True)


class Server:
    """forge serve on a free port the system picks (--port 0); the port is read from its stderr."""

    def __init__(self, forge, args, workdir):
        self.log = open(os.path.join(workdir, "serve-%d.log" % len(servers)), "w+")
        self.proc = subprocess.Popen([forge, "serve", "--port", "0", "--cpu", "--threads", "2"] + args,
                                     stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL)
        servers.append(self)
        self.port = None
        deadline = time.time() + 60
        while time.time() < deadline and self.proc.poll() is None:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.text())
            if m:
                self.port = int(m.group(1))
                break
            time.sleep(0.05)
        if self.port is None:
            raise RuntimeError("forge serve did not start: " + self.text()[-2000:])

    def text(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def stop(self, sig=signal.SIGTERM, timeout=20):
        """Stops the server; returns its exit code (None if it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        return self.proc.returncode

    def request(self, method, path, body=None, raw=None, timeout=120):
        """One request on its own connection (closed after): (status, headers, text)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        headers = {"Connection": "close"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        text = r.read().decode("utf-8", "replace")
        conn.close()
        return r.status, dict(r.getheaders()), text

    def metric(self, name, model=None):
        _, _, text = self.request("GET", "/metrics")
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            key, _, value = line.rpartition(" ")
            if key == name or (model and key == '%s{model="%s"}' % (name, model)):
                return float(value)
        return None

    def proc_status(self):
        """(resident kB, open descriptors) of the server process."""
        with open("/proc/%d/status" % self.proc.pid) as f:
            rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
        return rss, len(os.listdir("/proc/%d/fd" % self.proc.pid))


def error_of(text):
    try:
        return json.loads(text)["error"]
    except (ValueError, KeyError, TypeError):
        return {}


def curl(server, args):
    """curl with the status code on the last line: (status, body)."""
    out = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", "--max-time", "60"] + args, capture_output=True,
                         encoding="utf-8", errors="replace").stdout
    body, _, code = out.rpartition("\n")
    return int(code or 0), body


def forge_run(forge, model, prompt, n, chat):
    args = [forge, "run", "-m", model, "-p", prompt, "-n", str(n), "--ctx", "512", "--cpu", "--threads", "2", "--quiet"]
    r = subprocess.run(args + (["--chat"] if chat else []), capture_output=True, encoding="utf-8", errors="replace", timeout=120)
    return r.returncode, r.stdout


def plan_total(forge, model, args):
    r = subprocess.run([forge, "plan", model, "--json", "--cpu"] + args, capture_output=True, encoding="utf-8")
    return json.loads(r.stdout)["plan"]["total_bytes"]


LONG_CHAT = {"messages": [{"role": "user", "content": "Write a long story about a dragon who learns to bake bread."}],
             "max_tokens": 400, "temperature": 0}


def stream_then_leave(server, body, chunks):
    """Starts a streamed chat on a raw socket, reads until `chunks` data lines came, then closes it; returns the
    data lines seen, or -1 when the reply had ended already."""
    s = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
              % len(data) + data)
    got = b""
    while got.count(b"data: ") < chunks:
        part = s.recv(4096)
        if not part:
            break
        got += part
    s.close()
    return -1 if b"[DONE]" in got else got.count(b"data: ")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--forge", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--big", required=True, help="a model whose plan is several times SmolLM2's (Qwen2.5-1.5B)")
    ap.add_argument("--requests", type=int, default=300, help="requests of the load run (at least 100)")
    ap.add_argument("--perf", help="append the load run's figures to this file as one JSON line")
    a = ap.parse_args()
    try:
        import openai
    except ImportError:
        check(False, "the openai package imports (pip install openai)")
        return
    context = ["--ctx", "--kv", "--batch", "--threads", "--mem-fraction", "--headroom", "--gpu", "--cpu", "--device", "--seqs"]
    r = subprocess.run([a.forge, "serve", "--help"], capture_output=True, encoding="utf-8")
    missing = [f for f in ["-m", "--models", "--host", "--port", "--queue", "--max-body"] + context if f not in r.stdout]
    check(r.returncode == 0 and r.stdout.startswith("usage: forge serve") and not missing,
          "forge serve --help: exit %d, flags missing from the text: %s" % (r.returncode, missing))
    r = subprocess.run([a.forge, "serve"], capture_output=True, encoding="utf-8")
    check(r.returncode == 1 and "usage: forge serve" in r.stderr, "forge serve without a model: exit 1 with its usage")
    r = subprocess.run([a.forge, "serve", "-m", a.model, "--port", "70000"], capture_output=True, encoding="utf-8")
    check(r.returncode == 1 and "[0, 65535]" in r.stderr, "--port 70000 refused with its range")
    r = subprocess.run([a.forge, "serve", "-m", a.model, "--host", "example"], capture_output=True, encoding="utf-8")
    check(r.returncode == 1 and "IPv4" in r.stderr, "--host example refused: not an IPv4 address")
    r = subprocess.run([a.forge, "serve", "-m", a.model, "--on-budget", "warn"], capture_output=True, encoding="utf-8")
    check(r.returncode == 1 and "507" in r.stderr, "--on-budget warn refused: a server answers 507")
    workdir = tempfile.mkdtemp(prefix="forge-serve-")
    name = os.path.basename(a.model)[:-5]
    try:
        run_main_server(a, openai, workdir, name)
        run_busy_server(a, workdir)
        run_refused_at_start(a, workdir)
        run_models_server(a, openai, workdir)
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def run_main_server(a, openai, workdir, name):
    s = Server(a.forge, ["-m", a.model, "--ctx", "512", "--seqs", "16", "--max-body", "64K"], workdir)
    st, _, text = s.request("GET", "/health")
    health = json.loads(text)
    check(st == 200 and health["status"] == "ready" and health["models"][0]["status"] == "ready",
          "GET /health: 200 and ready once the model is loaded (%d %s)" % (st, text.strip()[:120]))
    st, _, text = s.request("GET", "/v1/models")
    check(st == 200 and [m["id"] for m in json.loads(text)["data"]] == [name], "GET /v1/models lists %s" % name)

    client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % s.port, api_key="none", max_retries=0, timeout=120)
    question = "What is the capital of France?"
    r = client.chat.completions.create(model=name, messages=[{"role": "user", "content": question}], max_tokens=16,
                                       temperature=0)
    chat_text = r.choices[0].message.content
    u = r.usage
    check(bool(chat_text) and r.choices[0].finish_reason in ("stop", "length") and u.prompt_tokens > 0 and
          0 < u.completion_tokens <= 16 and u.total_tokens == u.prompt_tokens + u.completion_tokens,
          "openai chat: %r, finish %s, usage %d+%d=%d" % (chat_text, r.choices[0].finish_reason, u.prompt_tokens,
                                                         u.completion_tokens, u.total_tokens))
    rc, run_text = forge_run(a.forge, a.model, question, 16, True)
    check(rc == 0 and run_text.rstrip("\n") == chat_text.rstrip("\n"),
          "greedy chat equals `forge run --chat -n 16`: %r vs %r" % (chat_text, run_text))
    pieces, finish, usage = [], None, None
    for chunk in client.chat.completions.create(model=name, messages=[{"role": "user", "content": question}], max_tokens=16,
                                                temperature=0, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
        if getattr(chunk, "usage", None):
            usage = chunk.usage
    check("".join(pieces) == chat_text and finish == r.choices[0].finish_reason and usage is not None and
          usage.completion_tokens == u.completion_tokens and len(pieces) >= 2,
          "openai chat streamed in %d chunks: the same text, finish and usage" % len(pieces))

    prompt = "The three primary colors are"
    r = client.completions.create(model=name, prompt=prompt, max_tokens=12, temperature=0)
    comp_text = r.choices[0].text
    check(len(comp_text) > 0 and r.usage.completion_tokens == 12 and r.choices[0].finish_reason == "length",
          "openai completion: %r, finish %s" % (comp_text, r.choices[0].finish_reason))
    rc, run_text = forge_run(a.forge, a.model, prompt, 12, False)
    check(rc == 0 and run_text.rstrip("\n") == comp_text.rstrip("\n"),
          "greedy completion equals `forge run -n 12`: %r vs %r" % (comp_text, run_text))
    streamed = "".join(c.choices[0].text for c in client.completions.create(model=name, prompt=prompt, max_tokens=12,
                                                                             temperature=0, stream=True) if c.choices)
    check(streamed == comp_text, "openai completion streamed: the same text")
    st, body = curl(s, ["-N", "http://127.0.0.1:%d/v1/completions" % s.port, "-d",
                        json.dumps({"prompt": prompt, "max_tokens": 12, "temperature": 0, "stream": True})])
    lines = [l for l in body.split("\n") if l]
    check(st == 200 and lines[-1] == "data: [DONE]" and all(l.startswith("data: ") for l in lines) and
          json.loads(lines[-2][6:])["usage"]["completion_tokens"] == 12,
          "curl stream: SSE data lines ending with [DONE], usage in the last chunk")
    # stop strings cut the reply before them, streamed or not
    stop = comp_text.strip().split()[1] if len(comp_text.split()) > 1 else comp_text.strip()[:2]
    r = client.completions.create(model=name, prompt=prompt, max_tokens=12, temperature=0, stop=[stop])
    streamed = "".join(c.choices[0].text for c in client.completions.create(model=name, prompt=prompt, max_tokens=12,
                                                                             temperature=0, stop=stop, stream=True) if c.choices)
    check(r.choices[0].text == comp_text[:comp_text.index(stop)] and r.choices[0].finish_reason == "stop" and
          streamed == r.choices[0].text, "stop %r: the reply ends before it (%r), streamed too" % (stop, r.choices[0].text))
    # the same seed, the same sample
    kw = dict(model=name, prompt=prompt, max_tokens=10, temperature=0.9, top_p=0.95, seed=7)
    one, two = client.completions.create(**kw).choices[0].text, client.completions.create(**kw).choices[0].text
    check(one == two, "temperature 0.9 with seed 7 twice: the same text (%r)" % one)

    # 8 clients at once: each reply is what its prompt gets alone
    prompts = ["Once upon a time", "The best way to learn", "In the year 2050", "My favourite food is",
               "The ocean is", "A good friend", "Computers are", "The mountain"]
    together = [None] * 8

    def ask(i):
        c = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % s.port, api_key="none", max_retries=0, timeout=120)
        together[i] = c.completions.create(model=name, prompt=prompts[i], max_tokens=8, temperature=0).choices[0].text
    threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    alone = [client.completions.create(model=name, prompt=p, max_tokens=8, temperature=0).choices[0].text for p in prompts]
    check(all(together) and together == alone, "8 concurrent clients: each reply equals its prompt's reply alone")

    # a client that leaves mid-stream frees its sequence at once
    before_cancel = s.metric("forge_requests_cancelled_total", name)
    seen = stream_then_leave(s, dict(LONG_CHAT, stream=True), 3)
    t0 = time.time()
    busy = None
    while time.time() - t0 < 5:
        busy = s.metric("forge_sequences_busy", name)
        if busy == 0:
            break
        time.sleep(0.05)
    freed_s = time.time() - t0
    gen1 = s.metric("forge_tokens_generated_total", name)
    time.sleep(0.5)
    gen2 = s.metric("forge_tokens_generated_total", name)
    check(seen >= 3 and busy == 0 and freed_s < 2 and gen1 == gen2 and
          s.metric("forge_requests_cancelled_total", name) == before_cancel + 1,
          "a client gone after %d chunks: sequence freed %.2f s later, generation stopped, counted as cancelled" % (seen, freed_s))

    # refusals
    url = "http://127.0.0.1:%d" % s.port
    st, body = curl(s, [url + "/v1/chat/completions", "-d", '{"messages": [{"role": "user", "content": "hi"}'])
    check(st == 400 and error_of(body).get("type") == "invalid_request_error", "malformed JSON: 400 (%s)" % body.strip())
    st, body = curl(s, [url + "/v1/completions", "-d", '{"prompt": "hi"} x'])
    check(st == 400, "trailing bytes after the JSON value: 400")
    st, body = curl(s, [url + "/v1/completions", "-d", '{"prompt": "hi", "max_tokens": 4, "x": ' + "[" * 40 + "]" * 40 + "}"])
    check(st == 400 and "nests deeper" in error_of(body).get("message", ""), "nesting 40 deep: 400 (%s)" % body.strip())
    st, body = curl(s, [url + "/v1/completions", "-d", '{"prompt": "hi", "temperature": "hot"}'])
    check(st == 400 and "temperature" in error_of(body).get("message", ""), "temperature \"hot\": 400 naming the field")
    big = os.path.join(workdir, "big.json")
    with open(big, "w") as f:
        f.write(json.dumps({"prompt": "x" * 100000}))
    st, body = curl(s, [url + "/v1/completions", "--data-binary", "@" + big])
    check(st == 413 and "65536" in error_of(body).get("message", ""), "a 100 kB body past --max-body 64K: 413 (%s)" % body.strip())
    st, body = curl(s, [url + "/v1/completions", "-d", '{"model": "nosuch", "prompt": "hi"}'])
    check(st == 404 and "nosuch" in error_of(body).get("message", ""), "unknown model: 404 naming it")
    st, body = curl(s, [url + "/v2/nothing"])
    check(st == 404, "unknown path: 404")
    st, headers, body = s.request("GET", "/v1/chat/completions")
    check(st == 405 and headers.get("Allow") == "POST" and "Retry-After" not in headers and
          error_of(body).get("type") == "method_not_allowed", "GET on /v1/chat/completions: 405, Allow: POST")
    st, headers, body = s.request("POST", "/health", raw=b"")
    check(st == 405 and headers.get("Allow") == "GET, HEAD", "POST on /health: 405, Allow: GET, HEAD")
    long_prompt = "one two three four five six seven eight nine ten " * 60
    st, body = curl(s, [url + "/v1/completions", "-d", json.dumps({"prompt": long_prompt, "max_tokens": 4})])
    msg = error_of(body).get("message", "")
    check(st == 400 and "512" in msg and re.search(r"prompt is \d+ tokens", msg), "a prompt longer than the context: 400 (%s)" % msg)
    st, body = curl(s, [url + "/v1/completions", "-d", json.dumps({"prompt": "hi", "max_tokens": 600})])
    msg = error_of(body).get("message", "")
    check(st == 400 and "600" in msg and "512" in msg, "max_tokens 600 past a 512-position context: 400 (%s)" % msg)

    # the load run: 300 requests from 16 clients, memory and descriptors read after the 50th and at the end
    n_requests, n_clients = max(100, a.requests), 16
    gen0, t0 = s.metric("forge_tokens_generated_total", name), time.time()
    figures = load_run(s, name, 50, n_clients)
    rss50, fd50 = settled(s)
    figures += load_run(s, name, n_requests - 50, n_clients)
    rss_end, fd_end = settled(s, fd50)
    wall = time.time() - t0
    tokens = s.metric("forge_tokens_generated_total", name) - gen0
    ok = sum(1 for f in figures if f == 200)
    check(ok == n_requests, "load run: %d of %d requests answered 200 (%d clients)" % (ok, n_requests, n_clients))
    check(rss_end - rss50 <= 4096, "resident memory flat from the 50th request on (<= 4 MiB): %d kB -> %d kB" % (rss50, rss_end))
    check(fd_end <= fd50, "open descriptors flat from the 50th request on: %d -> %d" % (fd50, fd_end))
    st, _, text = s.request("GET", "/health")
    check(st == 200 and json.loads(text)["models"][0]["busy"] == 0, "after the load run: ready, no sequence busy")
    print("load run: %d requests, %d clients, %.1f s, %d tokens generated (%.1f t/s aggregate), RSS %d -> %d kB, fds %d -> %d"
          % (n_requests, n_clients, wall, tokens, tokens / wall, rss50, rss_end, fd50, fd_end), flush=True)
    if a.perf:
        with open(a.perf, "a") as f:
            f.write(json.dumps({"requests": n_requests, "clients": n_clients, "wall_s": round(wall, 2), "tokens": tokens,
                                "tokens_per_s": round(tokens / wall, 2), "rss_kb": [rss50, rss_end], "fds": [fd50, fd_end]}) + "\n")
    rc = s.stop()
    check(rc == 0 and "every model freed" in s.text(), "SIGTERM on an idle server: exit 0, every model freed")


def settled(s, fds_at_most=None):
    """(resident kB, descriptors) after the last requests' connections have had time to close: 0.5 s, and up
    to 3 s more while the descriptors are above fds_at_most (a leak stays above it and fails)."""
    time.sleep(0.5)
    t0 = time.time()
    while fds_at_most is not None and s.proc_status()[1] > fds_at_most and time.time() - t0 < 3:
        time.sleep(0.1)
    return s.proc_status()


def load_run(s, name, n, clients):
    results = []
    lock = threading.Lock()
    todo = list(range(n))

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop()
            try:
                st, _, _ = s.request("POST", "/v1/completions",
                                     {"model": name, "prompt": "Item %d:" % i, "max_tokens": 3, "temperature": 0.5, "seed": i})
            except OSError:
                st = 0
            with lock:
                results.append(st)
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def wait_metric(s, metric, model, value, seconds=10):
    """The metric once it equals value, or its last reading after `seconds`."""
    t0 = time.time()
    while True:
        got = s.metric(metric, model)
        if got == value or time.time() - t0 > seconds:
            return got
        time.sleep(0.05)


def run_refused_at_start(a, workdir):
    """-m with a budget the model cannot fit: the server stays up, /health says failed with the reason (503),
    a request gets 507 with the numbers."""
    s = Server(a.forge, ["-m", a.model, "--ctx", "512", "--mem-fraction", "0.0001"], workdir)
    st, _, text = s.request("GET", "/health")
    h = json.loads(text)
    check(st == 503 and h["status"] == "failed" and h["models"][0]["status"] == "failed" and
          "does not fit" in (h["models"][0]["reason"] or ""), "-m over the budget: /health 503 failed with the reason")
    st, _, text = s.request("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2})
    err = error_of(text)
    check(st == 507 and err.get("type") == "insufficient_memory" and err.get("required_bytes", 0) > err.get("budget_bytes", 0) > 0,
          "-m over the budget: a request gets 507 (required %s, budget %s)" % (err.get("required_bytes"), err.get("budget_bytes")))
    st, _, text = s.request("GET", "/health")
    check(st == 503 and json.loads(text)["status"] == "failed", "and /health is still failed after it, never ready")
    check(s.stop() == 0, "SIGTERM: exit 0")


def run_busy_server(a, workdir):
    """One sequence and a queue of one: the third request at once is refused with 503 and Retry-After."""
    s = Server(a.forge, ["-m", a.model, "--ctx", "2048", "--seqs", "1", "--queue", "1"], workdir)
    name = os.path.basename(a.model)[:-5]
    long_body = LONG_CHAT
    first = socket.create_connection(("127.0.0.1", s.port), timeout=60)
    # a stream that outlasts what follows (SmolLM2's greedy story runs 1,500 tokens without an end, 15 s
    # or more on two cores): the SIGTERM below must find it running
    data = json.dumps(dict(long_body, stream=True, max_tokens=1500)).encode()
    first.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
    first.recv(4096)  # the headers and a first chunk: the sequence is taken
    # a queued request whose client leaves is out of the queue at once
    waiting = socket.create_connection(("127.0.0.1", s.port), timeout=60)
    data = json.dumps(dict(long_body, max_tokens=8)).encode()
    waiting.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
    queued = wait_metric(s, "forge_requests_queued", name, 1)
    cancelled = s.metric("forge_requests_cancelled_total", name)
    waiting.close()
    t0 = time.time()
    left = wait_metric(s, "forge_requests_queued", name, 0)
    check(queued == 1 and left == 0 and time.time() - t0 < 2 and s.metric("forge_requests_cancelled_total", name) == cancelled + 1,
          "a queued client that leaves: out of the queue %.2f s later, counted as cancelled" % (time.time() - t0))
    second = threading.Thread(target=lambda: s.request("POST", "/v1/chat/completions", dict(long_body, max_tokens=8)))
    second.start()
    wait_metric(s, "forge_requests_queued", name, 1)
    busy = s.metric("forge_sequences_busy", name)
    st, headers, text = s.request("POST", "/v1/chat/completions", dict(long_body, max_tokens=4))
    err = error_of(text)
    check(busy == 1 and st == 503 and headers.get("Retry-After") == "1" and err.get("type") == "server_busy" and "1 sequences" in err.get("message", ""),
          "every sequence busy and the queue full: 503 with Retry-After (%s)" % err.get("message"))
    # SIGTERM while a stream runs and another waits: the stream ends, the server exits 0
    rc = s.stop()
    rest = b""
    try:
        while True:
            part = first.recv(65536)
            if not part:
                break
            rest += part
    except OSError:
        pass
    first.close()
    second.join(30)
    check(rc == 0 and "every model freed" in s.text() and not second.is_alive() and b"shutting down" in rest,
          "SIGTERM during a stream and a queued request: both end, exit %s, every model freed" % rc)


def run_models_server(a, openai, workdir):
    """--models DIR with a budget of 1.5 SmolLM2 plans: a and b (two names for SmolLM2) take turns, the big model
    is refused with 507 and the loaded one keeps answering."""
    folder = os.path.join(workdir, "models")
    os.mkdir(folder)
    os.symlink(os.path.abspath(a.model), os.path.join(folder, "a.gguf"))
    os.symlink(os.path.abspath(a.model), os.path.join(folder, "b.gguf"))
    os.symlink(os.path.abspath(a.big), os.path.join(folder, "big.gguf"))
    args = ["--ctx", "512", "--seqs", "2"]
    small, large = plan_total(a.forge, a.model, args), plan_total(a.forge, a.big, args)
    with open("/proc/meminfo") as f:
        available = int(re.search(r"MemAvailable:\s+(\d+)", f.read()).group(1)) * 1024
    fraction = 1.5 * small / available
    s = Server(a.forge, ["--models", folder, "--mem-fraction", "%.6f" % fraction] + args, workdir)
    st, _, text = s.request("GET", "/health")
    budget = json.loads(text)["budget_bytes"]
    check(small < budget < min(2 * small, large), "budget %d between one SmolLM2 plan (%d) and two, below the big plan (%d)"
          % (budget, small, large))
    client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % s.port, api_key="none", max_retries=0, timeout=120)
    r = client.completions.create(model="a", prompt="Hello", max_tokens=4, temperature=0)
    check(r.usage.completion_tokens == 4 and s.metric("forge_model_loaded", "a") == 1, "model a loaded on its first request")
    st, body = curl(s, ["http://127.0.0.1:%d/v1/completions" % s.port, "-d", json.dumps({"model": "big", "prompt": "Hello",
                                                                                          "max_tokens": 4})])
    e = json.loads(body) if body.startswith("{") else {}
    err = e.get("error", {})
    check(st == 507 and err.get("type") == "insufficient_memory" and err.get("required_bytes") == large and
          err.get("budget_bytes", large) < large and err.get("budget_bytes", budget + 1) <= budget and
          set(err.get("fits", {})) >= {"ctx", "kv"} and e.get("system", {}).get("memory_total_bytes", 0) > 0 and
          e.get("system", {}).get("memory_free_bytes", 0) > 0,
          "the big model: 507 insufficient_memory, required_bytes = `forge plan` total %d, budget_bytes %s, fits %s (%s)"
          % (large, err.get("budget_bytes"), err.get("fits"), err.get("message")))
    check(s.metric("forge_model_loaded", "big") == 0 and s.metric("forge_model_planned_bytes", "big") == 0 and
          s.metric("forge_requests_refused_memory_total", "big") == 1, "the refused model: nothing loaded, the refusal counted")
    r = client.completions.create(model="a", prompt="Hello", max_tokens=4, temperature=0)
    st, _, text = s.request("GET", "/health")
    check(r.usage.completion_tokens == 4 and s.metric("forge_model_loaded", "a") == 1 and st == 200,
          "after the 507 the loaded model still answers and /health is 200")
    r = client.completions.create(model="b", prompt="Hello", max_tokens=4, temperature=0)
    check(r.usage.completion_tokens == 4 and s.metric("forge_model_loaded", "a") == 0 and s.metric("forge_model_loaded", "b") == 1,
          "model b needs the room: a (idle, least recently used) unloaded, b answers")
    rc = s.stop(signal.SIGINT)
    check(rc == 0, "SIGINT: exit 0")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # a broken run is a failure with its reason, never a silent pass
        import traceback
        traceback.print_exc()
        check(False, "the test ran to its end (%s: %s)" % (type(e).__name__, e))
    for srv in servers:
        srv.stop()
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)
