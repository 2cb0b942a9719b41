"""Checks, with the CUDA plugin and the CPU plugin loaded in one process, what the CPU-only test
suite checks on two CPU-plugin devices: seeded dropout (ABI 1.2's rng_seed/rng_offset) on each
plugin, HeteroDataParallel across the two plugins against a plain loop on the GPU device
(before_step clipping, a dataclass batch, a GradScaler with an inf on one shard), and the fork
guard on a process whose GPU plugin is in use. Prints one line per check; exits 1 on a failure.

    FL_PLUGIN_PATH=build-gpu/plugins/cuda/libfl_cuda.so:build-gpu/plugins/cpu/libfl_cpu.so \\
        python tools/gpu/check_mixed_plugins.py
"""
from __future__ import annotations

import dataclasses
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_fl
from torch_fl.parallel import HeteroDataParallel

failures: list[str] = []


def report(name: str, ok: bool, detail: str) -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {name:58} {detail}")
    if not ok:
        failures.append(name)


# Arguments, for a dry run where there is no GPU: python ... fl:1 fl:0 (with FL_CPU_DEVICES=2).
GPU, HOST = sys.argv[1:3] if len(sys.argv) == 3 else (str(torch_fl.devices("cuda")[0]), str(torch_fl.devices("cpu")[0]))


def check_seeded_dropout(device: str) -> None:
    x = torch.ones(1 << 16, device=device)

    def draw(seed: int) -> torch.Tensor:
        torch.manual_seed(seed)
        return F.dropout(x, p=0.5, training=True).cpu()

    a, b, c = draw(7), draw(7), draw(8)
    kept = (a != 0).float().mean().item()
    values = set(a.unique().tolist())
    ok = torch.equal(a, b) and not torch.equal(a, c) and abs(kept - 0.5) < 0.02 and values <= {0.0, 2.0}
    report(f"dropout on {device} repeats under manual_seed", ok,
           f"same seed equal {torch.equal(a, b)}, other seed equal {torch.equal(a, c)}, kept {kept:.4f}, values {sorted(values)}")
    torch.manual_seed(7)
    first = F.dropout(x, p=0.5, training=True).cpu()
    second = F.dropout(x, p=0.5, training=True).cpu()
    report(f"dropout on {device}: two calls in a row draw different masks", not torch.equal(first, second),
           f"equal {torch.equal(first, second)}")


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 10))


def batches(n: int, rows: int = 64):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(rows, 32, generator=g), torch.randint(0, 10, (rows,), generator=g)) for _ in range(n)]


def sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def max_difference(a: nn.Module, b: nn.Module) -> float:
    return max((p.detach().cpu() - q.detach().cpu()).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


def clip(module: nn.Module) -> None:
    nn.utils.clip_grad_norm_(module.parameters(), 0.5)


def check_hetero_equals_big_batch() -> None:
    data = batches(6)
    reference = mlp().to(GPU)
    opt = sgd(reference.parameters())
    for x, y in data:
        opt.zero_grad()
        F.cross_entropy(reference(x.to(GPU)), y.to(GPU)).backward()
        clip(reference)
        opt.step()
    for split in ([1, 3], [3, 1]):
        hdp = HeteroDataParallel(mlp(), [HOST, GPU], sgd, reduce_device=GPU, split=split)
        try:
            for x, y in data:
                hdp.train_step(x, y, F.cross_entropy, before_step=clip)
            hdp.assert_replicas_identical()
            diff = max_difference(hdp.module, reference)
        finally:
            hdp.close()
        report(f"HeteroDataParallel {HOST} + {GPU} split {split} = big batch on {GPU}", diff < 1e-4,
               f"6 steps with clipping, max |param diff| {diff:.2e}")


@dataclasses.dataclass
class Batch:
    features: torch.Tensor
    scale: float = 1.0


class ScaledMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = mlp()

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.body(batch.features) * batch.scale


def check_dataclass_batch() -> None:
    data = batches(3)
    torch.manual_seed(0)
    reference = ScaledMLP().to(GPU)
    opt = sgd(reference.parameters())
    for x, y in data:
        opt.zero_grad()
        F.cross_entropy(reference(Batch(x.to(GPU), 0.5)), y.to(GPU)).backward()
        opt.step()
    torch.manual_seed(0)
    hdp = HeteroDataParallel(ScaledMLP(), [HOST, GPU], sgd, reduce_device=GPU, split=[1, 1])
    try:
        for x, y in data:
            hdp.train_step(Batch(x, 0.5), y, F.cross_entropy)
        diff = max_difference(hdp.module, reference)
    finally:
        hdp.close()
    report("HeteroDataParallel: a dataclass batch is split field by field", diff < 1e-4, f"max |param diff| {diff:.2e}")


def check_grad_scaler() -> None:
    data = batches(5)

    def scaler():
        return torch.amp.GradScaler("fl", init_scale=2.0 ** 10, growth_interval=2)

    reference, ref_scaler = mlp().to(GPU), scaler()
    opt = sgd(reference.parameters())
    ref_scales = []
    for step, (x, y) in enumerate(data):
        opt.zero_grad()
        loss = F.cross_entropy(reference(x.to(GPU)), y.to(GPU)) * (float("inf") if step == 2 else 1.0)
        ref_scaler.scale(loss).backward()
        ref_scaler.unscale_(opt)
        clip(reference)
        ref_scaler.step(opt)
        ref_scaler.update()
        ref_scales.append(ref_scaler.get_scale())

    def loss_at(step):
        def loss_fn(out, y):
            loss = F.cross_entropy(out, y)
            return loss * float("inf") if step == 2 and out.device == torch.device(HOST) else loss
        return loss_fn

    hdp = HeteroDataParallel(mlp(), [HOST, GPU], sgd, reduce_device=GPU, split=[1, 3])
    hdp_scaler, scales = scaler(), []
    try:
        for step, (x, y) in enumerate(data):
            hdp.train_step(x, y, loss_at(step), before_step=clip, scaler=hdp_scaler)
            scales.append(hdp_scaler.get_scale())
        diff = max_difference(hdp.module, reference)
    finally:
        hdp.close()
    report("HeteroDataParallel with a GradScaler: an inf on the host shard skips the step", scales == ref_scales and diff < 1e-4,
           f"scales {scales} vs one loop's {ref_scales}, max |param diff| {diff:.2e}")


def check_fork_guard() -> None:
    torch.ones(4, device=GPU).sum().item()  # the GPU plugin is in use now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what an fl op does, and exit without Python's teardown
        os.close(read)
        try:
            torch.ones(4, device=GPU).sum().item()
            message = "no error"
        except RuntimeError as error:
            message = f"RuntimeError: {error}"
        message = f"bad_fork={torch.fl._is_in_bad_fork()} {message}"
        os.write(write, message.encode()[:4000])
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        message = pipe.read()
    os.waitpid(pid, 0)
    ok = message.startswith("bad_fork=True RuntimeError") and "spawn" in message
    report("a child forked after the GPU plugin's use gets a clear error", ok, message.splitlines()[0][:160])


def main() -> int:
    print(f"devices: GPU {GPU}, host {HOST}; torch {torch.__version__}")
    for device in (GPU, HOST):
        check_seeded_dropout(device)
    check_hetero_equals_big_batch()
    check_dataclass_batch()
    check_grad_scaler()
    check_fork_guard()
    print(f"{len(failures)} failed" + (f": {', '.join(failures)}" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
