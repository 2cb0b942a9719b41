"""The CPU plugin's nearest-neighbour upsampling (F.interpolate / nn.Upsample, modes "nearest"
and "nearest-exact"), forward and backward: what UNet decoders and detection necks call every
step. Every output reads the source pixel torch's CPU reads, for integer and fractional
factors, explicit sizes, and channels_last inputs; gradients equal torch's; the native tier
serves both directions."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_fl
from conftest import op_calls

CASES = [
    dict(scale_factor=2), dict(scale_factor=3), dict(scale_factor=(2, 1)), dict(size=(7, 5)), dict(size=(3, 2)),
    dict(size=(10, 10)), dict(scale_factor=1.7), dict(scale_factor=0.5), dict(size=(5, 6)),
]


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_interpolate_forward_and_backward_match_cpu(mode, dtype):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 6, dtype=dtype)
    kernel = "aten::upsample_nearest2d" if mode == "nearest" else "aten::_upsample_nearest_exact2d"
    for kwargs in CASES:
        torch_fl.reset_fallback_stats()
        a = x.clone().requires_grad_()
        b = x.clone().to("fl:0").requires_grad_()
        ya, yb = F.interpolate(a, mode=mode, **kwargs), F.interpolate(b, mode=mode, **kwargs)
        assert torch.equal(yb.detach().cpu(), ya.detach()), kwargs  # a copy: exact
        g = torch.randn(ya.shape, dtype=dtype)
        ya.backward(g)
        yb.backward(g.to("fl:0"))
        tol = 1e-2 if dtype == torch.bfloat16 else 1e-6
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=tol, atol=tol, msg=str(kwargs))
        fwd, bwd = op_calls(torch_fl.fallback_stats(), kernel), op_calls(torch_fl.fallback_stats(), kernel + "_backward")
        assert fwd["native"] == 1 and fwd["cpu_fallback"] == 0, (kwargs, fwd)
        assert bwd["native"] == 1 and bwd["cpu_fallback"] == 0, (kwargs, bwd)


def test_upsample_of_integers_channels_last_and_module_form():
    img = torch.randint(0, 255, (1, 3, 4, 4), dtype=torch.uint8)
    assert torch.equal(F.interpolate(img.to("fl:0"), scale_factor=2).cpu(), F.interpolate(img, scale_factor=2))
    x = torch.randn(2, 4, 6, 6).to(memory_format=torch.channels_last)
    up = torch.nn.Upsample(scale_factor=2, mode="nearest")
    got = up(x.to("fl:0"))
    assert got.is_contiguous(memory_format=torch.channels_last) == up(x).is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(got.cpu(), up(x))


def test_recompute_scale_factor_and_explicit_scales_read_the_same_pixels():
    x = torch.arange(2 * 7 * 9, dtype=torch.float32).view(1, 2, 7, 9)
    for kwargs in (dict(scale_factor=1.3), dict(scale_factor=1.3, recompute_scale_factor=True),
                   dict(scale_factor=(2.5, 0.4))):
        for mode in ("nearest", "nearest-exact"):
            assert torch.equal(F.interpolate(x.to("fl:0"), mode=mode, **kwargs).cpu(),
                               F.interpolate(x, mode=mode, **kwargs)), (kwargs, mode)


def test_unet_decoder_step_runs_without_fallback():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                              torch.nn.Upsample(scale_factor=2), torch.nn.Conv2d(8, 1, 1))
    x, y = torch.randn(2, 3, 16, 16), torch.randn(2, 1, 16, 16)
    grads = []
    for dev in ("cpu", "fl:0"):
        m = net.to(dev)
        m.zero_grad()
        if dev != "cpu":
            torch_fl.reset_fallback_stats()
        F.mse_loss(m(x.to(dev)), y.to(dev)).backward()
        grads.append([p.grad.cpu().clone() for p in m.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    fallbacks = {k: v for k, v in torch_fl.fallback_stats().items() if v["cpu_fallback"]}
    assert not fallbacks, fallbacks
