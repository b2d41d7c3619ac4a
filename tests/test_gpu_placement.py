"""GPU placement is the router's: the plan's device reaches the UDF, tasks see their own GPUs,
and ``auto`` weighs a model against the GPU's free memory.

No GPU exists on the machines these tests run on. What needs one is simulated in the
narrowest way that still exercises omni's code: ``torch.cuda.is_available`` answering
True (models.device's choice), and :func:`spark_udfs.arrow_stage.bind_gpus` fed the
addresses a Spark task would hold. A GPU route on this machine must fall back to CPU.
The Spark side - a standalone cluster whose worker offers (fake) GPU addresses - is in
tests/test_spark_engine.py.
"""

from __future__ import annotations

import json

import pytest

from catalog_ext.errors import OmniError
from omni_iceberg.api import Omni
from omni_iceberg.backfill import planner
from omni_iceberg.backfill.planner import _GpuProbe, gpu_free_mb, route
from omni_iceberg.features import placement
from omni_iceberg.features.library import models
from omni_iceberg.features.udf import feature, get_udf


@feature(outputs={"where_run": "string"}, inputs=["RawData.raw_data"], name="where_run", form="class",
         engine="auto", model_size_mb=100)
class WhereRun:
    """Says where it was set up, what the plan said at call time, and where the built-ins' loader puts a model."""

    def setup(self, device):
        self.setup_device = device

    def __call__(self, raw_data):
        seen = f"{self.setup_device}|{placement.planned_device()}|{models.device()}"
        return [seen] * len(raw_data)


@feature(outputs={"where_fn": "string"}, inputs=["RawData.raw_data"], name="where_fn", engine="gpu",
         model_size_mb=100)
def where_fn(raw_data):
    """A row function on the GPU route: it learns its device from the placement alone."""
    return f"{placement.planned_device()}|{models.device()}"


def _gpu_visible() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


no_gpu = pytest.mark.skipif(_gpu_visible(), reason="asserts the CPU fallback of a machine without a GPU")


# ---- the placement context ------------------------------------------------------------------
def test_placement_is_set_for_the_block_only_and_checks_its_device():
    assert placement.planned_device() is None
    with placement.placed("cuda"):
        assert placement.planned_device() == "cuda"
        with placement.placed("cpu"):
            assert placement.planned_device() == "cpu"
        with placement.placed(None):  # None leaves the outer placement
            assert placement.planned_device() == "cuda"
    assert placement.planned_device() is None
    assert [placement.device_of_route(r) for r in ("cpu", "gpu")] == ["cpu", "cuda"]
    with pytest.raises(ValueError, match="unknown route 'tpu'"):
        placement.device_of_route("tpu")
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        with placement.placed("tpu"):
            pass


def test_models_device_follows_the_plan_even_where_torch_sees_a_gpu(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the GPU this machine lacks
    assert models.device() == "cuda"  # no plan: the loader looks for itself, as before
    with placement.placed("cpu"):
        assert models.device() == "cpu"  # the plan said CPU: never "cuda" on its own
    with placement.placed("cuda"):
        assert models.device() == "cuda"
        monkeypatch.setenv("OMNI_FORCE_CPU", "1")
        assert models.device() == "cpu"


@no_gpu
def test_a_gpu_route_without_a_gpu_falls_back_to_cpu():
    with placement.placed("cuda"):
        assert models.device() == "cpu"


def test_setup_receives_the_planned_device_when_it_asks_for_it():
    spec = get_udf("where_run")
    assert spec.instantiate("cuda").setup_device == "cuda"
    assert spec.instantiate("cpu").setup_device == "cpu"

    class Plain:
        def setup(self):
            self.ready = True

    from omni_iceberg.features.udf import register_udf

    plain = register_udf("plain_setup_for_placement", Plain, form="class")
    assert plain.instantiate("cuda").ready  # a setup without a device parameter is called as before


# ---- the local engine hands the stage's route to its UDFs ------------------------------------
@pytest.fixture
def table(tmp_path):
    o = Omni(home=tmp_path / "home")
    o.create_table("web")
    src = tmp_path / "a.jsonl"
    src.write_text("".join(json.dumps({"raw_data": f"doc {i}"}) + "\n" for i in range(3)))
    o.submit("web", [str(src)], batch="a")
    o.register_features("web", [WhereRun, where_fn])
    return o


@no_gpu
@pytest.mark.parametrize("isolation", ["inline", "process"])
def test_the_plans_route_reaches_the_udf_on_the_local_engine(table, isolation):
    # routed CPU (the plan's view: no GPU): setup, the call and the model loader all say cpu
    cpu = table.backfill("web", ["where_run"], isolation=isolation, progress=False, has_gpu=False)
    assert cpu.status == "succeeded"
    assert set(table.read("web", columns=["where_run"]).column("where_run").to_pylist()) == {"cpu|cpu|cpu"}
    # routed GPU (the plan's view: a GPU): the UDF is told cuda, the loader falls back to cpu here
    gpu = table.backfill("web", ["where_fn"], isolation=isolation, progress=False, has_gpu=True)
    assert gpu.plan["stages"][0]["engine"] == "gpu"
    assert set(table.read("web", columns=["where_fn"]).column("where_fn").to_pylist()) == {"cuda|cpu"}


# ---- auto routing weighs the model against free GPU memory -------------------------------------
def test_auto_route_weighs_the_model_against_free_gpu_memory():
    big = WhereRun.definition.model_copy(update={"model_size_mb": 500})
    factor = planner.GPU_MEMORY_FACTOR
    engine, why = route(big, True, free_mb=500 * factor - 1)
    assert engine == "cpu"
    assert why == (f"auto: model 500 MB needs {500 * factor:.0f} MB of GPU memory ({factor:g}x), "
                   f"the GPU has {500 * factor - 1:.0f} MB free")
    assert route(big, True, free_mb=500 * factor)[0] == "gpu"
    assert route(big, True) == ("gpu", "auto: model 500 MB >= 50 MB and a GPU is present "
                                       "(its free memory not measured here)")
    assert route(big, False, free_mb=10_000) == ("cpu", "auto: no GPU present")
    small = big.model_copy(update={"model_size_mb": 5})
    assert route(small, True, free_mb=10_000) == ("cpu", "auto: model 5 MB < 50 MB")
    declared = big.model_copy(update={"engine": "gpu"})
    assert route(declared, True, free_mb=1)[0] == "gpu"  # a declared GPU feature is the user's call


def test_the_probe_measures_free_memory_only_for_this_machines_gpu(monkeypatch):
    assert _GpuProbe(True).free_mb is None  # a view the caller fixed (a cluster's): nothing measured here
    assert _GpuProbe(False).free_mb is None
    monkeypatch.setattr(planner, "gpu_available", lambda: True)
    monkeypatch.setattr(planner, "gpu_free_mb", lambda: 700.0)
    probe = _GpuProbe(None)
    assert probe and probe.free_mb == 700.0
    big = WhereRun.definition.model_copy(update={"model_size_mb": 500})
    assert route(big, probe)[0] == ("gpu" if 500 * planner.GPU_MEMORY_FACTOR <= 700 else "cpu")


@no_gpu
def test_no_gpu_here_means_no_free_memory_and_cpu_routes(table):
    assert gpu_free_mb() is None
    plan = table.plan("web", ["where_run"])  # the probe decides: no GPU on this machine
    assert plan.features["where_run"].engine == "cpu"
    assert plan.features["where_run"].route_reason == "auto: no GPU present"


# ---- each Spark task sees exactly its GPUs ------------------------------------------------------
def test_every_task_gets_its_own_gpus_in_a_reused_worker():
    from spark_udfs.arrow_stage import GpuAssignmentError, bind_gpus

    env: dict[str, str] = {}
    assert bind_gpus(["1"], True, env, False, None) == "1" and env["CUDA_VISIBLE_DEVICES"] == "1"
    # the same process, the next task holds GPU 0: the mask follows (it kept "1" before)
    assert bind_gpus(["0"], True, env, False, None) == "0" and env["CUDA_VISIBLE_DEVICES"] == "0"
    assert bind_gpus(["0", "1"], True, env, False, None) == "0,1"
    # a CPU-stage task was assigned no GPU: it sees none
    assert bind_gpus([], False, env, False, None) == "" and env["CUDA_VISIBLE_DEVICES"] == ""
    # a GPU task with no assignment (local mode): the executor's own view comes back
    assert bind_gpus([], True, env, False, "3") == "3"
    assert bind_gpus([], True, env, False, None) is None and "CUDA_VISIBLE_DEVICES" not in env
    # CUDA already started on GPU 0 in this worker: a task holding GPU 1 cannot be served here
    env["CUDA_VISIBLE_DEVICES"] = "0"
    assert bind_gpus(["0"], True, env, True, None) == "0"
    with pytest.raises(GpuAssignmentError, match=r"started on GPU\(s\) '0' .* assigned this task GPU\(s\) '1'"):
        bind_gpus(["1"], True, env, True, None)
    assert isinstance(GpuAssignmentError("x"), OmniError) and env["CUDA_VISIBLE_DEVICES"] == "0"
    assert bind_gpus([], False, env, True, None) == "0"  # a CPU task: the plan places its UDFs on CPU
