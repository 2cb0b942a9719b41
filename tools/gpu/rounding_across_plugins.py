"""Where two plugins' float32 results differ in the last bits: the elementwise steps an optimizer
runs, on the CPU plugin's device, the CUDA plugin's device and PyTorch's own CPU, counting the
elements that are not bit-identical between each pair. This is why replicas of one model on
ranks of different plugins drift (torch_fl.distributed.resync realigns them).

    FL_PLUGIN_PATH=build-gpu/plugins/cuda/libfl_cuda.so:build-gpu/plugins/cpu/libfl_cpu.so \\
        python tools/gpu/rounding_across_plugins.py
"""
from __future__ import annotations

import torch

import torch_fl

OPS = {
    "a.add(b, alpha=-0.3)": lambda a, b: a.add(b, alpha=-0.3),
    "_foreach_add([a], [b], alpha=-0.3)": lambda a, b: torch._foreach_add([a], [b], alpha=-0.3)[0],
    "a * 0.9 + b": lambda a, b: a * 0.9 + b,
    "a.addcmul(b, b, value=0.1)": lambda a, b: a.addcmul(b, b, value=0.1),
    "a.addcdiv(b, b.abs() + 1, value=-0.01)": lambda a, b: a.addcdiv(b, b.abs() + 1, value=-0.01),
    "a.lerp(b, 0.1)": lambda a, b: a.lerp(b, 0.1),
    "b.abs().sqrt()": lambda a, b: b.abs().sqrt(),
    "a / b": lambda a, b: a / b,
    "a.exp()": lambda a, b: a.exp(),
    "a @ b.T (256x256)": lambda a, b: a[: 1 << 16].view(256, 256) @ b[: 1 << 16].view(256, 256).T,
}


def optimizer_steps(make, device: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Three steps of optimizer `make` on parameter a[:65536] with gradients from b (the same
    bits on every device), on `device`; the parameter after them, on the host."""
    p = torch.nn.Parameter(a[: 1 << 16].clone().to(device))
    opt = make([p])
    for k in range(3):
        p.grad = (b[: 1 << 16] * (k + 1)).to(device)
        opt.step()
    return p.detach().cpu()


OPTIMIZERS = {
    "SGD(momentum=0.9), 3 steps": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "Adam, 3 steps": lambda ps: torch.optim.Adam(ps, lr=1e-3),
    "AdamW, 3 steps": lambda ps: torch.optim.AdamW(ps, lr=1e-3),
}


def main() -> None:
    devices = {p: torch_fl.devices(p)[:1] for p in ("cpu", "cuda")}
    if not all(devices.values()):
        raise SystemExit(f"needs the cpu and cuda plugins, found {sorted(d['plugin'] for d in torch_fl.list_devices())}")
    devices = {p: found[0] for p, found in devices.items()}
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(1 << 20, generator=g), torch.randn(1 << 20, generator=g)
    print(f"float32, {a.numel()} elements; elements not bit-identical between:")
    print(f"{'op':40} {'cpu plugin / cuda plugin':>25} {'cpu plugin / torch cpu':>23} {'cuda plugin / torch cpu':>24}")
    for name, fn in OPS.items():
        host = fn(a, b)
        cpu = fn(a.to(devices["cpu"]), b.to(devices["cpu"])).cpu()
        cuda = fn(a.to(devices["cuda"]), b.to(devices["cuda"])).cpu()
        print(f"{name:40} {int((cpu != cuda).sum()):>25} {int((cpu != host).sum()):>23} {int((cuda != host).sum()):>24}")
    for name, make in OPTIMIZERS.items():
        host = optimizer_steps(make, "cpu", a, b)
        cpu = optimizer_steps(make, devices["cpu"], a, b)
        cuda = optimizer_steps(make, devices["cuda"], a, b)
        print(f"{name + ' (of 65536)':40} {int((cpu != cuda).sum()):>25} {int((cpu != host).sum()):>23} "
              f"{int((cuda != host).sum()):>24}")


if __name__ == "__main__":
    main()
