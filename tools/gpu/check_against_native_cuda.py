"""Compares the CUDA plugin's fl device with PyTorch's own CUDA device bit for bit, for the
elementwise arithmetic whose rounding ATen's CUDA kernels fix: div in each rounding mode by
each kind of divisor (a Python number, a 0-dim CPU tensor, a one-element device tensor, a
tensor), mul, add/sub with alpha, addcmul, addcdiv, lerp, in float32, float64, bfloat16 and
float16. Prints, per case, how many of the elements differ; exits 1 when any case differs
that KNOWN does not explain.

    FL_PLUGIN_PATH=build-gpu/plugins/cuda/libfl_cuda.so python tools/gpu/check_against_native_cuda.py [fl:0 [cuda:0]]
"""
from __future__ import annotations

import sys

import torch

import torch_fl  # noqa: F401  (registers the fl device)

FL = sys.argv[1] if len(sys.argv) > 1 else "fl:0"
NATIVE = sys.argv[2] if len(sys.argv) > 2 else "cuda:0"
N = 100_000
DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


# Cases where the plugin differs from ATen's CUDA by design, and why; printed, not failed.
KNOWN = {
    "x.addcmul(y, y, value=0.1)": "both plugins compute fma(value * t1, t2, self), ATen's CPU form, so that "
                                  "an optimizer step is bit-identical on the CPU and CUDA plugins (ATen's "
                                  "CUDA: self + value * (t1 * t2))",
}


def divisors(b: torch.Tensor, device: str) -> dict[str, object]:
    """The divisor b in each form ATen tells apart (a host scalar takes the reciprocal path)."""
    return {
        "python number": 0.3,
        "0-dim cpu tensor": torch.tensor(-0.7, dtype=b.dtype),
        "one-element device tensor": torch.tensor([0.3], dtype=b.dtype).to(device),
        "tensor": b.to(device),
    }


def cases(a: torch.Tensor, b: torch.Tensor, device: str) -> dict[str, torch.Tensor]:
    x = a.to(device)
    out = {}
    for form, d in divisors(b, device).items():
        out[f"x / ({form})"] = x / d
        out[f"div(x, {form}, trunc)"] = torch.div(x, d, rounding_mode="trunc")
        out[f"div(x, {form}, floor)"] = torch.div(x, d, rounding_mode="floor")
        out[f"x * ({form})"] = x * d
    y = b.to(device)
    out["div(x, 0, floor)"] = torch.div(x, 0.0, rounding_mode="floor")
    out["x.add(y, alpha=0.3)"] = x.add(y, alpha=0.3)
    out["x.sub(y, alpha=0.3)"] = x.sub(y, alpha=0.3)
    out["x + 0.3"] = x + 0.3
    out["x.addcmul(y, y, value=0.1)"] = x.addcmul(y, y, value=0.1)
    out["x.addcdiv(y, y.abs() + 1, value=-0.01)"] = x.addcdiv(y, y.abs() + 1, value=-0.01)
    out["x.lerp(y, 0.1)"] = x.lerp(y, 0.1)
    return out


def differing(p: torch.Tensor, q: torch.Tensor) -> int:
    """Elements whose bits differ (every NaN counts as equal to every NaN)."""
    p, q = p.cpu(), q.cpu()
    same = (p == q) | (p.isnan() & q.isnan())
    return int((~same).sum())


def main() -> int:
    torch.manual_seed(0)
    failures = []
    for dtype in DTYPES:
        # Quotients near integers, where the reciprocal and a rounded quotient change trunc/floor.
        a = (torch.randn(N) * 8).to(dtype)
        b = (torch.randn(N) * 0.5).to(dtype)
        native, fl = cases(a, b, NATIVE), cases(a, b, FL)
        for name in native:
            n = differing(fl[name], native[name])
            verdict = "ok  " if n == 0 else "known" if name in KNOWN else "DIFF"
            print(f"{verdict:5} {str(dtype).removeprefix('torch.'):8} {name:48} {n:6d} of {N} elements differ")
            if n and name not in KNOWN:
                failures.append(f"{dtype} {name}")
    for name, why in KNOWN.items():
        print(f"known: {name}: {why}")
    print(f"{len(failures)} cases differ from {NATIVE}" + (": " + "; ".join(failures) if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
