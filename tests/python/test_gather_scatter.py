"""The CPU plugin's gather, scatter (src and value), scatter_add, flip and cumsum kernels: each
equals PyTorch's CPU result (value for value: the kernels add in ATen's CPU order and types),
runs in the native tier for every layout, in place too, and fails where ATen fails (an index
out of range raises with ATen's message when the stream is next synchronised)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_fl
from conftest import layouts, op_calls

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.int32, torch.bool]


def _calls(op):
    return op_calls(torch_fl.fallback_stats(), op)


def _values(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(-50, 50, shape, generator=g).to(dtype)


def _index(shape, bound, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, bound, shape, generator=g)


def _run(fn, *args):
    """fn on CPU tensors and on their fl:0 copies (same layouts); the fl result moved back."""
    want = fn(*args)
    got = fn(*[a.to("fl:0") if isinstance(a, torch.Tensor) else a for a in args])
    return got, want


def _same(got, want):
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got, want), (got, want)


# ---- gather --------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gather_matches_cpu_for_every_dim_and_layout(dtype):
    x = _values((4, 5, 6), dtype)
    torch_fl.reset_fallback_stats()
    cases = 0
    for dim in (0, 1, 2, -1, -3):
        size = x.shape[dim]
        shape = list(x.shape)
        shape[dim] = 7  # index may be longer than self along dim, and shorter elsewhere
        shape[(dim + 1) % 3] -= 1
        index = _index(shape, size)
        for (xl, xv) in layouts(x):
            for (il, iv) in layouts(index):
                got, want = _run(lambda a, i: torch.gather(a, dim, i), xv, iv)
                _same(got, want)
                cases += 1
    calls = _calls("aten::gather")
    assert calls == {"native": cases, "generic": 0, "cpu_fallback": 0}


def test_gather_int32_index_0dim_empty_and_out():
    x = torch.randn(3, 4)
    i32 = _index((2, 4), 3).int()
    torch_fl.reset_fallback_stats()
    _same(*_run(lambda a, i: a.gather(0, i), x, i32))
    _same(*_run(lambda a, i: a.gather(0, i), torch.tensor(2.5), torch.tensor(0)))
    _same(*_run(lambda a, i: a.gather(1, i), x, torch.zeros(3, 0, dtype=torch.long)))
    _same(*_run(lambda a, i: a.gather(0, i), x, torch.empty(0, dtype=torch.long)))
    # out=: a strided slice of a bigger buffer is written in place
    buf = torch.zeros(2, 8).to("fl:0")
    torch.gather(x.to("fl:0"), 0, i32.to("fl:0"), out=buf[:, ::2])
    expected = torch.zeros(2, 8)
    torch.gather(x, 0, i32, out=expected[:, ::2])
    _same(buf, expected)
    assert _calls("aten::gather")["cpu_fallback"] == 0


def test_gather_index_out_of_range_raises_with_atens_message():
    x = torch.randn(3, 4).to("fl:0")
    for bad in (3, -1):
        index = torch.tensor([[0, 1, bad, 0]]).to("fl:0")
        with pytest.raises(RuntimeError, match=f"index {bad} is out of bounds for dimension 0 with size 3"):
            torch.gather(x, 0, index).cpu()
    # the stream works on after the error
    assert torch.equal(torch.gather(x, 1, torch.tensor([[3], [0], [1]]).to("fl:0")).cpu(),
                       torch.gather(x.cpu(), 1, torch.tensor([[3], [0], [1]])))


def test_gather_backward_is_a_native_scatter_add():
    x = torch.randn(6, 5, dtype=torch.float64, requires_grad=True)
    index = _index((9, 5), 6)  # repeats: gradients add up
    xf = x.detach().to("fl:0").requires_grad_()
    torch_fl.reset_fallback_stats()
    (torch.gather(x, 0, index) * torch.arange(45.0, dtype=torch.float64).view(9, 5)).sum().backward()
    (torch.gather(xf, 0, index.to("fl:0")) * torch.arange(45.0, dtype=torch.float64).view(9, 5).to("fl:0")).sum().backward()
    _same(xf.grad, x.grad)
    assert _calls("aten::gather")["native"] == 1
    assert _calls("aten::scatter_add")["native"] >= 1 and _calls("aten::scatter_add")["cpu_fallback"] == 0


# ---- scatter / scatter_add ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_scatter_src_value_and_add_match_cpu(dtype):
    x = _values((5, 4, 3), dtype)
    torch_fl.reset_fallback_stats()
    cases = 0
    for dim in (0, 1, -1):
        shape = [3, 3, 2]
        shape[dim] = 6  # repeated targets: the last write wins (scatter), sums in index order (add)
        index = _index(shape, x.shape[dim], seed=dim + 5)
        src = _values([s + 1 for s in shape], dtype, seed=3)  # src may be larger than index
        value = True if dtype == torch.bool else (7 if not dtype.is_floating_point else -1.5)
        for (xl, xv) in layouts(x):
            for (il, iv) in layouts(index):
                _same(*_run(lambda a, i, s: torch.scatter(a, dim, i, s), xv, iv, src))
                _same(*_run(lambda a, i: torch.scatter(a, dim, i, value), xv, iv))
                _same(*_run(lambda a, i, s: torch.scatter_add(a, dim, i, s), xv, iv, src))
                cases += 1
    assert _calls("aten::scatter") == {"native": 2 * cases, "generic": 0, "cpu_fallback": 0}
    assert _calls("aten::scatter_add") == {"native": cases, "generic": 0, "cpu_fallback": 0}


def test_scatter_in_place_on_strided_self_writes_self():
    base = torch.randn(6, 8)
    index = _index((4, 3), 7)
    src = torch.randn(4, 3)
    fl_base = base.to("fl:0")
    torch_fl.reset_fallback_stats()
    for op in ("scatter_", "scatter_add_"):
        want_view = base.t()[1:, ::2]  # [7, 3], a non-contiguous view of base
        got_view = fl_base.t()[1:, ::2]
        getattr(want_view, op)(0, index, src)
        getattr(got_view, op)(0, index.to("fl:0"), src.to("fl:0"))
        _same(fl_base, base)  # the view's base changed as on CPU
    want = base.clone().scatter_(1, _index((6, 5), 8), 2.0)
    got = fl_base.scatter_(1, _index((6, 5), 8).to("fl:0"), 2.0)
    _same(got, want)
    assert got.data_ptr() == fl_base.data_ptr()
    assert _calls("aten::scatter")["cpu_fallback"] == 0 and _calls("aten::scatter_add")["cpu_fallback"] == 0
    assert _calls("aten::scatter")["native"] == 2 and _calls("aten::scatter_add")["native"] == 1


def test_scatter_0dim_empty_index_and_int32_index():
    torch_fl.reset_fallback_stats()
    _same(*_run(lambda a, i, s: torch.scatter_add(a, 0, i, s), torch.tensor(1.5), torch.tensor(0), torch.tensor(2.0)))
    _same(*_run(lambda a, i: torch.scatter(a, 0, i, 4.0), torch.tensor(1.5), torch.tensor(0)))
    x = torch.randn(3, 4)
    _same(*_run(lambda a, i, s: torch.scatter(a, 1, i, s), x, torch.zeros(3, 0, dtype=torch.long), torch.randn(3, 2)))
    _same(*_run(lambda a, i, s: torch.scatter_add(a, 0, i, s), x, _index((5, 4), 3).int(), torch.randn(5, 4)))
    assert _calls("aten::scatter")["cpu_fallback"] == 0 and _calls("aten::scatter_add")["cpu_fallback"] == 0


def test_scatter_value_keeps_int64_precision_and_converts_as_aten():
    big = 2 ** 53 + 1
    _same(*_run(lambda a, i: a.scatter(0, i, big), torch.zeros(3, dtype=torch.long), torch.tensor([1])))
    _same(*_run(lambda a, i: a.scatter(0, i, 2.7), torch.zeros(3, dtype=torch.int32), torch.tensor([2])))
    _same(*_run(lambda a, i: a.scatter(0, i, 0.5), torch.zeros(3, dtype=torch.bool), torch.tensor([0])))


def test_scatter_index_out_of_range_raises_with_atens_message():
    x = torch.zeros(2, 3).to("fl:0")
    index = torch.tensor([[0, 5, 1]]).to("fl:0")
    with pytest.raises(RuntimeError, match="index 5 is out of bounds for dimension 1 with size 3"):
        x.scatter_add(1, index, torch.ones(1, 3).to("fl:0")).cpu()
    with pytest.raises(RuntimeError, match="index -2 is out of bounds for dimension 1 with size 3"):
        x.scatter(1, torch.tensor([[-2]]).to("fl:0"), 1.0).cpu()


def test_scatter_with_src_overlapping_self_is_declined_not_served_in_place():
    """ATen refuses src overlapping the written tensor; the kernel declines such a call."""
    y = torch.arange(6.0).to("fl:0")
    torch_fl.reset_fallback_stats()
    try:
        y.scatter_(0, torch.tensor([0, 1]).to("fl:0"), y[1:3])
    except RuntimeError as e:
        assert "memory location" in str(e)
    assert _calls("aten::scatter")["native"] == 0


def test_one_hot_and_survey_calls_run_native():
    t = torch.randint(0, 10, (8,))
    x = torch.randn(8, 10)
    torch_fl.reset_fallback_stats()
    _same(F.one_hot(t.to("fl:0"), 10), F.one_hot(t, 10))
    _same(x.to("fl:0").gather(1, t.to("fl:0")[:, None]), x.gather(1, t[:, None]))
    _same(torch.zeros(10).to("fl:0").scatter_add_(0, t.to("fl:0"), torch.ones(8).to("fl:0")),
          torch.zeros(10).scatter_add_(0, t, torch.ones(8)))
    for op in ("aten::scatter", "aten::gather", "aten::scatter_add"):
        assert _calls(op)["cpu_fallback"] == 0 and _calls(op)["native"] >= 1, op


def test_deterministic_mode_keeps_scatter_native_on_cpu():
    x = torch.randn(5, 3)
    index = _index((7, 3), 5)
    src = torch.randn(7, 3)
    torch.use_deterministic_algorithms(True)
    try:
        torch_fl.reset_fallback_stats()
        _same(*_run(lambda a, i, s: a.scatter_add(0, i, s), x, index, src))
        _same(*_run(lambda a, i, s: a.scatter(0, i, s), x, index, src))
    finally:
        torch.use_deterministic_algorithms(False)
    assert _calls("aten::scatter_add")["native"] == 1 and _calls("aten::scatter")["native"] == 1
