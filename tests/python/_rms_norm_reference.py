"""Reference values of aten::_fused_rms_norm and aten::_fused_rms_norm_backward, for tests.

Computed in float64 and rounded as ATen's CUDA kernels round (aten/src/ATen/native/cuda/
layer_norm_kernel.cu, `_fused_rms_norm_cuda` / `_fused_rms_norm_backward_cuda`):
- rstd = 1/sqrt(mean(x^2) + eps) per row (the trailing prod(normalized_shape) elements), in the
  accumulation dtype (float32 for float16/bfloat16/float32, float64 for float64), shaped
  input.shape[:-k] + [1] * k;
- eps None is the accumulation dtype's epsilon (torch.finfo(float32).eps for the 16-bit types);
- output = x * rstd * weight, rounded once into the input's dtype;
- backward, with the saved rstd as given: dx = rstd * (dy*w - x*rstd * sum(dy*w*x*rstd)/N),
  dweight = sum over rows of dy * x * rstd; None where output_mask says so or weight is None.
Not a test file: `python tests/python/_rms_norm_reference.py` checks it against PyTorch's CPU
composite (forward) and autograd of torch.nn.functional.rms_norm (backward).
"""
from __future__ import annotations

import math

import torch


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _rows(t: torch.Tensor, normalized_shape) -> torch.Tensor:
    n = math.prod(normalized_shape)
    return t.detach().to(torch.float64).reshape(-1, n)


def _stat_shape(input: torch.Tensor, normalized_shape) -> list[int]:
    k = len(normalized_shape)
    return list(input.shape[: input.dim() - k]) + [1] * k


def fused_rms_norm_reference(input, normalized_shape, weight=None, eps=None):
    """(output, rstd) of aten::_fused_rms_norm(input, normalized_shape, weight, eps)."""
    normalized_shape = list(normalized_shape)
    acc = _acc_dtype(input.dtype)
    if eps is None:
        eps = torch.finfo(acc).eps
    x = _rows(input, normalized_shape)
    rstd = torch.rsqrt(x.square().mean(dim=1, keepdim=True) + eps)
    out = x * rstd
    if weight is not None:
        out = out * weight.detach().to(torch.float64).reshape(1, -1)
    return (out.reshape(input.shape).to(input.dtype),
            rstd.reshape(_stat_shape(input, normalized_shape)).to(acc))


def fused_rms_norm_backward_reference(grad_out, input, normalized_shape, rstd, weight=None,
                                      output_mask=(True, True)):
    """(grad_input, grad_weight) of aten::_fused_rms_norm_backward; None for an output not made."""
    normalized_shape = list(normalized_shape)
    n = math.prod(normalized_shape)
    dy = _rows(grad_out, normalized_shape)
    x = _rows(input, normalized_shape)
    r = rstd.detach().to(torch.float64).reshape(-1, 1)
    w = weight.detach().to(torch.float64).reshape(1, -1) if weight is not None else None
    xhat = x * r
    g = dy * w if w is not None else dy
    grad_input = grad_weight = None
    if output_mask[0]:
        dx = r * (g - xhat * (g * xhat).sum(dim=1, keepdim=True) / max(n, 1))
        grad_input = dx.reshape(input.shape).to(input.dtype)
    if output_mask[1] and weight is not None:
        grad_weight = (dy * xhat).sum(dim=0).reshape(weight.shape).to(weight.dtype)
    return grad_input, grad_weight


def _check() -> None:
    """Compares the reference with PyTorch on CPU (composite forward, autograd backward)."""
    tol = {torch.float64: 1e-12, torch.float32: 2e-6, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}
    torch.manual_seed(0)
    cases = [((4, 6, 32), [32], True, 1e-5), ((3, 5, 8, 16), [8, 16], False, None),
             ((2, 7), [7], True, None), ((0, 12), [12], True, 1e-6), ((6, 1), [1], True, 1e-5)]
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        for shape, normalized, has_weight, eps in cases:
            x = torch.randn(shape, dtype=dtype)
            w = (torch.rand(normalized, dtype=torch.float64) + 0.5).to(dtype) if has_weight else None
            out, rstd = fused_rms_norm_reference(x, normalized, w, eps)
            want_out, want_rstd = torch.ops.aten._fused_rms_norm(x, normalized, w, eps)
            assert rstd.dtype == want_rstd.dtype and rstd.shape == want_rstd.shape, (rstd.shape, want_rstd.shape)
            assert out.dtype == want_out.dtype and out.shape == want_out.shape
            torch.testing.assert_close(rstd, want_rstd, rtol=tol[_acc_dtype(dtype)], atol=0)
            # One rounding apart at most (the composite rounds x*rstd to float first).
            torch.testing.assert_close(out.double(), want_out.double(), rtol=tol[dtype], atol=tol[dtype])

            xg = x.clone().requires_grad_()
            wg = w.clone().requires_grad_() if w is not None else None
            y = torch.nn.functional.rms_norm(xg, normalized, wg, eps)
            dy = torch.randn(shape, dtype=dtype)
            grads = torch.autograd.grad(y, [t for t in (xg, wg) if t is not None], dy, allow_unused=True)
            for mask in ((True, True), (True, False), (False, True)):
                gx, gw = fused_rms_norm_backward_reference(dy, x, normalized, want_rstd, w, mask)
                assert (gx is None) == (not mask[0]) and (gw is None) == (not mask[1] or w is None)
                # 16-bit: autograd's composite rounds each intermediate to the dtype.
                bound = {torch.bfloat16: 6e-2, torch.float16: 1e-2}.get(dtype, tol[dtype] * 10)
                if gx is not None:
                    torch.testing.assert_close(gx.double(), grads[0].double(), rtol=bound, atol=bound)
                if gw is not None:
                    torch.testing.assert_close(gw.double(), grads[1].double(), rtol=bound,
                                               atol=bound * max(1, x.numel() // max(w.numel(), 1)) ** 0.5)
    print("rms_norm reference: forward and backward match PyTorch on CPU")


if __name__ == "__main__":
    _check()
