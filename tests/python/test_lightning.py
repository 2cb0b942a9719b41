"""torch_fl.lightning: Trainer(accelerator="fl") on one device (in process), mixed precision
aimed at fl, and devices=2 with strategy="ddp" over flccl (Lightning relaunches the script)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

L = pytest.importorskip("lightning.pytorch")

from lightning.pytorch.accelerators import AcceleratorRegistry  # noqa: E402
from lightning.pytorch.plugins.precision import MixedPrecision  # noqa: E402
from lightning.pytorch.strategies import SingleDeviceStrategy  # noqa: E402

import torch_fl.lightning  # noqa: E402,F401
from torch_fl.lightning import FlAccelerator  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _lightning_fit  # noqa: E402
from conftest import BUILD, run_python  # noqa: E402
import torch_fl  # noqa: E402


def _binding_problem(code: str) -> str | None:
    """Runs `code` in a fresh interpreter (a binding bug may crash it); the last line of its
    error output if it fails, else None."""
    proc = run_python("import torch, torch_fl\n" + code, timeout=120)
    if proc.returncode == 0:
        return None
    if proc.returncode < 0:
        return f"the interpreter died of signal {-proc.returncode}"
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    return (lines[-1] if lines else f"exit code {proc.returncode}")[:160]


def test_fl_is_registered_with_lightning():
    assert "fl" in AcceleratorRegistry
    assert AcceleratorRegistry["fl"]["accelerator"] is FlAccelerator
    assert FlAccelerator.is_available() and FlAccelerator.auto_device_count() == torch.fl.device_count() >= 2
    assert FlAccelerator.name() == "fl"


@pytest.mark.parametrize("devices,expected", [(1, [0]), (2, [0, 1]), (-1, "all"), ("auto", "all"),
                                              ("1", [0]), ("0,1", [0, 1]), ([1], [1])])
def test_parse_devices(devices, expected):
    if expected == "all":
        expected = list(range(torch.fl.device_count()))
    assert FlAccelerator.parse_devices(devices) == expected
    assert FlAccelerator.get_parallel_devices(devices) == [torch.device("fl", i) for i in expected]


def test_parse_devices_rejects_missing_indices():
    with pytest.raises(ValueError, match="no index"):
        FlAccelerator.parse_devices([torch.fl.device_count()])


@pytest.mark.parametrize("devices,message", [("0,0", "listed once"), ([1, 1], "listed once"),
                                             (-2, "-1 \\(all\\) or >= 0"), ("-2", "-1 \\(all\\) or >= 0")])
def test_parse_devices_rejects_repeated_indices_and_negative_counts(devices, message):
    # Lightning's CUDA parser refuses these too; "0,0" used to start two DDP ranks on fl:0.
    with pytest.raises(ValueError, match=message):
        FlAccelerator.parse_devices(devices)


def test_device_stats_are_the_allocator_counters():
    keep = torch.empty(1024, device="fl:0")
    stats = FlAccelerator().get_device_stats(torch.device("fl:0"))
    assert stats["allocated_bytes.all.current"] >= keep.numel() * 4


def test_single_device_fit_runs_on_fl_and_learns():
    trainer, model = _lightning_fit.fit(devices=1)
    assert isinstance(trainer.strategy, SingleDeviceStrategy)
    assert trainer.strategy.root_device == torch.device("fl:0")
    assert model.devices_seen == {"fl:0"}
    losses = model.losses
    assert len(losses) == 4 * 8
    assert sum(losses[-8:]) / 8 < 0.8 * (sum(losses[:8]) / 8)


def test_devices_list_selects_that_device():
    trainer, model = _lightning_fit.fit(devices=[1], epochs=1)
    assert trainer.strategy.root_device == torch.device("fl:1")
    assert model.devices_seen == {"fl:1"}


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_mixed_precision_autocasts_on_fl(precision):
    trainer = L.Trainer(accelerator="fl", devices=1, precision=precision, logger=False)
    plugin = trainer.precision_plugin
    assert isinstance(plugin, MixedPrecision) and plugin.device == "fl"


def test_bf16_mixed_fit():
    problem = _binding_problem(
        "a = torch.randn(4, 4, device='fl:0')\n"
        "with torch.autocast('fl', dtype=torch.bfloat16):\n"
        "    assert torch.nn.functional.linear(a, a).dtype == torch.bfloat16\n")
    if problem:
        pytest.skip(f"autocast on fl is not available in this build of the binding ({problem})")
    trainer, model = _lightning_fit.fit(devices=1, precision="bf16-mixed", epochs=2)
    assert model.compute_dtypes == {"torch.bfloat16"}
    assert model.losses[-1] < model.losses[0]


def _ddp_fit_on_two_devices(tmp_path, **options: str) -> list[dict]:
    """_lightning_fit.py with strategy="ddp" on fl:0 and fl:1 (Lightning relaunches it for rank
    1), `options` its FL_FIT_* environment; each rank's result."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), FL_CPU_DEVICES="2", **options)
    env.pop("LOCAL_RANK", None)
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(HERE / "_lightning_fit.py"), "2", "ddp", "32-true", str(out)],
                          env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return [json.loads(Path(f"{out}.rank{r}").read_text()) for r in range(2)]


def test_ddp_on_two_fl_devices(tmp_path):
    problem = _binding_problem("torch.zeros(1, device='fl:0').item()")
    if problem:
        # Lightning's DDP loop calls .item() on a 1-element fl tensor every step.
        pytest.skip(f"binding: Tensor.item() on a 1-element fl tensor fails ({problem})")
    ranks = _ddp_fit_on_two_devices(tmp_path)
    assert [r["root_device"] for r in ranks] == ["fl:0", "fl:1"]
    assert all(r["strategy"] == "DDPStrategy" and r["backend"] == "flccl" and r["world_size"] == 2 for r in ranks)
    assert ranks[0]["devices_seen"] == ["fl:0"] and ranks[1]["devices_seen"] == ["fl:1"]
    assert ranks[0]["params"] == ranks[1]["params"]  # DDP kept the replicas identical
    for r in ranks:
        assert len(r["losses"]) == 4 * 4  # each rank sees half of the 8 batches per epoch
        assert sum(r["losses"][-4:]) < 0.9 * sum(r["losses"][:4])


@pytest.mark.parametrize("resync_every", [None, 4])
def test_resync_replicas_gives_drifting_ddp_ranks_rank_0s_parameters(tmp_path, resync_every):
    # Rank 1 drifts after every step (Drift, as ranks on different plugins do in the last bits);
    # ResyncReplicas(4) copies rank 0's state at steps 4, 8, 12 and 16, the last one.
    options = {"FL_FIT_DRIFT": "1"} | ({"FL_FIT_RESYNC_EVERY": str(resync_every)} if resync_every else {})
    ranks = _ddp_fit_on_two_devices(tmp_path, **options)
    assert [r["resyncs"] for r in ranks] == ([4, 4] if resync_every else [0, 0])
    assert (ranks[0]["params"] == ranks[1]["params"]) == bool(resync_every)


def test_ddp_with_sync_batchnorm_on_two_fl_devices(tmp_path):
    # Trainer(sync_batchnorm=True) turns the BatchNorm1d into a SyncBatchNorm, whose ops run
    # through the binding's generic kernels: both ranks end with the same statistics.
    ranks = _ddp_fit_on_two_devices(tmp_path, FL_FIT_SYNC_BN="1")
    assert [r["sync_batch_norms"] for r in ranks] == [1, 1]
    assert ranks[0]["params"] == ranks[1]["params"] and ranks[0]["buffers"] == ranks[1]["buffers"]
    assert all(sum(r["losses"][-4:]) < 0.9 * sum(r["losses"][:4]) for r in ranks)


def test_resync_replicas_counts_optimizer_steps_since_its_last_copy(monkeypatch):
    # Manual optimization over two optimizers moves global_step by two a batch (1, 3, 5, ...):
    # "a multiple of N" would never come; N steps since the last copy does. A new fit starts
    # counting from its own first step.
    import torch_fl.distributed
    from types import SimpleNamespace
    from torch_fl.lightning import ResyncReplicas
    calls = []
    monkeypatch.setattr(torch_fl.distributed, "resync", lambda module, optimizers: calls.append(module))
    callback, trainer = ResyncReplicas(4), SimpleNamespace(world_size=2, global_step=0, optimizers=[])
    callback.on_train_start(trainer, "model")
    for step in range(1, 20, 2):
        trainer.global_step = step
        callback.on_train_batch_end(trainer, "model", None, None, 0)
    assert callback.resyncs == len(calls) == 4  # at steps 5, 9, 13 and 17
    trainer.global_step = 100
    callback.on_train_start(trainer, "model")
    trainer.global_step = 102
    callback.on_train_batch_end(trainer, "model", None, None, 0)
    assert callback.resyncs == 4
    trainer.world_size = 1
    trainer.global_step = 200
    callback.on_train_batch_end(trainer, "model", None, None, 0)
    assert callback.resyncs == 4  # one process: nothing to align


def test_resync_replicas_refuses_a_period_below_one():
    from torch_fl.lightning import ResyncReplicas
    with pytest.raises(ValueError, match="every_n_steps must be at least 1, got 0"):
        ResyncReplicas(0)


def test_devices_auto_in_a_notebook_uses_one_fl_device(monkeypatch):
    # Lightning uses one CUDA device for devices="auto" in a notebook, where several would need
    # the fork launcher; fl took every device and forked (which hangs once fl was used there).
    from lightning.pytorch.trainer.connectors import accelerator_connector
    monkeypatch.setattr(accelerator_connector, "_IS_INTERACTIVE", True)
    trainer = L.Trainer(accelerator="fl", logger=False)
    assert trainer.num_devices == 1
    assert isinstance(trainer.strategy, SingleDeviceStrategy)
    assert trainer.strategy.root_device == torch.device("fl:0")


def test_auto_accelerator_is_the_cpu_when_fl_has_only_cpu_plugin_devices():
    # The CPU plugin's devices are the host CPU behind a layer: Lightning's own choice stands.
    assert torch_fl.lightning._accelerator_devices() == []
    trainer = L.Trainer(accelerator="auto", logger=False)
    assert type(trainer.accelerator).__name__ == "CPUAccelerator"
    assert trainer.strategy.root_device == torch.device("cpu")


def test_auto_accelerator_devices_are_those_of_gpu_plugins(monkeypatch):
    monkeypatch.setattr(torch_fl.lightning, "_accelerator_devices", lambda: [1])
    auto = torch_fl.lightning.FlAutoAccelerator
    assert auto.parse_devices("auto") == [1] and auto.parse_devices(-1) == [1]
    assert auto.parse_devices(1) == [1] and auto.parse_devices("1") == [1]
    assert auto.parse_devices([0]) == [0] and auto.parse_devices("0,1") == [0, 1]  # indices name fl devices
    assert auto.get_parallel_devices("auto") == [torch.device("fl:1")]
    assert auto.auto_device_count() == 1
    with pytest.raises(ValueError, match="accelerator='fl' to count every fl device"):
        auto.parse_devices(2)


AUTO_FIT = """
import sys, json, torch, torch_fl
import lightning.pytorch as L
sys.path.insert(0, {here!r})
import _lightning_fit
kw = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
plugins = [torch.fl.get_device_properties(i)["plugin"] for i in range(torch.fl.device_count())]
explicit = L.Trainer(accelerator="fl", devices="auto", **kw)
try:
    L.Trainer(accelerator="auto", devices=2, **kw)
    too_many = None
except ValueError as e:
    too_many = str(e)
trainer = L.Trainer(accelerator="auto", devices="auto", max_epochs=4, **kw)
torch.manual_seed(0)
model = _lightning_fit.TinyClassifier()
trainer.fit(model, _lightning_fit.make_loader())
print(json.dumps(dict(plugins=plugins, explicit=explicit.num_devices, too_many=too_many,
                      accelerator=type(trainer.accelerator).__name__, num_devices=trainer.num_devices,
                      strategy=type(trainer.strategy).__name__, root=str(trainer.strategy.root_device),
                      seen=sorted(model.devices_seen), losses=model.losses)))
"""


def test_auto_accelerator_chooses_fl_devices_of_a_non_cpu_plugin(tmp_path):
    """With the CPU plugin and a second plugin (the template plugin, standing in for a GPU
    plugin) loaded, accelerator="auto" picks fl and trains on the second plugin's device only;
    accelerator="fl" still counts every fl device."""
    plugins = [BUILD / "plugins" / "cpu" / "libfl_cpu.so", BUILD / "plugins" / "template" / "libfl_template.so"]
    if not plugins[1].exists():
        pytest.skip("the template plugin is not in this build tree")
    config = tmp_path / "config.yaml"
    config.write_text("plugins:\n  enable: [cpu, template]\n")  # the template plugin is opt-in
    env = {"FL_PLUGIN_PATH": ":".join(map(str, plugins)), "FL_CONFIG": str(config), "FL_CPU_DEVICES": "1"}
    r = run_python(AUTO_FIT.format(here=str(HERE)), env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "accelerator='auto' chose fl: the template plugin's devices ['fl:1']" in r.stdout + r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["plugins"] == ["cpu", "template"]
    assert out["explicit"] == 2
    assert "chose fl's 1 accelerator device(s) [1]" in out["too_many"]
    assert out["accelerator"] == "FlAutoAccelerator" and out["num_devices"] == 1
    assert out["strategy"] == "SingleDeviceStrategy" and out["root"] == "fl:1"
    assert out["seen"] == ["fl:1"]
    losses = out["losses"]
    assert sum(losses[-8:]) / 8 < 0.8 * (sum(losses[:8]) / 8)


def test_fork_launcher_refuses_once_fl_was_used(monkeypatch):
    # A child forked after this process ran work on fl waits forever on its first fl op (it
    # has the runtime's state, not its worker threads): the launcher must refuse before forking.
    from lightning.pytorch.strategies.launchers import multiprocessing as launchers

    def forked(*args, **kwargs):
        raise AssertionError("the launcher forked although fl was used in this process")

    monkeypatch.setattr(launchers.mp, "start_processes", forked)
    (torch.ones(4, device="fl:0") * 2).cpu()
    trainer = L.Trainer(accelerator="fl", devices=2, strategy="ddp_fork", max_epochs=1, logger=False,
                        enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False)
    with pytest.raises(RuntimeError, match="can't fork new processes"):
        trainer.fit(_lightning_fit.TinyClassifier(), _lightning_fit.make_loader())


def test_ddp_spawn_takes_a_model_that_is_on_fl(tmp_path):
    # torch.multiprocessing can share CPU and CUDA tensors only: a model moved to fl before a
    # spawn fit failed with "_share_fd_: only available on CPU" (CUDA models go through IPC).
    torch.manual_seed(0)
    model = _lightning_fit.TinyClassifier().to("fl:0")
    before = [p.detach().cpu().clone() for p in model.parameters()]
    trainer = L.Trainer(accelerator="fl", devices=2, strategy="ddp_spawn", max_steps=2, logger=False,
                        default_root_dir=tmp_path,
                        enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False)
    trainer.fit(model, _lightning_fit.make_loader())
    assert trainer.state.finished
    after = list(model.parameters())
    assert all(p.device == torch.device("fl:0") for p in after)  # back where it was, as a CUDA model stays
    assert any(not torch.equal(b, a.detach()) for b, a in zip(before, after))  # rank 0's weights came back


class _WideClassifier(L.LightningModule):
    """A hidden layer wide enough that a batch of 1024 does not fit in 48 MiB."""

    def __init__(self, batch_size: int = 2) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 3))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def train_dataloader(self):
        x = torch.randn(4096, 8, generator=torch.Generator().manual_seed(0))
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long()),
                                           batch_size=self.batch_size)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_batch_size_finder_stops_at_fl_out_of_memory(tmp_path):
    # Lightning's is_oom_error knows CUDA's and the CPU allocator's messages only: the finder
    # re-raised fl's OutOfMemoryError instead of halving the batch size.
    from lightning.pytorch.tuner import Tuner
    device = 1
    fraction = torch.fl.get_per_process_memory_fraction(device)
    ooms = torch.fl.memory_stats(device).get("num_ooms", 0)
    torch.fl.empty_cache()  # a cache left by earlier tests would count against the cap
    torch.fl.set_per_process_memory_fraction(48 * 2**20 / torch.fl.mem_get_info(device)[1], device)
    try:
        trainer = L.Trainer(accelerator="fl", devices=[device], max_epochs=1, logger=False, default_root_dir=tmp_path,
                            enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False)
        size = Tuner(trainer).scale_batch_size(_WideClassifier(), mode="power", init_val=2, max_trials=14)
        assert torch.fl.memory_stats(device)["num_ooms"] > ooms  # the cap was hit along the way
        assert 2 <= size <= 512
    finally:
        torch.fl.set_per_process_memory_fraction(fraction, device)
        torch.fl.empty_cache()
