"""The first five minutes with Torch-FL: list the devices, make random tensors on fl:0, multiply
them, check against the CPU, and copy to fl:1 when there is one.

    python examples/smoke.py
"""
import torch

import torch_fl

devices = torch_fl.list_devices()
for d in devices:
    print(f"{d['device']}: {d['vendor']} {d['name']} [{d['stable_id']}] plugin {d['plugin']} "
          f"({d['plugin_file']}), {d['total_memory'] / 2**30:.1f} GiB, {d['kernels']} kernels")
for s in torch_fl.skipped_plugins():
    print(f"skipped {s['path']}: {s['step']}: {s['reason']}")
if not devices:
    raise SystemExit("no fl device: see the reasons above, or run fl-smi --doctor")

torch.manual_seed(0)
a_cpu, b_cpu = torch.randn(256, 128), torch.randn(128, 64)
a, b = a_cpu.to("fl:0"), b_cpu.to("fl:0")
c = a @ b
err = (c.cpu() - a_cpu @ b_cpu).abs().max().item()
print(f"matmul on {c.device}: {tuple(c.shape)}, max |error| vs CPU {err:.2e}")
assert err < 1e-3, "fl:0 disagrees with the CPU"

if len(devices) > 1:
    d = c.to("fl:1")
    print(f"copied to {d.device}: equal = {torch.equal(d.cpu(), c.cpu())}")
print("op tiers:", {op: torch_fl.op_support(op, "fl:0") for op in ("aten::mm", "aten::add.Tensor", "aten::hypot")})
