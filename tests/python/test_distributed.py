"""torch_fl.distributed: the "flccl" backend. Two ranks (processes, FileStore rendezvous) on fl:0
and fl:1 check every collective against expected values and train with DistributedDataParallel;
the parameters must be identical across ranks and equal to a single-process big-batch run."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import torch_fl.distributed as fldist
from torch_fl._native_collectives import unavailable_reason

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _flccl_worker as worker  # noqa: E402
from conftest import BUILD, run_python  # noqa: E402


def test_flccl_is_registered_for_fl_devices():
    assert "flccl" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map["fl"] == "flccl"
    assert "fl" in dist.Backend.backend_capability["flccl"]


def test_single_rank_group_in_process(tmp_path):
    store = dist.FileStore(str(tmp_path / "store"), 1)
    pg = fldist.FlProcessGroup(store, 0, 1)
    assert pg.name() == "flccl" and pg.rank() == 0 and pg.size() == 1
    t = torch.arange(4, dtype=torch.float32, device="fl:1")
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.AVG
    work = pg.allreduce([t], opts)
    assert work.wait()
    assert torch.equal(t.cpu(), torch.arange(4, dtype=torch.float32))
    (result,) = work.get_future().value()
    assert result.device == torch.device("fl:1")
    with pytest.raises(NotImplementedError, match="BAND"):
        opts.reduceOp = dist.ReduceOp.BAND
        pg.allreduce([t], opts)


def test_route_is_host_staged_without_nccl(tmp_path, monkeypatch):
    monkeypatch.delenv("FL_CCL", raising=False)
    pg = fldist.FlProcessGroup(dist.FileStore(str(tmp_path / "auto"), 1), 0, 1)
    assert pg.route == "gloo" and "route=gloo" in repr(pg)
    monkeypatch.setenv("FL_CCL", "nccl")
    reason = unavailable_reason(torch.fl.current_device())
    assert "device of the cpu plugin" in reason  # the device-direct route needs the cuda or hip plugin
    with pytest.raises(RuntimeError, match=re.escape("FL_CCL=nccl, but the group cannot use NCCL: on this rank, " + reason)):
        fldist.FlProcessGroup(dist.FileStore(str(tmp_path / "forced"), 1), 0, 1)
    monkeypatch.setenv("FL_CCL", "infiniband")
    with pytest.raises(ValueError, match="FL_CCL='infiniband': expected auto, gloo or nccl"):
        fldist.FlProcessGroup(dist.FileStore(str(tmp_path / "bad"), 1), 0, 1)


def test_cpu_plugin_offers_no_native_handles():
    from torch_fl import _C
    assert _C.native_device(0) is None
    assert _C.native_stream(0, 0) is None
    with pytest.raises(RuntimeError, match="invalid device fl:99"):
        _C.native_device(99)


def _run_ranks(tmp_path: Path, backend: str, world: int = 2, timeout: float = 240):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env["FL_CPU_DEVICES"] = "2"
    env["FL_WORKER_ROUTE"] = "gloo"  # the CPU plugin offers no native collectives
    init = tmp_path / "rendezvous"
    procs, outs = [], []
    for rank in range(world):
        out = tmp_path / f"params{rank}.pt"
        outs.append(out)
        procs.append(subprocess.Popen(
            [sys.executable, str(HERE / "_flccl_worker.py"), str(rank), str(world), str(init), backend, str(out)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for rank, (p, log) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, f"rank {rank} failed:\n{log[-4000:]}"
    return [torch.load(o) for o in outs], logs


def _single_process_reference():
    model = worker.make_model().to("fl:0")
    worker.train_steps(model, torch.device("fl:0"))
    return [p.detach().cpu() for p in model.parameters()]


def _single_process_batch_norm_reference():
    model = worker.make_batch_norm_model().to("fl:0")
    worker.train_steps(model, torch.device("fl:0"))
    return [t.detach().cpu() for t in list(model.parameters()) + list(model.buffers())]


@pytest.mark.parametrize("backend", ["cpu:gloo,fl:flccl", "flccl"])
def test_two_ranks_collectives_and_ddp(tmp_path, backend):
    params, logs = _run_ranks(tmp_path, backend)
    for log in logs:
        for name in ("all_reduce RedOpType.AVG", "all_gather_into_tensor", "reduce_scatter_tensor MAX",
                     "broadcast", "barrier", "ddp", "batch_isend_irecv", "all_gather_coalesced[1][1]",
                     "all_to_all_single uneven", "all_to_all[1]", "dtype mismatch refused",
                     "all_reduce complex64", "resync", "sync batch norm"):
            assert f"ok {name}" in log, log[-3000:]
    assert "ok recv from any rank" in logs[-1], logs[-1][-3000:]  # the last rank receives
    for a, b in zip(*params):
        assert torch.equal(a, b)  # ranks agree bit for bit
    for got, expected in zip(params[0], _single_process_reference()):
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    # SyncBatchNorm: each rank normalises its half by the whole batch's statistics, so the run
    # equals BatchNorm on the whole batch (running statistics and num_batches_tracked too).
    bn = [torch.load(tmp_path / f"params{rank}.pt.bn") for rank in range(2)]
    for a, b in zip(*bn):
        assert torch.equal(a, b)
    reference = _single_process_batch_norm_reference()
    assert len(bn[0]) == len(reference) == 9  # 6 parameters, running mean and var, batches tracked
    for got, expected in zip(bn[0], reference):
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


MIXED_RANK_CODE = r"""
import json, sys, warnings
import torch, torch.distributed as dist, torch.nn as nn
import torch_fl, torch_fl.distributed
rank, init = int(sys.argv[1]), sys.argv[2]
plugin = ("cpu", "template")[rank]
dev = torch.device(next(d["device"] for d in torch_fl.list_devices() if d["plugin"] == plugin))
torch.fl.set_device(dev.index)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    dist.init_process_group("flccl", init_method=f"file://{init}", rank=rank, world_size=2)
    dist.new_group([0, 1])  # a second group on the same ranks: no second warning
torch.manual_seed(rank)  # replicas that differ, as after drifting
model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).to(dev)
model(torch.randn(5, 4, device=dev))  # the batch norm's running statistics move
opt = torch.optim.Adam(model.parameters())
model[0].weight.sum().backward()
opt.step()  # Adam's state: exp_avg, exp_avg_sq on the device, step on the host
torch_fl.distributed.resync(model, opt)
params = [p.detach().cpu() for p in list(model.parameters()) + list(model.buffers())]
state = [t.cpu() for p in model.parameters() for t in opt.state[p].values()]
digest = float(sum(t.double().sum() for t in params + state))
print(json.dumps({"rank_plugins": dist.group.WORLD.rank_plugins, "digest": digest,
                  "warnings": [str(w.message) for w in caught if "different plugins" in str(w.message)]}))
dist.destroy_process_group()
"""


def _json_from_ranks(code: str, world: int, store: Path, env: dict) -> list[dict]:
    """Runs `code` as `world` processes (argv: rank, the file store's path) and returns the JSON
    object each printed last, in rank order; every process must exit 0."""
    procs = [subprocess.Popen([sys.executable, "-c", code, str(rank), str(store)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in range(world)]
    outputs = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, err[-3000:]
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]


def test_ranks_on_different_plugins_warn_once_and_resync_gives_them_rank_0s_state(tmp_path):
    """Rank 0 on the CPU plugin, rank 1 on the template plugin: the group names each rank's
    plugin and warns once that replicas drift; resync copies rank 0's parameters, buffers and
    Adam state to rank 1 (which started from other weights)."""
    plugins = [BUILD / "plugins" / "cpu" / "libfl_cpu.so", BUILD / "plugins" / "template" / "libfl_template.so"]
    if not plugins[1].exists():
        pytest.skip("the template plugin is not in this build tree")
    config = tmp_path / "config.yaml"
    config.write_text("plugins:\n  enable: [cpu, template]\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), FL_CONFIG=str(config),
               FL_CPU_DEVICES="1", FL_PLUGIN_PATH=":".join(str(p) for p in plugins))
    results = _json_from_ranks(MIXED_RANK_CODE, 2, tmp_path / "store", env)
    for r in results:
        assert r["rank_plugins"] == ["cpu", "template"]
        assert len(r["warnings"]) == 1 and "rank 0: cpu, rank 1: template" in r["warnings"][0]
        assert "torch_fl.distributed.resync" in r["warnings"][0]
    assert results[0]["digest"] == results[1]["digest"]


RESYNC_RULES_CODE = r"""
import json, sys
import torch, torch.distributed as dist, torch.nn as nn
import torch_fl, torch_fl.distributed
rank, init = int(sys.argv[1]), sys.argv[2]
dev = torch.device("fl", rank)
torch.fl.set_device(rank)
dist.init_process_group("flccl", init_method=f"file://{init}", rank=rank, world_size=3)
results = {}
# src is a global rank: in the group of ranks 1 and 2, rank 1's weights reach rank 2, rank 0 is left out.
model = nn.Linear(2, 2, bias=False).to(dev)
with torch.no_grad():
    model.weight.fill_(rank)
pair = dist.new_group([1, 2])
torch_fl.distributed.resync(model, src=1, group=pair)
results["weight"] = float(model.weight[0, 0])
# Layouts that differ (rank 2 has no optimizer state yet): an error on every rank, nothing copied.
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
if rank != 2:
    model.weight.grad = torch.ones_like(model.weight)
    opt.step()
before = float(model.weight[0, 0])
try:
    torch_fl.distributed.resync(model, opt)
    results["error"] = None
except RuntimeError as error:
    results["error"] = str(error)
results["unchanged"] = float(model.weight[0, 0]) == before
print(json.dumps(results))
dist.destroy_process_group()
"""


def test_resync_takes_a_global_source_rank_and_refuses_ranks_whose_tensors_differ(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), FL_CPU_DEVICES="3")
    results = _json_from_ranks(RESYNC_RULES_CODE, 3, tmp_path / "store", env)
    assert [r["weight"] for r in results] == [0.0, 1.0, 1.0]
    for r in results:
        assert r["error"] and "resync: the ranks' tensors differ" in r["error"] and "nothing was copied" in r["error"]
        assert r["unchanged"]


def test_a_group_without_a_backend_serves_fl_and_cpu_tensors(tmp_path):
    """torch's backend autoload makes fl the accelerator, so init_process_group() without a
    backend asks for fl's backend: a script that never imports torch_fl (a CPU-only one)
    must still get a working group."""
    code = ("import torch, torch.distributed as dist\n"
            f"dist.init_process_group(init_method='file://{tmp_path / 'store'}', rank=0, world_size=1)\n"
            "t = torch.ones(3); dist.all_reduce(t)\n"
            "u = torch.ones(2, device='fl:0'); dist.all_reduce(u)\n"
            "print('config', dist.get_backend_config(), t.tolist(), u.cpu().tolist())\n"
            "dist.destroy_process_group()\n")
    r = run_python(code, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "config fl:flccl [1.0, 1.0, 1.0] [1.0, 1.0]" in r.stdout, r.stdout
