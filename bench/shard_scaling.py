"""How one device's forward+backward time grows with the shard size — the cost model
HeteroDataParallel's balancer fits (a fixed cost a plus b per sample), measured directly.

    python bench/shard_scaling.py --device fl:0 --workload wide --sizes 256 512 1024 2048 4096

For each shard size it prints the median of --reps timed forward/backward passes (batch copied
from the host, as in a training step; no optimizer step) and the time per sample; then the
least-squares fit a + b·n over all sizes. A device whose time barely grows with n (large a,
small b) gains nothing from a smaller shard — a split cannot shorten its step.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch_fl  # noqa: E402
from hetero import WORKLOADS, _batches  # noqa: E402
from torch_fl.balancer import fit_line  # noqa: E402
from torch_fl.parallel import device_context, synchronize_device  # noqa: E402


def time_sizes(workload: str, device: str, sizes: list[int], reps: int,
               profile: bool = False) -> list[tuple[int, float]]:
    dev = torch.device(device)
    torch.manual_seed(0)
    model = WORKLOADS[workload][0]().to(dev)
    # Passes take turns over several batches, so that a small shard is not read from a cache
    # that a training loop's fresh rows would miss; gradients are dropped before each pass, as
    # HeteroDataParallel does.
    data = _batches(workload, max(sizes), 4)
    out = []
    with device_context(dev):
        for n in sizes:
            times = []
            for k in range(reps + 2):  # two untimed warm-ups per size
                x, y = data[k % len(data)]
                for p in model.parameters():
                    p.grad = None
                start = time.perf_counter()
                loss = F.cross_entropy(model(x[:n].to(dev)), y[:n].to(dev))
                loss.backward()
                synchronize_device(dev)
                if k >= 2:
                    times.append(time.perf_counter() - start)
            out.append((n, statistics.median(times)))
            if profile and dev.type == "fl":
                with torch_fl.profile(device_time=True) as prof:
                    for k in range(reps):
                        x, y = data[k % len(data)]
                        F.cross_entropy(model(x[:n].to(dev)), y[:n].to(dev)).backward()
                print(f"-- shard {n}, {reps} passes:\n{prof.table()}")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="fl:0")
    p.add_argument("--workload", default="wide", choices=sorted(WORKLOADS))
    p.add_argument("--sizes", nargs="+", type=int, default=[256, 512, 1024, 2048, 4096])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--profile", action="store_true", help="also print torch_fl.profile's table per size")
    p.add_argument("--json", default="")
    args = p.parse_args()
    points = time_sizes(args.workload, args.device, sorted(args.sizes), args.reps, args.profile)
    print(f"{args.workload} on {args.device} (torch threads {torch.get_num_threads()}, "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}):")
    for n, t in points:
        print(f"  shard {n:6d}: {t * 1e3:8.3f} ms, {t / n * 1e6:8.3f} us/sample")
    a, b = fit_line(points)  # unclamped, unlike the balancer's
    print(f"  fit: {a * 1e3:.3f} ms + {b * 1e6:.3f} us/sample")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"workload": args.workload, "device": args.device, "points": points,
                       "fixed_s": a, "per_sample_s": b}, f, indent=1)


if __name__ == "__main__":
    main()
