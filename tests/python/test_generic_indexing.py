"""Advanced indexing with integer index tensors on fl (aten::index.Tensor) runs in the generic tier
(generic_indexing.h: index_select over the indexed dimensions), on the device; boolean masks keep
the CPU fallback. Results are compared with ATen's CPU indexing, value for value."""
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


def test_indexing_gradient_flows_back_through_index_put():
    x = X.clone().requires_grad_()
    rows, cols = torch.tensor([0, 1, 1, 3]), torch.tensor([2, 2, 2, 0])
    x[rows, cols].square().sum().backward()
    xf = X.to("fl:0").requires_grad_()
    xf[rows.to("fl:0"), cols.to("fl:0")].square().sum().backward()
    torch.testing.assert_close(xf.grad.cpu(), x.grad)


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
