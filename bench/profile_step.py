"""Where a training step's time goes, on one device: wall time per step, GPU kernel time per
step and the kernels ranked by GPU time (CUPTI through torch.profiler; on the H200 it saw no
kernel of the plugin, whose CUDA runtime is linked statically), and on fl the ATen ops ranked
by host and device time with the tier each took (torch_fl.profile(device_time=True)).

    python bench/profile_step.py --device fl:0 --workload resnet50 --steps 3
    python bench/profile_step.py --device cuda:0 --workload resnet50 --steps 3   # its own process

Run the two sides in separate processes (pytorch#161129). `--json` writes the numbers.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workloads import TRAINING_STEPS, sync  # noqa: E402


def kernel_times(prof) -> tuple[dict, float, float]:
    """GPU kernels by name (µs total, calls), their summed time and their first-to-last span (µs)."""
    per_kernel: dict = collections.defaultdict(lambda: [0.0, 0])
    starts, ends, busy = [], [], 0.0
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = e.time_range.elapsed_us()
        per_kernel[e.name][0] += us
        per_kernel[e.name][1] += 1
        busy += us
        starts.append(e.time_range.start)
        ends.append(e.time_range.end)
    span = (max(ends) - min(starts)) if starts else 0.0
    return dict(per_kernel), busy, span


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="fl:0")
    p.add_argument("--workload", choices=sorted(TRAINING_STEPS), default="cnn")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--json", default="")
    args = p.parse_args()

    is_fl = args.device.startswith("fl")
    if is_fl:
        import torch_fl
    step = TRAINING_STEPS[args.workload](args.device)
    for _ in range(3):
        step()
    sync(args.device)

    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync(args.device)
    wall_ms = (time.perf_counter() - start) * 1e3 / args.steps

    report: dict = {"device": args.device, "workload": args.workload, "wall_ms_per_step": wall_ms}
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    fl_prof = None
    with torch.profiler.profile(activities=activities) as prof:
        if is_fl:
            with torch_fl.profile(warn_above=1.0, device_time=True) as fl_prof:
                for _ in range(args.steps):
                    step()
        else:
            for _ in range(args.steps):
                step()
        sync(args.device)
    per_kernel, busy_us, span_us = kernel_times(prof)
    report["gpu_busy_ms_per_step"] = busy_us / 1e3 / args.steps
    report["gpu_span_ms_per_step"] = span_us / 1e3 / args.steps
    report["kernel_launches_per_step"] = sum(c for _, c in per_kernel.values()) / args.steps
    ranked = sorted(per_kernel.items(), key=lambda kv: -kv[1][0])
    report["kernels"] = [{"name": n[:160], "ms_per_step": us / 1e3 / args.steps, "calls_per_step": c / args.steps}
                         for n, (us, c) in ranked[: args.top * 2]]

    print(f"== {args.workload} on {args.device}: {wall_ms:.2f} ms/step wall (unprofiled), "
          f"GPU kernels {report['gpu_busy_ms_per_step']:.2f} ms/step busy over a "
          f"{report['gpu_span_ms_per_step']:.2f} ms span, {report['kernel_launches_per_step']:.0f} launches/step")
    print(f"{'kernel':100} {'ms/step':>9} {'calls':>7}")
    for k in report["kernels"][: args.top]:
        print(f"{k['name'][:100]:100} {k['ms_per_step']:>9.3f} {k['calls_per_step']:>7.1f}")
    if fl_prof is not None:
        rows = []
        for name, s in fl_prof.ops.items():
            calls = s["native"] + s["generic"] + s["cpu_fallback"]
            tier = max(("native", "generic", "cpu_fallback"), key=lambda t: s[t])
            rows.append({"op": name, "tier": tier, "calls_per_step": calls / args.steps,
                         "host_ms_per_step": s["seconds"] * 1e3 / args.steps,
                         "device_ms_per_step": s.get("device_seconds", 0.0) * 1e3 / args.steps})
        rows.sort(key=lambda r: -max(r["host_ms_per_step"], r["device_ms_per_step"]))
        report["fl_ops"] = rows
        report["fl_fallback_ratio"] = fl_prof.fallback_ratio
        print(f"\n{'fl op (nested ops and layout copies included)':56} {'tier':>12} {'calls':>7} "
              f"{'host ms':>9} {'device ms':>9}")
        for r in rows[: args.top]:
            print(f"{r['op'][:56]:56} {r['tier']:>12} {r['calls_per_step']:>7.1f} "
                  f"{r['host_ms_per_step']:>9.3f} {r['device_ms_per_step']:>9.3f}")
        stats = torch.fl.memory_stats()
        report["fl_memory_stats"] = {k: v for k, v in stats.items() if isinstance(v, (int, float))}
        print("allocator: device mallocs", stats.get("num_device_alloc"), "cache flushes",
              stats.get("num_alloc_retries"), "peak bytes", stats.get("allocated_bytes.all.peak"))
        print(f"fallback ratio {fl_prof.fallback_ratio:.1%}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
