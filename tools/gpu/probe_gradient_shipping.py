"""How long HeteroDataParallel's gradient shipping takes from a CPU-plugin device to a CUDA-plugin
device, with that device idle and with a long job still queued on its stream: each step of a
`g.to(gpu, non_blocking=True)` of the wide MLP's four gradients, timed on the host.

    FL_PLUGIN_PATH=libfl_cuda.so:libfl_cpu.so python tools/gpu/probe_gradient_shipping.py

A non_blocking copy from a host-memory device goes through a pinned block and should return
without waiting for the GPU; a time of milliseconds while the GPU is busy says that something
on the way waits for the GPU's stream.
"""
from __future__ import annotations

import time

import torch
import torch_fl

from torch_fl.parallel import device_context, synchronize_device


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return (time.perf_counter() - start) * 1e3, out


def main() -> None:
    cpu, gpu = torch_fl.devices("cpu")[0], torch_fl.devices("cuda")[0]
    shapes = [(64, 2048), (64,), (10, 64), (10,)]  # the wide MLP's gradients
    grads = [torch.randn(s).to(cpu) for s in shapes]
    batch = torch.randn(30720, 2048).pin_memory()  # the master's shard of a pinned batch
    weight = torch.randn(2048, 64).to(gpu)
    # Which allocator pinned what: torch_fl's cache counts its blocks once they are freed.
    before = torch_fl._C.pinned_cached_bytes()
    del batch
    after_pin_memory = torch_fl._C.pinned_cached_bytes()
    probe = torch.empty(1 << 20, pin_memory=True)
    del probe
    after_empty = torch_fl._C.pinned_cached_bytes()
    print(f"torch_fl's pinned cache grew by {after_pin_memory - before} bytes when a tensor.pin_memory() "
          f"batch was freed, by {after_empty - after_pin_memory} when a torch.empty(pin_memory=True) was")
    batch = torch.randn(30720, 2048).pin_memory()
    with device_context(gpu):
        for busy in (False, True, False, True):
            for _ in range(3):  # warm: allocator blocks, pinned blocks
                [g.to(gpu, non_blocking=True) for g in grads]
            synchronize_device(gpu)
            if busy:
                ms_batch, x = timed(lambda: batch.to(gpu, non_blocking=True))  # ~4.6 ms of copy at 54 GB/s
                print(f"a pinned 252 MB batch's non_blocking copy returned after {ms_batch:.3f} ms")
                for _ in range(20):
                    x @ weight
            begin = time.perf_counter()
            each = []
            for g in grads:
                ms_pin, pinned = timed(lambda: torch.empty(g.shape, pin_memory=True))
                ms_alloc, dst = timed(lambda: torch.empty(g.shape, device=gpu))
                ms_copy, _ = timed(lambda: dst.copy_(pinned, non_blocking=True))
                ms_to, _ = timed(lambda: g.to(gpu, non_blocking=True))
                each.append(f"{tuple(g.shape)}: pin {ms_pin:.3f} alloc {ms_alloc:.3f} copy {ms_copy:.3f} to {ms_to:.3f}")
            shipped = (time.perf_counter() - begin) * 1e3
            ms_wait, _ = timed(lambda: synchronize_device(gpu))
            print(f"gpu {'busy' if busy else 'idle'}: {shipped:.3f} ms for the four, then {ms_wait:.3f} ms "
                  f"until the gpu was done; " + "; ".join(each))


if __name__ == "__main__":
    main()
