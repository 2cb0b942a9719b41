"""Runs each workload on the native device and on fl, each in its own process (pytorch#161129
forbids native CUDA autograd beside a PrivateUse1 backend), one after the other in this one
run, and prints fl/native ratios.

    python bench/compare.py --native cpu --fl fl:0 --workloads small_ops cnn
    python bench/compare.py --native cuda:0 --fl fl:0 --workloads small_ops cnn gemm resnet50 gpt2

For latency rows (µs) the ratio printed is native/fl (higher is better for fl, 1.0 = parity);
for throughput rows it is fl/native. Either way, 1.0 means parity and < 1.0 means fl is slower.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_side(workload: str, device: str, timeout: int) -> dict:
    code = (
        "import json, sys, torch\n"
        f"sys.path.insert(0, {HERE!r})\n"
        + ("import torch_fl\n" if device.startswith("fl") else "")
        + "from workloads import WORKLOADS\n"
        f"print('RESULT' + json.dumps(WORKLOADS[{workload!r}]({device!r})))\n"
    )
    env = dict(os.environ)
    if not device.startswith("fl"):
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # the native side runs without torch_fl
    proc = subprocess.run([sys.executable, "-X", "faulthandler", "-u", "-c", code], capture_output=True, text=True, env=env, timeout=timeout)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT"):
            return json.loads(line[len("RESULT"):])
    raise RuntimeError(f"{workload} on {device} failed (exit {proc.returncode}):\n"
                       f"{proc.stdout[-1500:]}\n{proc.stderr[-3000:]}")


def main() -> None:
    p = argparse.ArgumentParser(description="fl vs native, side by side")
    p.add_argument("--native", default="cpu")
    p.add_argument("--fl", default="fl:0")
    p.add_argument("--workloads", nargs="+", default=["small_ops", "cnn"])
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--json", default="")
    args = p.parse_args()

    rows = []
    for w in args.workloads:
        try:
            native = run_side(w, args.native, args.timeout)
            fl = run_side(w, args.fl, args.timeout)
        except Exception as e:  # report and continue with the other workloads
            print(f"[{w}] FAILED: {e}", file=sys.stderr)
            rows.append({"workload": w, "error": str(e)[-500:]})
            continue
        for key, nv in native.items():
            fv = fl.get(key)
            latency = "(us)" in key
            ratio = (nv / fv if latency else fv / nv) if fv else float("nan")
            rows.append({"workload": w, "metric": key, "native": nv, "fl": fv, "ratio": ratio})

    print(f"\n{'metric':48} {args.native:>14} {args.fl:>14} {'ratio':>8}")
    for r in rows:
        if "error" in r:
            print(f"{r['workload']:48} {'failed':>14}")
            continue
        print(f"{r['metric']:48} {r['native']:>14.2f} {r['fl']:>14.2f} {r['ratio']:>8.3f}")
    print("ratio: fl relative to native (1.0 = parity; < 1 = fl slower)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"native": args.native, "fl": args.fl, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
