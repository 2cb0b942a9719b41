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
from conftest import run_python  # noqa: E402


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


def test_ddp_on_two_fl_devices(tmp_path):
    problem = _binding_problem("torch.zeros(1, device='fl:0').item()")
    if problem:
        # Lightning's DDP loop calls .item() on a 1-element fl tensor every step.
        pytest.skip(f"binding: Tensor.item() on a 1-element fl tensor fails ({problem})")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env["FL_CPU_DEVICES"] = "2"
    env.pop("LOCAL_RANK", None)
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(HERE / "_lightning_fit.py"), "2", "ddp", "32-true", str(out)],
                          env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    ranks = [json.loads(Path(f"{out}.rank{r}").read_text()) for r in range(2)]
    assert [r["root_device"] for r in ranks] == ["fl:0", "fl:1"]
    assert all(r["strategy"] == "DDPStrategy" and r["backend"] == "flccl" and r["world_size"] == 2 for r in ranks)
    assert ranks[0]["devices_seen"] == ["fl:0"] and ranks[1]["devices_seen"] == ["fl:1"]
    assert ranks[0]["params"] == ranks[1]["params"]  # DDP kept the replicas identical
    for r in ranks:
        assert len(r["losses"]) == 4 * 4  # each rank sees half of the 8 batches per epoch
        assert sum(r["losses"][-4:]) < 0.9 * sum(r["losses"][:4])
