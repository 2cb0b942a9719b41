"""Advanced indexing on fl in the generic tier (generic_indexing.h), on the device: reads with integer
index tensors (aten::index.Tensor, through index_select) and writes (index_put_, through
scatter/scatter_add, or where() for a boolean mask with one value); boolean-mask reads and
mask writes of many values keep the CPU fallback. Compared with ATen's CPU indexing, value for
value."""
from __future__ import annotations

import pytest
import torch

import torch_fl
from conftest import op_calls

torch.manual_seed(11)
X = torch.randn(4, 5, 6, 7)

CASES = {
    "one index, negative": lambda t, d: t[torch.tensor([3, 0, -1, 2, -4]).to(d)],
    "one 2-D index on dim 1": lambda t, d: t[:, torch.tensor([[1, 4], [0, -2]]).to(d)],
    "rows and cols (metric code's logits[arange(n), target])": lambda t, d: t[torch.arange(4).to(d),
                                                                            torch.tensor([0, 4, 2, 1]).to(d)],
    "adjacent pair after a slice, broadcast": lambda t, d: t[:, torch.tensor([1, 2]).to(d),
                                                             torch.tensor([[0], [5]]).to(d)],
    "non-adjacent pair: index dims first": lambda t, d: t[torch.tensor([1, 2, 3]).to(d), :,
                                                          torch.tensor([0, 5, -1]).to(d)],
    "Ellipsis and int32": lambda t, d: t[..., torch.tensor([6, 0], dtype=torch.int32).to(d)],
    "index on the host": lambda t, d: t[torch.tensor([1, 2])],
    "transposed self": lambda t, d: t.transpose(0, 3)[torch.tensor([1, 2]).to(d), torch.tensor([3, 3]).to(d)],
    "empty index": lambda t, d: t[torch.tensor([], dtype=torch.long).to(d)],
    "bfloat16 values": lambda t, d: t.bfloat16()[torch.tensor([0, 3]).to(d), torch.tensor([4, 4]).to(d)],
}


@pytest.mark.parametrize("name", list(CASES))
def test_integer_indexing_matches_cpu_and_stays_on_the_device(name):
    torch_fl.reset_fallback_stats()
    expected = CASES[name](X, "cpu")
    actual = CASES[name](X.to("fl:0"), "fl:0")
    assert actual.device.type == "fl"
    assert actual.shape == expected.shape
    assert torch.equal(actual.cpu(), expected)
    assert op_calls(torch_fl.fallback_stats(), "aten::index") == {"native": 0, "generic": 1, "cpu_fallback": 0}


def test_boolean_mask_keeps_the_cpu_fallback():
    torch_fl.reset_fallback_stats()
    mask = X > 0.5
    assert torch.equal(X.to("fl:0")[mask.to("fl:0")].cpu(), X[mask])
    assert op_calls(torch_fl.fallback_stats(), "aten::index")["cpu_fallback"] == 1


@pytest.mark.parametrize("index, message", [
    ((torch.tensor([5]),), r"index 5 is out of bounds for dimension 0 with size 4"),
    ((torch.tensor([-5]),), r"index -5 is out of bounds for dimension 0 with size 4"),
    ((slice(None), torch.tensor([2, 9])), r"index 9 is out of bounds for dimension 1 with size 5"),
    ((torch.tensor([1]), torch.tensor([9])), r"index -1 is out of bounds"),
])
def test_index_out_of_range_raises_and_the_device_works_on(index, message):
    xf = X.to("fl:0")
    moved = tuple(i.to("fl:0") if isinstance(i, torch.Tensor) else i for i in index)
    with pytest.raises(RuntimeError, match=message):
        xf[moved].cpu()
    assert torch.equal(xf[torch.tensor([1, 0]).to("fl:0")].cpu(), X[torch.tensor([1, 0])])


def test_index_select_refuses_negative_indices_like_aten():
    x = torch.randn(4, 5)
    with pytest.raises(IndexError):
        torch.index_select(x, 0, torch.tensor([-1]))
    with pytest.raises(RuntimeError, match=r"index -1 is out of bounds for dimension 0 with size 4"):
        torch.index_select(x.to("fl:0"), 0, torch.tensor([-1]).to("fl:0")).cpu()


def _t(device, *values):
    return torch.tensor(list(values)).to(device)


PUT_CASES = {
    "x[idx] = 1": lambda x, d: x.__setitem__(_t(d, 0, 2, -1), 1.0),
    "x[:, idx] = broadcast values": lambda x, d: x.__setitem__((slice(None), _t(d, 4, -1)),
                                                               torch.arange(2.0).view(1, 2, 1, 1).to(d)),
    "accumulate with repeated pairs": lambda x, d: x.index_put_((_t(d, 0, 0, 3), _t(d, 1, 1, 2)),
                                                                torch.arange(3.0).view(3, 1, 1).to(d),
                                                                accumulate=True),
    "non-adjacent pair": lambda x, d: x.__setitem__((_t(d, 1, 2), slice(None), _t(d, 0, 5)),
                                                    torch.arange(70.0).view(2, 5, 7).to(d)),
    "adjacent pair after a slice": lambda x, d: x.__setitem__((slice(None), _t(d, 1, 2), _t(d, 0, 5)),
                                                              torch.arange(56.0).view(4, 2, 7).to(d)),
    "x[mask] = 0": lambda x, d: x.__setitem__(x > 0.5, 0.0),
    "x[mask over 2 dims] = -inf": lambda x, d: x.__setitem__(x[:, :, 0, 0] > 0, float("-inf")),
    "x[:, mask] = 3": lambda x, d: x.__setitem__((slice(None), _t(d, True, False, True, False, False)), 3.0),
    "x[mask] += 2 (accumulate)": lambda x, d: x.index_put_((x > 0,), torch.tensor(2.0).to(d), accumulate=True),
}


@pytest.mark.parametrize("name", list(PUT_CASES))
def test_index_put_matches_cpu_and_stays_on_the_device(name):
    torch_fl.reset_fallback_stats()
    expected, actual = X.clone(), X.clone().to("fl:0")
    PUT_CASES[name](expected, "cpu")
    PUT_CASES[name](actual, "fl:0")
    assert torch.equal(actual.cpu(), expected)
    assert op_calls(torch_fl.fallback_stats(), "aten::_index_put_impl") == {"native": 0, "generic": 1,
                                                                            "cpu_fallback": 0}


def test_index_put_with_a_mask_and_many_values_keeps_the_cpu_fallback():
    torch_fl.reset_fallback_stats()
    expected, actual = X.clone(), X.clone().to("fl:0")
    count = int((X > 1.0).sum())
    expected[X > 1.0] = torch.arange(float(count))
    actual[actual > 1.0] = torch.arange(float(count)).to("fl:0")
    assert torch.equal(actual.cpu(), expected)
    assert op_calls(torch_fl.fallback_stats(), "aten::_index_put_impl")["cpu_fallback"] == 1


def test_indexing_backward_runs_on_the_device():
    torch_fl.reset_fallback_stats()
    xf = X.to("fl:0").requires_grad_()
    xf[_t("fl:0", 0, 1, 1), _t("fl:0", 2, 2, 2)].square().sum().backward()
    x = X.clone().requires_grad_()
    x[_t("cpu", 0, 1, 1), _t("cpu", 2, 2, 2)].square().sum().backward()
    torch.testing.assert_close(xf.grad.cpu(), x.grad)
    stats = torch_fl.fallback_stats()
    assert op_calls(stats, "aten::_index_put_impl")["cpu_fallback"] == 0
    assert op_calls(stats, "aten::index")["cpu_fallback"] == 0


def test_index_put_out_of_range_raises():
    xf = X.to("fl:0")
    with pytest.raises(RuntimeError, match=r"out of bounds"):
        xf[_t("fl:0", 1), _t("fl:0", 9)] = 1.0
        xf.cpu()
