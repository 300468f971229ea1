"""Processes named by what they do (analysis/processes/activity.py): from the files on their
stacks and the stages of their active samples, over a session built from recording events."""

from __future__ import annotations

from infertop.analysis.processes.shares import roles
from infertop.analysis.session import Session
from infertop.model.events import (
    Frame,
    FrameDef,
    ProcessDef,
    SampleWindow,
    StackDef,
    TargetInfo,
    ThreadDef,
)  # fmt: skip

STACKS = {
    # an idle API: uvicorn's loop waiting in select (a wall window's sample)
    "uvicorn": ("/site/uvicorn/server.py", "Server.serve", "/usr/lib/python3.12/selectors.py",
                "EpollSelector.select"),
    "litserve-api": ("/site/litserve/server.py", "LitServer.predict", "/site/starlette/routing.py",
                     "Route.handle"),
    "litserve-forward": ("/site/litserve/loops.py", "run_single_loop", "/site/torch/nn/modules/module.py",
                         "Module._call_impl"),
    "forward": ("/srv/worker.py", "main", "/site/torch/nn/modules/module.py", "Module._call_impl"),
    # a gunicorn sync worker that serves the request and runs the model in it
    "gunicorn-forward": ("/site/gunicorn/workers/sync.py", "SyncWorker.handle_request",
                         "/site/torch/nn/modules/module.py", "Module._call_impl"),
    "gunicorn-master": ("/site/gunicorn/arbiter.py", "Arbiter.run", "/usr/lib/python3.12/selectors.py",
                        "EpollSelector.select"),
    "tokenize": ("/srv/worker.py", "main", "/site/tokenizers/implementations/base.py",
                 "BaseTokenizer.encode_batch"),
    "plain": ("/srv/worker.py", "main", "/srv/worker.py", "crunch"),
    "uvicorn-supervisor": ("/site/uvicorn/supervisors/multiprocess.py", "Multiprocess.run",
                           "/usr/lib/python3.12/threading.py", "Event.wait"),
    "manager": ("/usr/lib/python3.12/multiprocessing/managers.py", "Server.serve_forever",
                "/usr/lib/python3.12/threading.py", "Event.wait"),
    "litserve-main": ("/site/litserve/server.py", "LitServer.run", "/usr/lib/python3.12/multiprocessing/process.py",
                      "BaseProcess.join"),
    # Ray Serve: the proxy serves HTTP under uvicorn; a replica runs the ASGI app's code
    # (starlette's Request) on what the proxy handed it, and the model
    "ray-proxy": ("/site/ray/serve/_private/proxy.py", "HTTPProxy.__call__", "/site/uvicorn/protocols/http/h11_impl.py",
                  "RequestResponseCycle.run_asgi"),
    "ray-replica-body": ("/site/ray/serve/_private/replica.py", "UserCallableWrapper._call_http_entrypoint",
                         "/site/starlette/requests.py", "Request.json"),
    "ray-replica-forward": ("/site/ray/serve/_private/replica.py", "UserCallableWrapper._call_func_or_gen",
                            "/site/torch/nn/modules/module.py", "Module._call_impl"),
    # a router's thread that reads its workers' replies, woken in select (stage queue)
    "reply-reader": ("/srv/router.py", "Router.read_replies", "/usr/lib/python3.12/selectors.py",
                     "PollSelector.select"),
    # a batching process at work: stacking the requests it collected (stage queue)
    "batching": ("/srv/batcher.py", "main", "/srv/batcher.py", "collect_batch"),
}  # fmt: skip


def session(procs: list[tuple[int, int, str, list[tuple[str, int, bool]]]]) -> Session:
    """procs: (pid, ppid, cmdline, [(stack name, samples, in a wall window)])."""
    s = Session()
    s.apply(TargetInfo(procs[0][0], procs[0][2]))
    names = list(STACKS)
    for i, name in enumerate(names):
        f1, fn1, f2, fn2 = STACKS[name]
        s.apply(FrameDef(2 * i, Frame(fn1, f1, 1)))
        s.apply(FrameDef(2 * i + 1, Frame(fn2, f2, 2)))
        s.apply(StackDef(i, (2 * i, 2 * i + 1)))
    for pid, ppid, cmd, _ in procs:
        s.apply(ProcessDef(pid, ppid, cmd))
        s.apply(ThreadDef(pid, "MainThread", pid))
    t = 0.0
    for pid, _, _, stacks in procs:
        for name, n, wall in stacks:
            s.apply(SampleWindow(t, t + 1.0, 100.0, 100, ((pid, names.index(name), n),), idle=wall))
            t += 1.0
    return s


def test_a_litserve_server_names_its_api_and_its_inference_worker() -> None:
    # as LitServe 0.2 runs: a main process that waits, a manager, the API and the worker
    s = session([
        (9, 0, "python server.py", [("litserve-main", 40, True)]),
        (10, 9, "python server.py", [("litserve-api", 30, False), ("uvicorn", 40, True)]),
        (11, 9, "python -c from multiprocessing.resource_tracker import main;main(5)", []),
        (12, 9, "python -c from multiprocessing.spawn import spawn_main", [("litserve-forward", 50, False)]),
        (13, 9, "python server.py", [("manager", 40, True)]),
    ])  # fmt: skip
    assert roles(s) == {
        9: "litserve supervisor", 10: "litserve api", 11: "resource tracker",
        12: "litserve inference", 13: "manager",
    }  # fmt: skip


def test_a_vllm_server_s_processes_are_named_by_their_titles_whatever_their_work() -> None:
    """vLLM names its processes (``setproctitle``); what their stacks show in one run (the
    engine core caught in a queue, the worker in a plain loop) does not rename them."""
    api = "/venv/bin/python -m vllm.entrypoints.openai.api_server --model /m"
    runs = [(("batching", 40, False), ("forward", 40, False)),
            (("forward", 40, False), ("plain", 40, False))]  # fmt: skip
    for core_work, worker_work in runs:
        s = session([
            (40, 0, api, [("uvicorn", 40, True)]),
            (41, 40, "python -c from multiprocessing.resource_tracker import main;main(5)", []),
            (42, 40, "VLLM::EngineCore", [core_work]),
            (43, 42, "VLLM::Worker", [worker_work]),
        ])  # fmt: skip
        assert roles(s) == {
            40: "vllm api", 41: "resource tracker", 42: "vllm engine core",
            43: "vllm model worker",
        }  # fmt: skip


def test_an_engine_s_ranks_are_in_its_processes_names() -> None:
    s = session([
        (50, 0, "/venv/bin/vllm serve /m --tensor-parallel-size 2", [("uvicorn", 40, True)]),
        (51, 50, "VLLM::EngineCore", []),
        (52, 51, "VLLM::Worker_TP0", [("forward", 40, False)]),
        (53, 51, "VLLM::Worker_TP1", [("forward", 40, False)]),
    ])  # fmt: skip
    assert roles(s) == {
        50: "vllm api", 51: "vllm engine core", 52: "vllm model worker tp0",
        53: "vllm model worker tp1",
    }  # fmt: skip
    s = session([
        (60, 0, "python -m sglang.launch_server --model /m", [("uvicorn", 40, True)]),
        (61, 60, "sglang::scheduler_TP0", [("forward", 40, False)]),
        (62, 60, "sglang::detokenizer", [("plain", 40, False)]),
    ])  # fmt: skip
    assert roles(s) == {60: "sglang api", 61: "sglang scheduler tp0", 62: "sglang detokenizer"}


def test_an_idle_api_is_still_the_api_and_workers_are_numbered_by_pid() -> None:
    s = session([
        (20, 0, "python -m uvicorn app:app", [("uvicorn", 40, True)]),
        (22, 20, "python worker.py", [("forward", 40, False)]),
        (21, 20, "python worker.py", [("forward", 35, False), ("plain", 5, False)]),
        (23, 20, "python worker.py", [("tokenize", 30, False), ("plain", 10, False)]),
    ])  # fmt: skip
    assert roles(s) == {20: "api", 21: "inference 1", 22: "inference 2", 23: "tokenizer"}


def test_uvicorn_s_supervisor_is_no_api_and_unnamed_work_keeps_the_tree_s_names() -> None:
    s = session([
        (30, 0, "uvicorn app:app --workers 2", [("uvicorn-supervisor", 40, True)]),
        (31, 30, "python -c spawn_main()", [("uvicorn", 40, True)]),
        (32, 30, "python -c spawn_main()", [("plain", 40, False)]),
        (33, 30, "python -c spawn_main()", [("forward", 5, False)]),  # too few samples to say
    ])  # fmt: skip
    assert roles(s) == {30: "supervisor", 31: "api", 32: "worker 1", 33: "worker 2"}


def test_a_ray_serve_replica_is_inference_and_its_proxy_the_api() -> None:
    """A replica runs starlette's code on requests its proxy served: not an API for that."""
    s = session([
        (20, 0, "ray::ProxyActor", [("ray-proxy", 40, False)]),
        (21, 0, "ray::ServeReplica:embed:Embedder", [("ray-replica-body", 10, False),
                                                     ("ray-replica-forward", 50, False)]),
    ])  # fmt: skip
    assert roles(s) == {20: "ray serve api", 21: "ray serve inference"}


def test_a_router_woken_in_its_waits_stays_the_router_and_batching_work_is_a_batcher() -> None:
    """samples/multiproc_service.py's router: its reply reader caught in select 12 times in 8 s
    (active: woken, or waiting for a CPU) made it a "batcher" by the rule's 10 samples, now and
    then (a CI run's report and the TUI's process list). Waiting is not its work; a process
    that spends its CPU building batches is a batcher."""
    s = session([
        (40, 0, "python router.py", [("reply-reader", 30, False), ("plain", 3, False)]),
        (41, 40, "python -c spawn_main()", [("forward", 40, False)]),
        (42, 40, "python -c spawn_main()", [("batching", 30, False), ("reply-reader", 30, False),
                                            ("plain", 10, False)]),
    ])  # fmt: skip
    assert roles(s) == {40: "router", 41: "inference", 42: "batcher"}


def test_a_worker_that_serves_and_runs_the_model_is_named_for_both() -> None:
    """gunicorn's sync workers each serve HTTP and run the model: both; its master watches
    them."""
    s = session([
        (70, 0, "gunicorn -w 2 app:app", [("gunicorn-master", 40, True)]),
        (71, 70, "gunicorn -w 2 app:app", [("gunicorn-forward", 30, False), ("plain", 5, False)]),
        (72, 70, "gunicorn -w 2 app:app", [("gunicorn-forward", 30, False), ("uvicorn", 20, True)]),
    ])  # fmt: skip
    assert roles(s) == {70: "supervisor", 71: "api + inference 1", 72: "api + inference 2"}
