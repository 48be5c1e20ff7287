#!/usr/bin/env python3
# Writes the seed corpora of the harnesses whose inputs are other programs'
# answers, from real runs of the built devgate (and of the interpreter, the
# node protocol and Slurm where they are here): each seed is what the real
# thing printed, framed as the harness reads it (its header comment says how).
#   tests/fuzz/make_seeds.py build/devgate tests/fuzz/corpus [HARNESS...]
# Needs python3 and the probe beside devgate; Slurm's seeds need scontrol
# (otherwise the committed ones stay). Reruns overwrite the seeds it makes.
import json, os, re, subprocess, sys, tempfile

dg = os.path.abspath(sys.argv[1])
corpus = os.path.abspath(sys.argv[2])
only = set(sys.argv[3:])
src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
tmp = tempfile.mkdtemp(prefix="devgate-seeds-")
os.chmod(tmp, 0o755)  # munged wants its socket folder reachable by all
env = dict(os.environ, LC_ALL="C", DEVGATE_LEDGER=os.path.join(tmp, "ledger.db"))


def put(harness, name, data):
    """Writes a seed, this machine's paths replaced by neutral ones."""
    data = data if isinstance(data, bytes) else data.encode()
    for mine, neutral in ((os.path.dirname(dg), "/home/user/project/build"),
                          (src, "/home/user/project"), (tmp, "/tmp/seeds")):
        data = data.replace(mine.encode(), neutral.encode())
    # other processes' paths (the environment proof lists busy ones)
    data = re.sub(rb"/(work|root)/[^\"\s\\]*", b"/opt/other/tool", data)
    d = os.path.join(corpus, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def run(args, stdin=b"", extra_env=None, fds=False, timeout=300):
    """(exit status, stdout, stderr, fd 3's bytes when fds) of one real run."""
    e = dict(env, **(extra_env or {}))
    r3 = w3 = None
    if fds:  # the pipe as the child's fd 3, through a shell's redirection
        r3, w3 = os.pipe()
        args = ["sh", "-c", 'exec "$0" "$@" 3>&%d %d>&-' % (w3, w3)] + args
    p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=e, cwd=tmp, pass_fds=(w3,) if fds else ())
    if fds:
        os.close(w3)
    out, err = p.communicate(stdin, timeout=timeout)
    pipe = b""
    if fds:
        with os.fdopen(r3, "rb") as f:
            pipe = f.read()
    return p.returncode, out, err, pipe


def want(h):
    return not only or h in only


# ---- fuzz_trial: 6 header bytes, the child's bytes, NUL, its stderr line ----
def trial_seeds():
    def fixture(name, spec, fault=None, flags=1):
        e = {"DEVGATE_FAULT": fault} if fault else {}
        rc, _, err, pipe = run([dg, "--no-ledger", "__trial", "--spec-fd", "0", "--result-fd", "3"],
                               json.dumps(spec).encode(), e, fds=True)
        sig = -rc if rc < 0 else 0
        head = bytes([0, flags, sig, rc if rc >= 0 else 0, spec["batch"].bit_length() - 1, 3])
        line = err.decode(errors="replace").strip().splitlines()[:1]
        put("fuzz_trial", name, head + pipe + b"\0" + "".join(line).encode())

    base = {"batch": 8, "steps": 8, "epochs": 1, "backend": "cpu", "threads": 1, "sync_every": 1}
    fixture("fixture-ok", base)
    fixture("fixture-budget", dict(base, batch=64, mem_budget=1 << 16))
    fixture("fixture-bad-spec", dict(base, model="no-such-model"))
    fixture("fixture-crash", dict(base, batch=16), fault="trial-crash@16")
    script = os.path.join(src, "tests/python/scripts/sweep_train.py")

    def command(name, args, flags=1, kills=0, steps=12):
        rc, out, err, _ = run([dg, "--no-ledger", "run", "--json", "--", "python3", script] + args,
                              extra_env={"DEVGATE_PROBE_MAX_STEPS": str(steps)})
        head = bytes([1, flags, 0, kills, 6, 2])
        put("fuzz_trial", name, head + out + b"\0" + b"the child's run record does not parse")

    command("command-ok", ["--batch", "64", "--data-ms", "3"])
    command("command-killed", ["--batch", "128", "--kill-above", "64"], flags=1 | (1 << 4), kills=1)
    command("command-unknown-oom", ["--batch", "128", "--kill-above", "64"], flags=1 | (2 << 4))
    put("fuzz_trial", "command-no-record", bytes([1, 1, 0, 0, 3, 2]) + b"\0cannot start: no such file")


# ---- fuzz_profile_window: a device byte, the probe's window file, NUL, the run record ----
def profile_seeds():
    def one(name, script, args, spec="2:3", wall="60", trace=False, device=0):
        out = os.path.join(tmp, name + ".json")
        if os.path.exists(out):
            os.unlink(out)
        e = {"DEVGATE_PROBE_MAX_STEPS": "8", "DEVGATE_PROBE_PROFILE": spec,
             "DEVGATE_PROBE_PROFILE_OUT": out, "DEVGATE_PROBE_PROFILE_WALL": wall}
        if trace:
            e.update(DEVGATE_PROBE_TRACE=os.path.join(tmp, name + ".trace.json"),
                     DEVGATE_PROBE_TRACE_MAX_EVENTS="200")
        rc, rec, err, _ = run([dg, "--no-ledger", "run", "--json", "--", "/usr/bin/python3",
                               os.path.join(src, script)] + args, extra_env=e)
        window = open(out, "rb").read() if os.path.exists(out) else b""
        put("fuzz_profile_window", name, bytes([device]) + window + b"\0" + rec)

    train = "tests/python/scripts/accept_train.py"
    targs = ["--batch", "16", "--device", "cpu", "--epochs", "1000", "--steps", "20"]
    one("torch-cpu", train, targs)
    one("torch-cpu-trace", train, targs, trace=True)
    one("torch-cuda-asked", train, targs, device=1)
    one("torch-cut", train, targs, spec="1:50", wall="0.001")
    one("no-torch", "tests/python/scripts/sweep_train.py", ["--batch", "8"])


# ---- fuzz_python_answer: 3 header bytes, the probe's stdout, NUL, its stderr ----
def python_seeds():
    import re as _re
    text = open(os.path.join(src, "src/env/python.c")).read()
    start = text.index("probe_script[] =")
    lits = text[start:text.index('";\n', start) + 1]
    script = "".join(_re.findall(r'"((?:[^"\\]|\\.)*)"', lits)).encode().decode("unicode_escape")

    def one(name, argv, end=0):
        rc, out, err, _ = run(argv, extra_env={"PYTHONPATH": ""})
        head = bytes([end if rc >= 0 else 3, 1 if rc >= 0 else 0, rc if rc >= 0 else -rc])
        if end == 0 and rc != 0:
            head = bytes([1, 1, rc & 255])
        put("fuzz_python_answer", name, head + out + b"\0" + err)

    one("torch", ["/usr/bin/python3", "-c", script])
    one("path-python", ["python3", "-c", script])
    one("isolated", ["/usr/bin/python3", "-I", "-S", "-c", script])
    one("traceback", ["/usr/bin/python3", "-c", "import devgate_no_such_module"], end=1)
    one("not-python", ["sh", "-c", "echo 'Python 3.11.7'; echo warning: >&2"])


# ---- fuzz_remote_node and fuzz_remote_answer: a real remote session ----
# DEVGATE_SSH names a stand-in ssh that runs each call's command line with
# sh here (as the node's login shell would) and keeps its command, input and
# answer: the node's requests are fuzz_remote_node's seeds (with the run's
# folder as the node left it), its answers fuzz_remote_answer's.
FAKE_SSH = r"""#!/usr/bin/env python3
import os, subprocess, sys
a = sys.argv[1:]
if "-O" in a:
    sys.exit(0)
cmd = a[a.index("--") + 2]
log = os.environ["SEED_LOG"]
n = len([f for f in os.listdir(log) if f.endswith(".cmd")])
data = sys.stdin.buffer.read()
p = subprocess.run(["sh", "-c", cmd], input=data, capture_output=True)
for ext, b in (("in", data), ("out", p.stdout), ("cmd", cmd.encode())):
    with open(os.path.join(log, "%03d.%s" % (n, ext)), "wb") as f:
        f.write(b)
sys.stdout.buffer.write(p.stdout)
sys.stderr.buffer.write(p.stderr)
sys.exit(p.returncode)
"""


def remote_seeds():
    import gzip, hashlib, random, shlex, struct
    log, node = os.path.join(tmp, "sshlog"), os.path.join(tmp, "node")
    os.makedirs(log, exist_ok=True)
    ssh = os.path.join(tmp, "fake-ssh")
    with open(ssh, "w") as f:
        f.write(FAKE_SSH)
    os.chmod(ssh, 0o755)
    rnd, n = random.Random(3), 48
    labs = bytes(rnd.randrange(4) for _ in range(n))
    with gzip.open(os.path.join(tmp, "img.idx.gz"), "wb") as f:
        f.write(struct.pack(">HBBIII", 0, 8, 3, n, 8, 8) + bytes(l * 60 for l in labs for _ in range(64)))
    with gzip.open(os.path.join(tmp, "lab.idx.gz"), "wb") as f:
        f.write(struct.pack(">HBBI", 0, 8, 1, n) + labs)
    os.makedirs(os.path.join(tmp, "sub"), exist_ok=True)
    with open(os.path.join(tmp, "sub", "train.py"), "w") as f:
        f.write("print('step 1 loss 0.5')\n")
    e = {"DEVGATE_SSH": ssh, "SEED_LOG": log}
    R = [dg, "remote", "--devgate", dg, "--cache", node, "gpu-01"]
    run(R + ["train", "--data", "idx:img.idx.gz,lab.idx.gz", "--model", "mlp", "--batch", "16",
             "--steps", "2", "--epochs", "1", "--threads", "1"], extra_env=e)
    run(R + ["run", "--", "python3", "sub/train.py"], extra_env=e)
    run(R + ["argv", "a b", "it's", "$(x)"], extra_env=e)
    run(R + ["collect"], extra_env=e)
    token = "20261201-101500-9a3c11f0"  # the harness's planted run
    kind = {"info": 0, "have": 1, "put": 1, "tree": 1, "list": 2, "bucket": 3,
            "fetch": 4 | (1 << 3)}
    for c in sorted(f for f in os.listdir(log) if f.endswith(".cmd")):
        base = os.path.join(log, c[:-4])
        words = shlex.split(open(base + ".cmd").read())
        words = words[words.index("__node") + 1:]
        if words[:1] == ["--cache"]:
            words = words[2:]
        data, out = open(base + ".in", "rb").read(), open(base + ".out", "rb").read()
        req = words[0]
        if req == "fetch" and b'"verb":"run"' in out:
            kind_byte = 4 | (3 << 3)
        else:
            kind_byte = kind.get(req)
        if kind_byte is not None and out:
            put("fuzz_remote_answer", "%s-%s" % (c[:3], req), bytes([kind_byte]) + out)
        if req in ("start", "bucket"):
            continue  # they run devgate itself: not sent by the harness
        sha = hashlib.sha256(data).hexdigest()
        files = [b"", b"", b"", b""]
        rid = next((w for w in words[1:] if len(w) == 24 and w[8] == "-"), None)
        if rid:
            d = os.path.join(node, "runs", rid)
            files = [open(os.path.join(d, f), "rb").read() if os.path.exists(os.path.join(d, f))
                     else b"" for f in ("run.json", "exit_status", "record.json", "progress.log")]
        words = ["SHA" if w == sha else "SIZE" if w == str(len(data)) and req == "put"
                 else token if w == rid else w for w in words]
        put("fuzz_remote_node", "%s-%s" % (c[:3], req),
            "\n".join(words).encode() + b"\0" + data + b"\0" + b"\0".join(files) + b"\0\x1f")
    # a run whose supervisor died: its lock free, no exit status
    put("fuzz_remote_node", "wait-lost", ("wait\n" + token).encode() + b"\0\0" +
        b'{"verb":"gate","argv":["gate"]}' + b"\0\0\0devgate: gate ...\n\0\x19")


# ---- fuzz_pool and fuzz_scontrol: a real pool job on a throwaway Slurm ----
def pool_seeds():
    import shutil, time
    srv = os.path.join(tmp, "srv")
    tools = os.path.join(src, "tools", "servers.sh")
    if subprocess.run([tools, "start", srv, "slurm"], env=env).returncode != 0:
        print("Slurm did not start here: the committed pool and scontrol seeds stay")
        return
    try:
        senv = dict(env)
        for line in open(os.path.join(srv, "slurm.env")):
            line = line.strip().replace("export ", "")
            if "=" in line:
                k, v = line.split("=", 1)
                senv[k] = v.strip("'\"")
        pool = os.path.join(tmp, "pool")
        r = subprocess.run([dg, "--ledger", os.path.join(tmp, "team.db"), "pool", "submit",
                            "--tasks", "3", "--dir", pool, "--", "gate", "--backend", "cpu",
                            "--size", "64"], env=senv, cwd=tmp, capture_output=True, text=True)
        job = r.stdout.split("pool job ")[1].split(":")[0]
        subprocess.run(["scancel", job + "_2"], env=senv)

        def scontrol(name):
            out = subprocess.run(["scontrol", "-o", "show", "job", job], env=senv,
                                 capture_output=True).stdout
            put("fuzz_scontrol", name, job.encode() + b"\n" + out)
            return out
        early = scontrol("early")
        for _ in range(240):
            st = subprocess.run([dg, "pool", "status", job, "--dir", pool, "--json"], env=senv,
                                capture_output=True, text=True).stdout
            try:
                if all(t["state"] not in ("pending", "running") for t in json.loads(st)["tasks"]):
                    break
            except ValueError:
                pass
            time.sleep(0.5)
        done = scontrol("ended")
        wrap = subprocess.run(["sbatch", "--parsable", "--wrap", "true"], env=senv,
                              capture_output=True).stdout
        put("fuzz_scontrol", "sbatch-parsable", b"4242\n" + wrap)
        jd = os.path.join(pool, job)

        def rd(*p):
            f = os.path.join(jd, *p)
            return open(f, "rb").read() if os.path.exists(f) else b""

        def as4242(b):
            return re.sub(rb"(JobId|ArrayJobId)=" + job.encode() + rb"\b", rb"\g<1>=4242", b)
        for t, sc in ((0, done), (1, early), (2, done)):
            parts = [rd("job.json"), as4242(sc)] + [rd("task-%d" % t, f) for f in
                                                    ("task.json", "exit.json", "record.json",
                                                     "task.log")]
            put("fuzz_pool", "task-%d" % t, b"\0".join(parts))
        shutil.rmtree(pool, ignore_errors=True)
    finally:
        subprocess.run([tools, "stop", srv], env=env)


# ---- fuzz_slo_http: the bytes clients sent on one connection to the fixture ----
def slo_http_seeds():
    """What devgate slo (libcurl) and curl really send, captured by a server
    that keeps each connection's bytes and answers like an OpenAI endpoint;
    then the refusals' inputs: chunked, a lying or huge Content-Length, an
    oversized head, bare LFs, NUL bytes, a TLS hello, noise."""
    import socket, threading
    conns, lock = [], threading.Lock()
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    port = srv.getsockname()[1]
    sse = (b'data: {"choices":[{"index":0,"text":"a","finish_reason":null}]}\n\n'
           b'data: {"choices":[{"index":0,"text":"","finish_reason":"length"}],'
           b'"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}\n\n'
           b"data: [DONE]\n\n")

    def answer(c, head, body):
        if head.startswith(b"GET /v1/models"):
            out = b'{"object":"list","data":[{"id":"m","object":"model"}]}'
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d"
                      b"\r\n\r\n%s" % (len(out), out))
        elif head.startswith(b"POST"):
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(sse), sse))
        else:
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    def serve(c):
        got = b""
        c.settimeout(5)
        try:
            while True:
                end = got.find(b"\r\n\r\n")
                if end >= 0:
                    head = got[:end + 4]
                    m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
                    n = int(m.group(1)) if m else 0
                    if b"100-continue" in head.lower() and len(got) == end + 4:
                        c.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                    if b"transfer-encoding" in head.lower():
                        n = len(got) - end - 4 if got.endswith(b"0\r\n\r\n") else 1 << 30
                    if len(got) >= end + 4 + n:
                        with lock:
                            conns.append(got[:end + 4 + n])
                        answer(c, head, got[end + 4:end + 4 + n])
                        got = got[end + 4 + n:]
                        continue
                d = c.recv(65536)
                if not d:
                    break
                got += d
        except OSError:
            pass
        c.close()

    def accept():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    base = "http://127.0.0.1:%d" % port
    run([dg, "--no-ledger", "slo", "--target", base, "--model", "m", "--concurrency", "2",
         "--duration", "1s", "--warmup", "0", "--max-windows", "3", "--max-tokens", "2",
         "--slo", "e2e:5s", "--no-env", "--quiet"], timeout=120)
    run([dg, "--no-ledger", "slo", "--target", base + "/v1/chat/completions", "--model", "m",
         "--concurrency", "1", "--duration", "1s", "--warmup", "0", "--max-windows", "3",
         "--slo", "e2e:5s", "--no-env", "--quiet"], timeout=120)
    big = os.path.join(tmp, "big.json")
    with open(big, "w") as f:
        json.dump({"model": "m", "prompt": "x" * 4000, "max_tokens": 2, "stream": True}, f)
    for args in (["%s/health" % base], ["%s/metrics" % base, "%s/v1/models" % base],
                 ["-0", "%s/health" % base], ["-X", "DELETE", "%s/v1/models" % base],
                 ["-H", "Expect: 100-continue", "-d", "@" + big, "%s/v1/completions" % base],
                 ["-H", "Transfer-Encoding: chunked", "-d", '{"model":"m","prompt":"hi"}',
                  "%s/v1/completions" % base],
                 ["-H", "Connection: close", "-d", '{"model":"m","messages":[{"role":"user",'
                  '"content":"hi"}],"stream":true}', "%s/v1/chat/completions?x=1" % base]):
        run(["curl", "-s", "-m", "5", "-o", "/dev/null"] + args, timeout=30)
    srv.close()
    seen = set()
    for raw in conns:
        first = raw.split(b"\r\n", 1)[0]
        name = re.sub(rb"[^a-z0-9]+", b"_", first.lower()).strip(b"_").decode()[:40]
        name += "_chunked" if b"transfer-encoding" in raw.lower() else ""
        name += "_continue" if b"100-continue" in raw.lower() else ""
        if name not in seen:
            seen.add(name)
            put("fuzz_slo_http", name, raw)
    keep = b"".join(c for c in conns if c.startswith(b"GET"))[:2000]
    put("fuzz_slo_http", "pipelined", keep)
    post = next((c for c in conns if c.startswith(b"POST /v1/completions")), b"POST / HTTP/1.1\r\n\r\n")
    head, _, body = post.partition(b"\r\n\r\n")
    put("fuzz_slo_http", "lying_length_short",
        re.sub(rb"(?i)content-length: *\d+", b"Content-Length: 3", head) + b"\r\n\r\n" + body)
    put("fuzz_slo_http", "lying_length_long",
        re.sub(rb"(?i)content-length: *\d+", b"Content-Length: 99999", head) + b"\r\n\r\n" + body)
    put("fuzz_slo_http", "length_huge", head + b"\r\nContent-Length: 99999999999999999999999\r\n\r\n")
    put("fuzz_slo_http", "length_negative", head + b"\r\nContent-Length: -1\r\n\r\n")
    # over the harness's second limit (64 bytes); the 1 MiB one is in tests/unit/test_slo.c
    put("fuzz_slo_http", "head_oversized", b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * 4096)
    put("fuzz_slo_http", "bare_lf", b"GET /health HTTP/1.1\nHost: h\n\nGET /metrics HTTP/1.1\n\n")
    put("fuzz_slo_http", "nul_bytes", b"GET /hea\0lth HTTP/1.1\r\nHost: \0\r\n\r\n\0\r\n\r\n")
    put("fuzz_slo_http", "tls_hello", bytes.fromhex("16030100c4010000c00303") + bytes(range(64)))
    put("fuzz_slo_http", "garbage", b"\r\n\r\n \t\r\n\r\nOPTIONSXX /" + b"/" * 300 + b" HTTP/9\r\n\r\n")


if want("fuzz_trial"):
    trial_seeds()
if want("fuzz_profile_window"):
    profile_seeds()
if want("fuzz_python_answer"):
    python_seeds()
if want("fuzz_remote_node") or want("fuzz_remote_answer"):
    remote_seeds()
if want("fuzz_pool") or want("fuzz_scontrol"):
    pool_seeds()
if want("fuzz_slo_http"):
    slo_http_seeds()
print("seeds written under", corpus)
