"""Which model forwards the agent times by default (``find_model_codes``): the roots' only, with
real torch and a real transformers model in this process."""

from __future__ import annotations

import gc

import pytest

from infertop.agent.payload import stages
from infertop.agent.payload.stages import find_known_codes, find_model_codes

# torch and transformers are imported by the tests, not at collection: each test worker
# collects every module, and these two take seconds to import


@pytest.fixture(scope="module")
def models():  # type: ignore[no-untyped-def]
    """(torch, Block, Model): a model whose root forward sits under ``torch.no_grad``."""
    import torch

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = torch.nn.ModuleList([Block(), Block()])

        @torch.no_grad()
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for b in self.blocks:
                x = b(x)
            return x

    return torch, Block, Model


def test_only_the_roots_forward_is_timed_under_its_decorator(monkeypatch, models) -> None:
    torch, Block, Model = models
    monkeypatch.setattr(stages, "MAX_MODEL_CODES", 10_000)  # other tests' models may be alive
    model = Model()
    lonely = torch.nn.Linear(2, 2)  # a module with no sub-modules is no model
    codes = find_model_codes()
    assert Model.forward.__wrapped__.__code__ in codes  # not torch.no_grad's shared wrapper
    for nested in (Block.forward, torch.nn.Sequential.forward, torch.nn.Linear.forward):
        assert nested.__code__ not in codes
    assert lonely is not None and model is not None


def test_a_hugging_face_model_is_timed_as_forward(monkeypatch) -> None:
    from transformers import BertConfig, BertModel

    monkeypatch.setattr(stages, "MAX_MODEL_CODES", 10_000)
    bert = BertModel(BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2,
                                num_attention_heads=2, intermediate_size=32))  # fmt: skip
    found = find_known_codes()
    forward = BertModel.forward
    while hasattr(forward, "__wrapped__"):
        forward = forward.__wrapped__
    assert found[forward.__code__] == ("forward", None)
    layer_forward = type(bert.encoder.layer[0]).forward
    while hasattr(layer_forward, "__wrapped__"):
        layer_forward = layer_forward.__wrapped__
    assert layer_forward.__code__ not in found
    del bert
    gc.collect()


def test_triton_s_model_class_is_found_on_sys_and_in_a_loaded_module(monkeypatch) -> None:
    """Triton's Python backend loads ``model.py`` and puts its ``TritonPythonModel`` on ``sys``
    (older stubs import it as ``1.model``): its ``execute`` is a forward call by default, its
    ``initialize`` and anything called ``TritonPythonModel`` that is no class are not."""
    import sys
    import types

    class TritonPythonModel:
        def initialize(self, args):  # noqa: ANN001
            return args

        def execute(self, requests):  # noqa: ANN001
            return list(requests)

    monkeypatch.setattr(sys, "TritonPythonModel", TritonPythonModel, raising=False)
    found = find_known_codes(models=[])
    assert found[TritonPythonModel.execute.__code__] == ("forward", None)
    assert TritonPythonModel.initialize.__code__ not in found

    monkeypatch.delattr(sys, "TritonPythonModel")
    old = types.ModuleType("1.model")
    old.TritonPythonModel = type("TritonPythonModel", (), {"execute": lambda self, requests: requests})
    odd = types.ModuleType("odd")
    odd.TritonPythonModel = "not a class"
    monkeypatch.setitem(sys.modules, "1.model", old)
    monkeypatch.setitem(sys.modules, "odd", odd)
    found = find_known_codes(models=[])
    assert found[old.TritonPythonModel.execute.__code__] == ("forward", None)
    assert TritonPythonModel.execute.__code__ not in found


def test_a_stage_function_in_a_frozen_heap_is_found_through_its_module(monkeypatch, models) -> None:
    """vLLM's processes and a Ray Serve replica freeze their heaps (``gc.freeze()``): the
    collector then lists none of it; a ``--stage`` rule's function is found in the dictionaries
    of the loaded modules and their classes, without a walk of the heap."""
    import sys
    import types

    app = types.ModuleType("frozen_app")
    exec(
        "import functools\n"
        "def handler(x):\n    return x\n"
        "def deco(f):\n    @functools.wraps(f)\n    def w(*a):\n        return f(*a)\n    return w\n"
        "class Engine:\n"
        "    def step(self):\n        return 1\n"
        "    @staticmethod\n    def make_batch():\n        return []\n"
        "    @deco\n    def schedule(self):\n        return 2\n",
        app.__dict__,
    )
    monkeypatch.setitem(sys.modules, "frozen_app", app)
    patterns = stages.parse_stage_patterns(
        [["handle", "*:handler"], ["step", "Engine.step"], ["batch", "*make_batch"],
         ["schedule", "Engine.schedule"]]
    )  # fmt: skip
    gc.collect()
    gc.freeze()
    try:
        monkeypatch.setattr(stages, "MIN_FROZEN", 0)
        with monkeypatch.context() as m:  # the collector's list alone: nothing to be found
            m.setattr(stages, "loaded_functions", lambda limit=None, pace=None: [])
            assert app.handler.__code__ not in stages.find_stage_codes(patterns)
        found = stages.find_stage_codes(patterns)
        assert found.get(app.handler.__code__) == "handle"
        assert found.get(app.Engine.step.__code__) == "step"
        assert found.get(app.Engine.make_batch.__code__) == "batch"
        assert found.get(app.Engine.schedule.__wrapped__.__code__) == "schedule"
    finally:
        gc.unfreeze()


def test_a_model_is_found_on_the_stack_of_the_thread_running_its_forward(models) -> None:
    """A model held in a frozen heap (or built after the configuration) is found when its
    forward runs: the outermost forward a module's call called, under its decorator; not a
    sub-module's."""
    import sys
    import threading

    torch, Block, Model = models
    inside, release = threading.Event(), threading.Event()

    class Waiting(torch.nn.Module):  # a sub-module that holds the forward open
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            inside.set()
            release.wait(10)
            return x

    model = Model()
    model.blocks.append(Waiting())
    t = threading.Thread(target=model, args=(torch.zeros(1, 4),), daemon=True)
    t.start()
    try:
        assert inside.wait(10)
        codes = stages.models_on_stacks(sys._current_frames())
        assert stages.models_on_stacks(sys._current_frames(), ignore=(t.ident,)) == []
    finally:
        release.set()
        t.join(10)
    assert codes == [Model.forward.__wrapped__.__code__]


def test_looking_through_the_modules_keeps_to_its_share_of_a_core() -> None:
    """The frozen heap's look through the loaded modules sleeps off all but its share of the
    CPU it takes (its own thread's time, measured)."""
    pace = stages.Paced(share=0.25, step_s=0.0005)
    funcs = stages.loaded_functions(pace=pace)
    assert len(funcs) > 1000  # this process's modules define thousands of functions
    if pace.cpu_s:  # steps were taken: each slept three times its CPU
        assert pace.slept_s == pytest.approx(pace.cpu_s * 3, rel=1e-6)


def test_an_engine_s_own_model_is_not_timed_as_a_root_module(models) -> None:
    """vLLM's model is timed by its entry point (``_model_forward``, one call a step): neither
    it, nor its sampler, nor a module called inside it is timed as a model."""
    import sys
    import threading

    torch, _Block, _Model = models
    inside, release = threading.Event(), threading.Event()
    space: dict = {"torch": torch, "inside": inside, "release": release}
    src = (
        "class EngineModel(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.linear = torch.nn.Linear(4, 4)\n"
        "    def forward(self, x):\n"
        "        inside.set()\n"
        "        release.wait(10)\n"
        "        return self.linear(x)\n"
    )
    exec(compile(src, "/venv/lib/python3.12/site-packages/vllm/model_executor/models/m.py", "exec"), space)
    model = space["EngineModel"]()
    t = threading.Thread(target=model, args=(torch.zeros(1, 4),), daemon=True)
    t.start()
    try:
        assert inside.wait(10)
        assert stages.models_on_stacks({t.ident: sys._current_frames()[t.ident]}) == []
    finally:
        release.set()
        t.join(10)
