"""torch.fl and torch.accelerator on fl: devices, current device, moving tensors and modules,
and the runtime's description of devices and plugins."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import torch_fl
from conftest import BUILD, assert_same


def test_is_available_and_device_count():
    assert torch.fl.is_available()
    assert torch.fl.device_count() == 2
    assert torch_fl._C.device_count() == 2


def test_backend_renamed_to_fl():
    assert torch._C._get_privateuse1_backend_name() == "fl"
    x = torch.empty(3, device="fl")
    assert x.device.type == "fl"
    assert x.device.index == torch.fl.current_device()


def test_set_device_and_current_device():
    torch.fl.set_device(1)
    assert torch.fl.current_device() == 1
    assert torch.empty(2, device="fl").device == torch.device("fl:1")
    torch.fl.set_device("fl:0")
    assert torch.fl.current_device() == 0
    torch.fl.set_device(torch.device("fl", 1))
    assert torch.fl.current_device() == 1


def test_set_device_rejects_bad_index():
    with pytest.raises(IndexError, match="invalid fl device index 5"):
        torch.fl.set_device(5)
    with pytest.raises(ValueError):
        torch.fl.set_device("cpu")


def test_device_context_manager_restores():
    torch.fl.set_device(0)
    with torch.fl.device(1):
        assert torch.fl.current_device() == 1
        assert torch.ones(1, device="fl").device.index == 1
    assert torch.fl.current_device() == 0
    with torch.fl.device("fl:1"):
        assert torch.fl.current_device() == 1
    assert torch.fl.current_device() == 0


def test_device_guard_of_torch_device():
    torch.fl.set_device(0)
    with torch.device("fl:1"):
        t = torch.zeros(2)
    assert t.device == torch.device("fl:1")


def test_accelerator_api():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("fl")
    assert torch.accelerator.device_count() == 2
    torch.accelerator.set_device_index(1)
    assert torch.accelerator.current_device_index() == 1
    assert torch.fl.current_device() == 1
    torch.accelerator.set_device_index(0)
    assert torch.accelerator.current_device_index() == 0
    with torch.accelerator.device_index(1):
        assert torch.accelerator.current_device_index() == 1
    assert torch.accelerator.current_device_index() == 0
    s = torch.accelerator.current_stream()
    assert s.device == torch.device("fl:0")
    torch.accelerator.synchronize()
    torch.accelerator.synchronize(1)


def test_tensor_fl_and_is_fl():
    cpu = torch.arange(6.0).reshape(2, 3)
    a = cpu.fl()
    assert a.is_fl and not cpu.is_fl
    assert a.device == torch.device("fl", torch.fl.current_device())
    b = cpu.fl(1)
    assert b.device == torch.device("fl:1")
    assert_same(a, cpu, exact=True)
    assert_same(b, cpu, exact=True)
    assert torch.equal(a.cpu(), b.cpu())


def test_module_fl():
    m = nn.Linear(4, 3)
    ref_w = m.weight.detach().clone()
    m.fl()
    assert m.weight.device.type == "fl" and m.bias.device.type == "fl"
    assert_same(m.weight, ref_w, exact=True)
    m.to("fl:1")
    assert m.weight.device == torch.device("fl:1")


def test_storage_methods_generated():
    t = torch.ones(4, device="fl")
    s = t.untyped_storage()
    assert s.device.type == "fl"
    assert s.is_fl
    assert s.nbytes() == 16


def test_devices_lists_all_or_one_plugins_devices():
    assert torch_fl.devices() == [torch.device("fl:0"), torch.device("fl:1")]
    assert torch_fl.devices("cpu") == [torch.device("fl:0"), torch.device("fl:1")]
    assert torch_fl.devices("no-such-plugin") == []


def test_list_devices_fields():
    devices = torch_fl.list_devices()
    assert [d["index"] for d in devices] == [0, 1]
    assert [d["device"] for d in devices] == ["fl:0", "fl:1"]
    for d in devices:
        for key in ("vendor", "name", "stable_id", "plugin", "plugin_version", "plugin_file",
                    "local_index", "total_memory", "dtypes", "host_accessible", "kernels",
                    "memory_fraction"):
            assert key in d, key
        assert d["plugin_file"].startswith(str(BUILD / "plugins"))
        assert d["total_memory"] > 0
        assert d["kernels"] > 0
        assert "float32" in d["dtypes"].split(",")
    assert devices[0]["local_index"] == 0 and devices[1]["local_index"] == 1
    assert devices[0]["stable_id"] != devices[1]["stable_id"]
    assert torch.fl.get_device_name(1) == devices[1]["name"]
    assert torch.fl.get_device_properties("fl:0")["device"] == "fl:0"
    with pytest.raises(ValueError, match=rf"fl:{len(devices)} does not exist: this process has {len(devices)} fl device"):
        torch.fl.get_device_properties(len(devices))


def test_loaded_and_skipped_plugins():
    plugins = torch_fl.loaded_plugins()
    assert len(plugins) >= 1
    cpu = [p for p in plugins if p["path"] == torch_fl.list_devices()[0]["plugin_file"]]
    assert len(cpu) == 1
    p = cpu[0]
    assert p["devices"] == 2
    assert p["kernels"] == torch_fl.list_devices()[0]["kernels"]
    assert p["abi"] == torch_fl._C.abi_version()
    assert p["name"]
    for s in torch_fl.skipped_plugins():
        assert set(s) >= {"path", "origin", "step", "reason"}
        assert s["reason"]


def test_synchronize_and_mem_get_info():
    torch.fl.synchronize()
    torch.fl.synchronize(1)
    free, total = torch.fl.mem_get_info(0)
    assert 0 < free <= total


def test_cpu_plugin_thread_count_option():
    """threads=N (or FL_CPU_THREADS) sets the CPU plugin's BLAS threads (OpenBLAS's count),
    reported as its compute units; a bad count skips the plugin with the reason."""
    from conftest import run_python

    code = ("import ctypes, torch, torch_fl\n"
            "d = torch_fl.list_devices()[0]\n"
            "a = torch.randn(300, 200, dtype=torch.float64)\n"
            "b = torch.randn(200, 100, dtype=torch.float64)\n"
            "torch.testing.assert_close((a.to('fl:0') @ b.to('fl:0')).cpu(), a @ b)\n"
            "blas = ctypes.CDLL('libopenblas.so.0').openblas_get_num_threads()\n"
            "print(d['plugin'], d['compute_units'], blas)\n")
    r = run_python(code, env={"FL_CPU_THREADS": "3"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith("cpu 3 3"), r.stdout
    bad = run_python("import torch_fl; print([s['reason'] for s in torch_fl.skipped_plugins()])",
                     env={"FL_CPU_THREADS": "0"})
    assert bad.returncode == 0, bad.stderr[-2000:]
    assert "cpu plugin: threads must be in [1, 4096]" in bad.stdout, bad.stdout


_FORK_SCRIPT = r"""
import os, torch, torch_fl

def child_runs_an_op():
    pid = os.fork()
    if pid == 0:
        try:
            ok = (torch.ones(3, device="fl:0") * 2).cpu().tolist() == [2.0, 2.0, 2.0]
            os._exit(0 if ok and not torch.fl._is_in_bad_fork() else 1)
        except RuntimeError as error:
            bad = "forked subprocess" in str(error) and "spawn" in str(error) and torch.fl._is_in_bad_fork()
            os._exit(3 if bad else 4)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

print("before", child_runs_an_op())
(torch.ones(4, device="fl:0") * 2).cpu()
print("after", child_runs_an_op())
print("parent", (torch.ones(2, device="fl:0") + 1).cpu().tolist(), torch.fl._is_in_bad_fork())
# DataLoader workers are such children: they seed torch (which skips a device module in a bad
# fork) and load host batches; fl stays the parent's.
from torch.utils.data import DataLoader, TensorDataset
rows = TensorDataset(torch.arange(32.0).view(16, 2))
loader = DataLoader(rows, batch_size=4, num_workers=2, multiprocessing_context="fork")
print("loader", sum(float(b.to("fl:0").sum().cpu()) for b, in loader))
"""


def test_a_child_forked_after_fl_was_used_gets_an_error_not_a_hang():
    # The child has the runtime's memory but not the CPU plugin's stream threads: its first op
    # waited forever. As CUDA raises "Cannot re-initialize CUDA in forked subprocess", fl now
    # raises, naming the spawn start method; a child forked before any use works.
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", _FORK_SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:4] == ["before 0", "after 3", "parent [2.0, 2.0] False", "loader 496.0"]
