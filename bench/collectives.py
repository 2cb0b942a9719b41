"""all_reduce bandwidth of flccl on fl tensors, beside native PyTorch NCCL on cuda tensors, in
one run: two ranks (processes) per mode, on two GPUs.

    python bench/collectives.py                 # needs two CUDA-plugin devices (and torch CUDA)
    python bench/collectives.py --json out.json

Modes:
  fl-nccl   flccl's device-direct route (FL_CCL=nccl): fl tensors of the CUDA plugin, NCCL
  fl-gloo   flccl host-staged (FL_CCL=gloo): the same fl tensors, through host memory and Gloo
  cuda      native: torch.distributed "nccl" on cuda:RANK tensors (torch_fl not loaded)
Printed per size: time per all_reduce and bus bandwidth (2·(n-1)/n · bytes / time, as
nccl-tests reports it), and fl-nccl / cuda. fl-gloo runs the smaller sizes only (it moves every
byte through the host and a TCP loopback).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

SIZES_MIB = [1, 16, 256]
GLOO_MAX_MIB = 16


def worker(mode: str, rank: int, world: int, init: str, iters: int) -> None:
    import torch
    import torch.distributed as dist

    if mode == "cuda":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        backend = "nccl"

        def sync():
            torch.cuda.synchronize(device)
    else:
        import torch_fl
        import torch_fl.distributed  # noqa: F401 - registers flccl

        ordinals = [d["index"] for d in torch_fl.list_devices() if d["plugin"] == "cuda"]
        device = torch.device("fl", ordinals[rank])
        torch.fl.set_device(device.index)
        backend = "flccl"

        def sync():
            torch.fl.synchronize(device.index)
    dist.init_process_group(backend, init_method=f"file://{init}", rank=rank, world_size=world)
    route = getattr(dist.group.WORLD, "route", "native")
    results = []
    for mib in SIZES_MIB:
        if mode == "fl-gloo" and mib > GLOO_MAX_MIB:
            continue
        n = mib * (1 << 20) // 4
        t = torch.ones(n, dtype=torch.float32, device=device)
        count = iters if mode != "fl-gloo" else max(iters // 4, 3)
        for _ in range(3):
            dist.all_reduce(t)
        sync()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(count):
            dist.all_reduce(t)
        sync()
        seconds = (time.perf_counter() - start) / count
        # After 3 + count all-reduces of ones over `world` ranks every element is world**(3+count).
        expected = float(world) ** (3 + count)
        correct = bool(torch.allclose(t[:4].cpu(), torch.full((4,), expected), rtol=1e-6))
        bus = 2 * (world - 1) / world * n * 4 / seconds / 1e9
        results.append({"mib": mib, "seconds": seconds, "bus_gb_s": bus, "correct": correct})
    if rank == 0:
        print(json.dumps({"mode": mode, "route": route, "results": results}), flush=True)
    dist.destroy_process_group()


def run_mode(mode: str, iters: int) -> dict:
    env = dict(os.environ)
    if mode == "cuda":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    else:
        env["FL_CCL"] = mode.split("-")[1]
    with tempfile.TemporaryDirectory() as tmp:
        init = os.path.join(tmp, "rendezvous")
        procs = [subprocess.Popen([sys.executable, __file__, "--worker", mode, str(r), "2", init, str(iters)],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for r in range(2)]
        logs = [p.communicate(timeout=400)[0] for p in procs]
    if any(p.returncode != 0 for p in procs):
        raise SystemExit(f"{mode} failed:\n" + "\n".join(log[-3000:] for log in logs))
    return json.loads([line for line in logs[0].splitlines() if line.startswith("{")][-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], int(sys.argv[6]))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--json", default="")
    args = p.parse_args()
    runs = {m: run_mode(m, args.iters) for m in ("cuda", "fl-nccl", "fl-gloo")}
    native = {r["mib"]: r for r in runs["cuda"]["results"]}
    print(f"{'mode':8} {'route':6} {'MiB':>5} {'us/all_reduce':>14} {'bus GB/s':>9} {'vs cuda':>8} correct")
    for mode, run in runs.items():
        for r in run["results"]:
            ratio = r["bus_gb_s"] / native[r["mib"]]["bus_gb_s"] if r["mib"] in native else float("nan")
            print(f"{mode:8} {run['route']:6} {r['mib']:5d} {r['seconds'] * 1e6:14.1f} {r['bus_gb_s']:9.1f} "
                  f"{ratio:8.3f} {r['correct']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
