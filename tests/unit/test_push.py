"""Pushing profiles to a backend, against a stand-in backend on 127.0.0.1 (support/
push_receiver.py): the request forms Pyroscope and Parca document, labels and credentials,
a pprof that ``go tool pprof`` reads with its stage labels, and a backend that is away
(refused, 500, 429) or refuses (400): nothing lost while it is away, nothing retried forever."""

from __future__ import annotations

import base64
import os
import time

import pytest
from support.cli import run_cli
from support.go_pprof import needs_go, traces
from support.push_receiver import Receiver
from support.standin import Live

from infertop.config import Config
from infertop.model.events import TargetInfo
from infertop.push.backends import Endpoint, Series, encode, label_name, series_labels
from infertop.push.live import PushOptions, service_name
from infertop.push.sender import Sender
from infertop.push.spool import Entry, Spool
from infertop.watch.loop import Watch, WatchOptions

FAST = (0.05, 0.2)  # the sender's backoff in these tests: first wait, longest wait


def body(n: int) -> bytes:
    """A request body that says which one it is."""
    return encode("pyroscope", [Series((("n", str(n)),), f"profile {n}".encode())])


def numbers(got) -> list[int]:
    return [int(g.series()[0][0]["n"]) for g in got]


def until(predicate, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "waited too long"
        time.sleep(0.02)
    return value


# -- request forms ---------------------------------------------------------------------------
def test_label_names_are_what_the_backends_take() -> None:
    assert label_name("pod-name") == "pod_name"
    assert label_name("9lives") == "_9lives"
    assert label_name("k8s.io/zone") == "k8s_io_zone"
    labels = series_labels("serve", "h1", 42, (("env", "prod"), ("host", "spoofed")))
    assert labels[:4] == (("__name__", "process_cpu"), ("service_name", "serve"),
                          ("host", "h1"), ("pid", "42"))  # fmt: skip
    assert ("env", "prod") in labels and ("host", "spoofed") not in labels


@pytest.mark.parametrize(
    ("cmdline", "name"),
    [
        ("python serve.py --port 8000", "serve"),
        ("/usr/bin/python3.12 -u -X dev /srv/app/main.py", "main"),
        ("python -m app.server", "app.server"),
        ("/opt/venv/bin/uvicorn app:api --workers 4", "uvicorn"),
        ("", "python"),
    ],
)
def test_service_name_defaults_to_the_script_or_module(cmdline: str, name: str) -> None:
    assert service_name(cmdline) == name


def test_pyroscope_and_parca_forms() -> None:
    s = Series((("__name__", "process_cpu"), ("service_name", "serve")), b"\x1f\x8bpprof")
    pyro = encode("pyroscope", [s])
    parca = encode("parca", [s])
    import json

    p, q = json.loads(pyro), json.loads(parca)
    assert p["series"][0]["labels"][1] == {"name": "service_name", "value": "serve"}
    assert base64.b64decode(p["series"][0]["samples"][0]["rawProfile"]) == b"\x1f\x8bpprof"
    assert len(p["series"][0]["samples"][0]["ID"]) == 36  # a UUID per sample
    assert q["series"][0]["labels"]["labels"][0] == {"name": "__name__", "value": "process_cpu"}
    assert base64.b64decode(q["series"][0]["samples"][0]["rawProfile"]) == b"\x1f\x8bpprof"
    assert q["normalized"] is True
    assert (
        Endpoint.of("pyroscope", "http://h:4040/").url == "http://h:4040/push.v1.PusherService/Push"
    )
    assert Endpoint.of("parca", "http://h:7070").url == "http://h:7070/profiles/writeraw"


def test_tenant_and_credentials_go_in_the_headers_and_never_on_disk(tmp_path) -> None:
    with Receiver().start() as rx:
        ep = Endpoint.of("pyroscope", rx.url, tenant="team-a", token="s3cret")
        spool = Spool(str(tmp_path), 1 << 20)
        sender = Sender(ep, spool, backoff_s=FAST)
        sender.submit(body(1))
        got = rx.wait_taken(1, 10)[0]
        sender.close()
    assert got.path == "/push.v1.PusherService/Push"
    assert got.headers["x-scope-orgid"] == "team-a"
    assert got.headers["authorization"] == "Bearer s3cret"
    assert got.headers["content-type"] == "application/json"
    assert got.headers["connect-protocol-version"] == "1"
    basic = Endpoint.of("parca", rx.url, basic="u:p w").request_headers()
    assert basic["Authorization"] == "Basic " + base64.b64encode(b"u:p w").decode()
    # a spooled request holds the body and the URL only
    spool = Spool(str(tmp_path), 1 << 20)
    spool.put(Entry(ep.url, body(2), time.time()))
    on_disk = b"".join(open(os.path.join(spool.folder, f), "rb").read()
                       for f in os.listdir(spool.folder))  # fmt: skip
    assert b"s3cret" not in on_disk and b"team-a" not in on_disk
    spool.close()


# -- a backend that is away or refuses -----------------------------------------------------------
def test_an_outage_spools_and_everything_arrives_in_order_once_it_is_back(tmp_path) -> None:
    rx = Receiver.reserved(script=[500, (429, {"Retry-After": "0.1"}), 503])
    ep = Endpoint.of("pyroscope", rx.url)
    sender = Sender(ep, Spool(str(tmp_path), 1 << 20), queue_max=2, backoff_s=FAST)
    try:
        for n in range(6):  # refused: two wait in memory, the older four go to the spool
            sender.submit(body(n))
        until(lambda: sender.stats.failing)
        assert "refused" in sender.stats.failing, sender.stats.failing
        assert sender.queued == 2 and sender.spooled == 4
        assert os.listdir(tmp_path)  # on disk
        rx.start()  # back, but answering 500, 429 and 503 first
        got = rx.wait_taken(6, 30)
    finally:
        sender.close()
        rx.stop()
    assert [g.status for g in rx.got[:3]] == [500, 429, 503]
    assert numbers(got) == [0, 1, 2, 3, 4, 5]  # none lost, oldest first
    assert sender.stats.sent == 6 and sender.stats.dropped == 0
    assert sender.spooled == 0 and sender.stats.failing is None
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".push")]


def test_a_refused_request_is_dropped_with_one_warning_and_not_retried(tmp_path) -> None:
    with Receiver(script=[400, 400, 401]).start() as rx:
        sender = Sender(Endpoint.of("pyroscope", rx.url), Spool(str(tmp_path), 1 << 20),
                        backoff_s=FAST)  # fmt: skip
        for n in range(5):
            sender.submit(body(n))
        got = rx.wait_taken(2, 10)
        sender.close()
    assert [g.status for g in rx.got] == [400, 400, 401, 200, 200]  # each tried once
    assert numbers(got) == [3, 4]
    assert sender.stats.dropped == 3 and sender.stats.rejected == 3
    warnings = sender.warnings()
    assert len(warnings) == 2, warnings  # one per status code
    assert "HTTP 400: scripted 400" in warnings[0] and "not retried" in warnings[0]
    assert "--push-token" in warnings[1]  # 401 says what to check
    assert sender.warnings() == []


def test_the_spool_keeps_the_newest_within_its_limit(tmp_path) -> None:
    spool = Spool(str(tmp_path), 3000)
    for n in range(10):
        assert spool.put(Entry("http://x/p", bytes([n]) * 900, float(n)))
    assert len(spool) == 3 and spool.dropped == 7 and spool.bytes <= 3000
    assert spool.oldest().body[0] == 7
    assert not spool.put(Entry("http://x/p", b"x" * 4000, 11.0))  # bigger than the limit
    # a second infertop on the same folder spools beside it, and tidies up after itself
    other = Spool(str(tmp_path), 3000)
    assert other.folder == f"{tmp_path}.{os.getpid()}" and len(other) == 0
    other.close()
    assert not os.path.exists(other.folder)
    spool.close()
    again = Spool(str(tmp_path), 3000)  # what was kept is there for the next run
    assert [again.oldest().body[0]] == [7] and len(again) == 3
    again.close()


def test_the_spool_gives_back_by_when_each_was_made_not_when_it_was_spooled(tmp_path) -> None:
    """The sender spools the request it was sending after the ones made just behind it (an
    outage under load sent 1, 0, 2, ... once): 0.3 ms apart, the older comes back first."""
    spool = Spool(str(tmp_path), 1 << 20)
    made = 1_796_598_298.2741
    spool.put(Entry("http://x/p", b"1", made + 0.0003))
    spool.put(Entry("http://x/p", b"0", made))
    order = []
    while (e := spool.oldest()) is not None:
        order.append(e.body)
        spool.remove(e)
    spool.close()
    assert order == [b"0", b"1"]


def test_with_no_spool_and_a_full_queue_the_oldest_are_dropped_and_counted() -> None:
    rx = Receiver.reserved()
    sender = Sender(Endpoint.of("parca", rx.url), None, queue_max=2, backoff_s=FAST)
    try:
        for n in range(5):
            sender.submit(body(n))
        assert sender.stats.dropped == 3 and sender.queued == 2
        rx.start()
        got = rx.wait_taken(2, 20)
    finally:
        sender.close()
        rx.stop()
    # the oldest go, but for one the thread was already sending when the others came (its try
    # failed on the refused port; on a busy machine the thread may not have started it yet)
    assert numbers(got) in ([3, 4], [0, 4]) and got[0].path == "/profiles/writeraw"


def test_submit_never_waits_for_a_backend_that_hangs(tmp_path) -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)  # accepts the connection, never answers
    try:
        ep = Endpoint.of("pyroscope", f"http://127.0.0.1:{s.getsockname()[1]}")
        sender = Sender(ep, Spool(str(tmp_path), 1 << 20), backoff_s=FAST, timeout_s=1.0)
        t = time.perf_counter()
        for n in range(50):
            sender.submit(body(n))
        took = time.perf_counter() - t
        sender.close(deadline_s=0.5)
    finally:
        s.close()
    assert took < 1.0, took  # the request in flight is the thread's; submit only queues
    assert sender.stats.sent == 0
    assert sender.spooled + sender.stats.dropped + 1 >= 50


# -- the watcher pushing a stand-in collector's samples ------------------------------------------
@needs_go
@pytest.mark.slow  # in-process, but seconds long: not in make test-fast
def test_watch_pushes_one_pprof_per_interval_that_go_pprof_reads(tmp_path) -> None:
    with Receiver().start() as rx:
        push = PushOptions(Endpoint.of("pyroscope", rx.url, tenant="t1"), interval_s=1.0,
                           labels=(("env", "test"),), spool_dir=str(tmp_path / "spool"))  # fmt: skip
        opts = WatchOptions(out_dir=str(tmp_path / "inc"), duration=3.5, auto=False)
        err = __import__("io").StringIO()
        target = TargetInfo(os.getpid(), "python /srv/serve.py --port 8000")
        w = Watch(target, Config(), opts, [Live()], out=err, err=err, push=push)
        assert w.run() == 0
        got = rx.taken()
    assert len(got) >= 3, (len(got), err.getvalue())  # 3 s of intervals, and the last part one
    for g in got:
        ((labels, raws),) = g.series()
        assert labels == {"__name__": "process_cpu", "service_name": "serve", "env": "test",
                          "host": labels["host"], "pid": str(os.getpid())}  # fmt: skip
        assert g.headers["x-scope-orgid"] == "t1"
        assert len(raws) == 1 and raws[0][:2] == b"\x1f\x8b"  # gzipped
    path = tmp_path / "one.pb.gz"
    path.write_bytes(got[0].series()[0][1][0])
    rows = traces(str(path), "-sample_index=samples")
    assert rows, "go tool pprof read no samples"
    assert {r[0]["thread"] for r in rows} == {"MainThread"}
    assert all(r[2][0].startswith("forward") for r in rows), rows  # leaf first
    assert "pushed" in err.getvalue() and f"of {len(got)} profiles" in err.getvalue()


# -- the flags ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--push", "pyroscope:4040"], "is not an http(s) URL"),
        (["--push", "http://h:4040", "--push-interval", "0.5"], "--push-interval 0.5"),
        (["--push", "http://h:4040", "--push-label", "env"], "is not NAME=VALUE"),
        (["--push", "http://h:4040", "--push-user", "alice"], "USER:PASSWORD"),
        (["--push-token", "x"], "--push-token needs --push URL (or --push-otlp URL)"),
        (["--service", "x"], "--service needs --push URL (or --push-otlp URL)"),
        (["--push", "http://h:4040", "--push-spool", "/proc/infertop"], "--push-spool"),
        (["--push", "http://h:4040", "--push-otlp", "http://h:4318"], "both given"),
        (["--push-otlp", "otel:4318"], "--push-otlp 'otel:4318' is not an http(s) URL"),
    ],
)
def test_bad_push_flags_say_what_to_do(tmp_path, args: list[str], says: str) -> None:
    for command in (
        ["record", "-o", str(tmp_path / "r.infertop")],
        ["watch", "--out", str(tmp_path)],
    ):
        r = run_cli(*command, str(os.getpid()), *args)
        assert r.returncode == 2, (command, r)
        assert says in r.stderr and "Traceback" not in r.stderr, r.stderr


# -- OTLP (experimental) --------------------------------------------------------------------------
def _otlp_stacks(req) -> dict[tuple[tuple[str, ...], str, str], int]:
    """{(frames leaf first, stage, thread): value} of every profile of an OTLP request, read
    through its dictionary's indices."""
    d = req.dictionary
    st = list(d.string_table)
    for table in (d.mapping_table, d.location_table, d.function_table, d.attribute_table,
                  d.stack_table):  # fmt: skip
        assert table[0].ByteSize() == 0  # the zero value first, as the format requires
    assert st[0] == ""
    out: dict[tuple[tuple[str, ...], str, str], int] = {}
    for rp in req.resource_profiles:
        for sp in rp.scope_profiles:
            assert sp.scope.name == "infertop"
            for prof in sp.profiles:
                assert (st[prof.sample_type.type_strindex], st[prof.sample_type.unit_strindex]) \
                    == ("cpu", "nanoseconds")  # fmt: skip
                assert len(prof.profile_id) == 16
                for s in prof.samples:
                    locs = d.stack_table[s.stack_index].location_indices
                    names = tuple(st[d.function_table[d.location_table[i].lines[0].function_index]
                                     .name_strindex] for i in locs)  # fmt: skip
                    attrs = {st[d.attribute_table[i].key_strindex]:
                             d.attribute_table[i].value.string_value
                             for i in s.attribute_indices}  # fmt: skip
                    key = (names, attrs["stage"], attrs["thread"])
                    out[key] = out.get(key, 0) + s.values[0]
    return out


def test_otlp_request_holds_the_same_samples_as_the_pprof() -> None:
    pytest.importorskip("opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2")
    from support.push_receiver import Got
    from support.recordings import FRAMES, MAIN, STACKS, WORKER, sample_window

    from infertop.model.pprof_build import CpuProfile

    stages = {0: "preprocess", 1: "forward", 2: "serialize", 3: "idle"}
    prof = CpuProfile(100.0, "python")
    w = sample_window(
        1_700_000_000.0, ((MAIN, 0, 30), (MAIN, 1, 50), (WORKER, 2, 15), (WORKER, 3, 5))
    )
    prof.add_window(w, FRAMES, STACKS, lambda sid, _f: stages[sid], lambda t: f"t{t}")
    raw = prof.encode(w.t_start, w.t_end)
    labels = series_labels("serve", "h1", 4242, (("env", "prod"),))
    got = Got("/v1development/profiles", {}, encode("otlp", [Series(labels, raw)]), 200)
    req = got.otlp()
    (rp,) = req.resource_profiles
    attrs = {a.key: a.value for a in rp.resource.attributes}
    assert attrs["service.name"].string_value == "serve" and attrs["host.name"].string_value == "h1"
    assert attrs["process.pid"].int_value == 4242 and attrs["env"].string_value == "prod"
    by = _otlp_stacks(req)
    period = 1e9 / 100  # a 1 s window of 100 ticks
    assert by[(("forward", "serve", "<module>"), "forward", f"t{MAIN}")] == 50 * period
    assert by[(("encode", "serve", "<module>"), "preprocess", f"t{MAIN}")] == 30 * period
    assert sum(by.values()) == 100 * period


@pytest.mark.slow  # in-process, but seconds long: not in make test-fast
def test_watch_push_otlp_sends_protobuf_to_the_development_path(tmp_path) -> None:
    pytest.importorskip("opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2")
    with Receiver().start() as rx:
        push = PushOptions(Endpoint.of("otlp", rx.url), interval_s=1.0, spool_dir=None)
        opts = WatchOptions(out_dir=str(tmp_path / "inc"), duration=2.5, auto=False)
        err = __import__("io").StringIO()
        target = TargetInfo(os.getpid(), "python /srv/serve.py")
        assert Watch(target, Config(), opts, [Live()], out=err, err=err, push=push).run() == 0
        got = rx.taken()
    assert len(got) >= 2, err.getvalue()
    assert {g.path for g in got} == {"/v1development/profiles"}
    assert {g.headers["content-type"] for g in got} == {"application/x-protobuf"}
    by = _otlp_stacks(got[0].otlp())
    assert by and all(names[0] == "forward" and stage == "forward" and thread == "MainThread"
                      for (names, stage, thread) in by)  # fmt: skip


@pytest.mark.slow  # in-process, but seconds long: not in make test-fast
def test_watch_json_says_what_was_pushed_and_what_was_dropped(tmp_path) -> None:
    import io
    import json

    with Receiver(script=[400]).start() as rx:
        push = PushOptions(Endpoint.of("parca", rx.url), interval_s=1.0, spool_dir=None)
        opts = WatchOptions(out_dir=str(tmp_path), duration=3.5, auto=False, as_json=True)
        err = io.StringIO()
        target = TargetInfo(os.getpid(), "python -m app.server")
        assert Watch(target, Config(), opts, [Live()], out=err, err=err, push=push).run() == 0
        got = rx.got
    lines = [json.loads(line) for line in err.getvalue().splitlines()]  # each line is JSON
    (warning,) = [d["warning"] for d in lines if "warning" in d]
    assert "HTTP 400" in warning and "not retried" in warning
    end = lines[-1]
    assert end["end"] == "duration reached" and end["incidents"] == []
    p = end["push"]
    assert (p["sent"], p["dropped"], p["rejected"]) == (len(got) - 1, 1, 1), p
    assert p["intervals"] == len(got) and p["failing"] is None
    assert got[1].series()[0][0]["service_name"] == "app.server"
