"""Sparse COO tensors on fl (the SparsePrivateUse1 key): construction and structure run ATen's
shared sparse code on fl buffers; value ops run PyTorch's sparse CPU kernels through the CPU
fallback tier, counted. Before bindings/csrc/sparse_ops.cpp, torch.sparse_coo_tensor(...,
device="fl:0") and nn.Embedding(sparse=True)'s backward failed ("Sparsefl" backend)."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn

import torch_fl


def _coo(device: str) -> torch.Tensor:
    i = torch.tensor([[0, 1, 1, 0], [2, 0, 2, 2]])
    v = torch.tensor([3.0, 4.0, 5.0, 1.0])  # (0, 2) twice: uncoalesced
    return torch.sparse_coo_tensor(i, v, (2, 3), device=device)


def test_a_coo_tensor_is_built_on_fl_and_keeps_its_structure():
    s = _coo("fl:0")
    assert s.layout == torch.sparse_coo and s.device == torch.device("fl:0")
    assert (s.sparse_dim(), s.dense_dim(), s._nnz(), s.is_coalesced()) == (2, 0, 4, False)
    assert s._indices().device == s._values().device == torch.device("fl:0")
    torch.testing.assert_close(s.to_dense().cpu(), _coo("cpu").to_dense())
    c = s.coalesce()
    assert c.is_coalesced() and c._nnz() == 3 and c.device == torch.device("fl:0")
    torch.testing.assert_close(c.indices().cpu(), _coo("cpu").coalesce().indices())
    torch.testing.assert_close(c.values().cpu(), _coo("cpu").coalesce().values())
    back = s.cpu()
    assert back.layout == torch.sparse_coo and back.device.type == "cpu"
    torch.testing.assert_close(back.to_dense(), _coo("cpu").to_dense())
    twin = s.clone()
    twin._values().mul_(2)  # a clone owns its buffers
    torch.testing.assert_close(s.to_dense().cpu(), _coo("cpu").to_dense())


def test_sparse_arithmetic_equals_the_cpu_and_is_counted_as_cpu_fallback():
    s, ref = _coo("fl:0"), _coo("cpu")
    dense = torch.arange(6.0).reshape(2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = dense.to("fl:0")
        d.add_(s, alpha=2)
        results = [d, (s + s).to_dense(), (s * 3).to_dense(), torch.sparse.sum(s)]
    expected = [dense.clone().add_(ref, alpha=2), (ref + ref).to_dense(), (ref * 3).to_dense(), torch.sparse.sum(ref)]
    for got, want in zip(results, expected):
        torch.testing.assert_close(got.cpu(), want)
    assert torch_fl.fallback_stats()["aten::add_.Tensor"]["cpu_fallback"] >= 1


@pytest.mark.parametrize("optimizer", ["SGD", "SGD momentum", "SparseAdam", "Adagrad"])
def test_a_sparse_embedding_trains_on_fl_as_on_the_cpu(optimizer):
    torch.manual_seed(0)
    ref = nn.Embedding(20, 4, sparse=True)
    model = nn.Embedding(20, 4, sparse=True)
    model.load_state_dict(ref.state_dict())
    model.to("fl:0")

    def make(params):
        if optimizer == "SGD":
            return torch.optim.SGD(params, lr=0.1)
        if optimizer == "SGD momentum":
            return torch.optim.SGD(params, lr=0.1, momentum=0.9)
        return getattr(torch.optim, optimizer)(params, lr=0.05)

    opts = [make(ref.parameters()), make(model.parameters())]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(4):
            idx = torch.randint(0, 20, (8,))
            for m, opt, device in ((ref, opts[0], "cpu"), (model, opts[1], "fl:0")):
                opt.zero_grad()
                m(idx.to(device)).pow(2).sum().backward()
                m(idx[:3].to(device)).sum().backward()  # a second backward accumulates into the sparse grad
                opt.step()
    assert model.weight.grad.layout == torch.sparse_coo and model.weight.grad.device == torch.device("fl:0")
    torch.testing.assert_close(model.weight.detach().cpu(), ref.weight.detach(), rtol=0, atol=1e-6)


def test_a_sparse_op_without_a_cpu_kernel_is_refused_naming_it():
    # exp has no sparse kernel in PyTorch (exp(0) is not 0): the error names the op and fl, as
    # the CPU's names SparseCPU.
    s = _coo("fl:0").coalesce()
    with pytest.raises(NotImplementedError, match=r"torch_fl: aten::exp is not available for sparse tensors on fl: "
                                                  r"PyTorch has no sparse CPU kernel"):
        torch.exp(s)
    with pytest.raises(NotImplementedError):  # as on the CPU
        torch.exp(_coo("cpu").coalesce())


def test_a_coo_tensor_moves_between_fl_devices_and_is_built_on_the_one_asked_for():
    # ATen's sparse constructors make their buffers on the current device; fl:1's tensor got
    # fl:0's buffers and failed ATen's device assert before the constructors took a guard.
    s = _coo("fl:0")
    moved = s.to("fl:1")
    assert moved.device == moved._values().device == moved._indices().device == torch.device("fl:1")
    torch.testing.assert_close(moved.to_dense().cpu(), _coo("cpu").to_dense())
    built = _coo("fl:1")
    assert built._values().device == built.clone()._values().device == torch.device("fl:1")
    empty = torch.empty_like(s, device="fl:1")
    assert empty._values().device == torch.device("fl:1") and empty._nnz() == 0


def _under_strict(build: str, structure: str, value_op: str):
    """Runs, with FL_FALLBACK_STRICT=1, `build` (which makes `s`), prints "NNZ" with `s._nnz()`
    and `structure` (structure ops: no fallback), then `value_op`, printing its
    NotImplementedError after "NIE:"."""
    from conftest import run_python
    code = (f"import torch, torch_fl\ns = {build}\nprint('NNZ', s._nnz(), {structure})\n"
            f"try:\n    {value_op}\nexcept NotImplementedError as e:\n    print('NIE:', e)\n")
    return run_python(code, env={"FL_FALLBACK_STRICT": "1"})


def test_strict_mode_refuses_sparse_value_ops_and_keeps_structure():
    r = _under_strict("torch.sparse_coo_tensor(torch.tensor([[0, 1], [1, 0]]), torch.tensor([1.0, 2.0]), (2, 2), "
                      "device='fl:0')", "s.cpu().to_dense().tolist()", "s.coalesce()")
    assert r.returncode == 0, r.stderr
    assert "NNZ 2 [[0.0, 1.0], [2.0, 0.0]]" in r.stdout, r.stdout + r.stderr
    assert "NIE: torch_fl: aten::_coalesce on a sparse fl tensor (dtypes Float sparse) needs the CPU fallback, " \
           "and fallback.strict is set" in r.stdout, r.stdout + r.stderr


def test_ops_with_a_composite_kernel_take_their_sparse_cpu_kernel():
    # sum, permute, unsqueeze, mv, isinf have a sparse kernel and a composite one, which won
    # over the fallback: sum() returned the tensor itself (its composite sums over dim=[]),
    # the others failed inside their decompositions.
    s, ref = _coo("fl:0"), _coo("cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert s.sum().layout == torch.strided
        torch.testing.assert_close(s.sum().cpu(), ref.sum())
        torch.testing.assert_close(s.sum(dtype=torch.float64).cpu(), ref.sum(dtype=torch.float64))
        torch.testing.assert_close(s.unsqueeze(0).to_dense().cpu(), ref.unsqueeze(0).to_dense())
        torch.testing.assert_close(s.permute(1, 0).to_dense().cpu(), ref.permute(1, 0).to_dense())
        torch.testing.assert_close(torch.mv(s, torch.ones(3, device="fl:0")).cpu(), torch.mv(ref, torch.ones(3)))
        torch.testing.assert_close(torch.isinf(s).to_dense().cpu(), torch.isinf(ref).to_dense())


def test_a_dense_fl_tensor_becomes_sparse_on_its_device():
    dense = torch.tensor([[0.0, 2.0], [3.0, 0.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = dense.to("fl:1").to_sparse()
    assert s.layout == torch.sparse_coo and s.device == s._values().device == torch.device("fl:1")
    torch.testing.assert_close(s.to_dense().cpu(), dense)


def test_sparse_tensors_on_two_fl_devices_are_refused_together_as_dense_ones_are():
    s0, s1 = _coo("fl:0"), _coo("fl:1")
    with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device.*fl:0 and fl:1"):
        s0 + s1
    with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device"):
        torch.sparse.mm(s1, torch.ones(3, 2, device="fl:0"))


_DENSE = torch.tensor([[1.0, 0.0, 2.0, 0.0], [0.0, 0.0, 3.0, 0.0], [4.0, 5.0, 0.0, 0.0], [0.0, 0.0, 0.0, 6.0]])


@pytest.mark.parametrize("layout", ["csr", "csc", "bsr", "bsc"])
def test_sparse_compressed_tensors_keep_their_structure_on_fl(layout):
    """CSR, CSC, BSR and BSC tensors on fl: built, read, cloned and moved with ATen's shared code.
    Before, ops on them stopped with "sparse compressed tensors are not supported on fl" (and
    values() with ATen's "values expected sparse tensor layout but got SparseCsr")."""
    convert = {"csr": lambda t: t.to_sparse_csr(), "csc": lambda t: t.to_sparse_csc(),
               "bsr": lambda t: t.to_sparse_bsr((2, 2)), "bsc": lambda t: t.to_sparse_bsc((2, 2))}[layout]
    ref = convert(_DENSE)
    before = torch_fl.fallback_stats()
    s = ref.to("fl:1")
    compressed, plain = ((s.crow_indices(), s.col_indices()) if layout in ("csr", "bsr")
                         else (s.ccol_indices(), s.row_indices()))
    assert s.layout == ref.layout and s.device == torch.device("fl:1")
    assert compressed.device == plain.device == s.values().device == torch.device("fl:1")
    assert (s._nnz(), s.sparse_dim(), s.dense_dim()) == (ref._nnz(), ref.sparse_dim(), ref.dense_dim())
    twin = s.clone()
    twin.values().mul_(0)  # a clone owns its buffers
    back = s.cpu()
    assert back.layout == ref.layout
    torch.testing.assert_close(back.values(), ref.values())
    empty = torch.empty_like(s)
    assert empty.layout == ref.layout and empty.device == s.device
    after = torch_fl.fallback_stats()
    for op in ("aten::values", "aten::clone", "aten::_nnz", "aten::empty_like"):
        assert after.get(op, {}).get("cpu_fallback", 0) == before.get(op, {}).get("cpu_fallback", 0), op


def test_csr_arithmetic_and_products_equal_the_cpu_and_are_counted():
    ref = _DENSE.to_sparse_csr()
    s = ref.to("fl:0")
    weight = torch.arange(8.0).reshape(4, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = [(s + s).to_dense(), s.clone().mul_(3).to_dense(), s @ weight.to("fl:0"),
                   s @ torch.ones(4, device="fl:0"), torch.sum(s), s.to_sparse().to_dense(),
                   torch.eye(4, device="fl:0").to_sparse_csr().to_dense()]
    expected = [(ref + ref).to_dense(), ref.clone().mul_(3).to_dense(), ref @ weight, ref @ torch.ones(4),
                torch.sum(ref), ref.to_sparse().to_dense(), torch.eye(4)]
    for got, want in zip(results, expected):
        assert got.device == torch.device("fl:0")
        torch.testing.assert_close(got.cpu(), want)
    assert torch_fl.fallback_stats()["aten::add.Tensor"]["cpu_fallback"] >= 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert "crow_indices=tensor([0, 2, 3, 5, 6])" in repr(s) and "device='fl:0'" in repr(s)


def test_a_csr_adjacency_trains_a_graph_layer_as_on_the_cpu():
    """A graph convolution's sparse adjacency (CSR) times dense features, with the weight's
    gradient through the sparse product."""
    torch.manual_seed(0)
    adjacency = (_DENSE > 0).float().to_sparse_csr()
    features = torch.randn(4, 3)
    results = {}
    for device in ("cpu", "fl:0"):
        layer = nn.Linear(3, 2)
        layer.load_state_dict({"weight": torch.ones(2, 3) * 0.1, "bias": torch.zeros(2)})
        layer.to(device)
        opt = torch.optim.SGD(layer.parameters(), lr=0.1)
        a, x = adjacency.to(device), features.to(device)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(3):
                opt.zero_grad()
                loss = (a @ layer(x)).pow(2).mean()
                loss.backward()
                opt.step()
        results[device] = [p.detach().cpu() for p in layer.parameters()]
    for got, want in zip(results["fl:0"], results["cpu"]):
        torch.testing.assert_close(got, want)


def test_strict_mode_refuses_csr_value_ops_naming_the_layout():
    r = _under_strict("torch.eye(2).to_sparse_csr().to('fl:0')", "s.values().cpu().tolist()", "s + s")
    assert r.returncode == 0, r.stderr
    assert "NNZ 2 [1.0, 1.0]" in r.stdout, r.stdout + r.stderr
    assert "on a sparse compressed fl tensor (dtypes Float" in r.stdout, r.stdout + r.stderr
    assert "fallback.strict is set" in r.stdout, r.stdout + r.stderr


def test_smm_and_sspaddmm_whose_result_is_also_their_input_equal_the_cpu():
    """torch.smm passes its result as both self and out= of sspaddmm; the fallback used to copy
    the two apart, and sspaddmm checked the empty self ("Expected dim 0 size 3, got 0")."""
    s, ref = _coo("fl:0").coalesce(), _coo("cpu").coalesce()
    dense = torch.arange(12.0).reshape(3, 4)
    start = torch.sparse_coo_tensor(torch.tensor([[0, 1], [3, 1]]), torch.tensor([5.0, 6.0]), (2, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.smm(s, dense.to("fl:0"))
        added = torch.sspaddmm(start.to("fl:0"), s, dense.to("fl:0"), beta=0.5, alpha=2.0)
    assert got.layout == added.layout == torch.sparse_coo
    assert got.device == added.device == torch.device("fl:0")
    torch.testing.assert_close(got.cpu().to_dense(), torch.smm(ref, dense).to_dense())
    torch.testing.assert_close(added.cpu().to_dense(),
                               torch.sspaddmm(start, ref, dense, beta=0.5, alpha=2.0).to_dense())


def test_empty_and_zeroed_coo_tensors_are_structure_not_fallback():
    before = torch_fl.fallback_stats()
    empty = torch.empty((2, 3), layout=torch.sparse_coo, device="fl:1")
    assert empty.device == empty._indices().device == empty._values().device == torch.device("fl:1")
    assert empty.shape == (2, 3) and empty._nnz() == 0
    zeroed = _coo("fl:0")
    zeroed.zero_()
    assert zeroed._nnz() == 0 and zeroed.shape == (2, 3) and zeroed.device == torch.device("fl:0")
    resized = torch.empty((1, 1), layout=torch.sparse_coo, device="fl:0").sparse_resize_((4, 5), 2, 0)
    assert resized.shape == (4, 5) and resized.device == torch.device("fl:0")
    after = torch_fl.fallback_stats()
    for op in ("aten::empty.memory_format", "aten::zero_", "aten::sparse_resize_"):
        assert after.get(op, {}).get("cpu_fallback", 0) == before.get(op, {}).get("cpu_fallback", 0), op


def test_a_sparse_fallback_warns_even_after_the_dense_op_of_the_same_name_did():
    s = _coo("fl:0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.isnan(torch.rand(2, 3, device="fl:0"))
        torch.isnan(s)
        torch.isnan(s)
    messages = [str(w.message) for w in caught if "aten::isnan" in str(w.message)]
    if torch_fl.fallback_stats()["aten::isnan"]["cpu_fallback"] < 2:
        pytest.skip("isnan is not a CPU fallback for dense tensors on this plugin")
    dense = [m for m in messages if "sparse" not in m]
    sparse = [m for m in messages if "on a sparse fl tensor" in m]
    assert len(sparse) == 1, messages
    assert len(dense) <= 1


def test_lists_of_sparse_tensors_stay_on_their_device_and_mixed_devices_are_refused():
    s1 = torch.eye(3).to_sparse().to("fl:1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch.cat([s1, s1]).device == torch.hstack([s1, s1]).device == torch.device("fl:1")
        torch.testing.assert_close(torch.cat([s1, s1]).to_dense().cpu(), torch.cat([torch.eye(3)] * 2))
        with pytest.raises(RuntimeError, match=r"same device.*fl:1 and fl:0"):
            torch.cat([s1, torch.eye(3).to_sparse().to("fl:0")])
        with pytest.raises(RuntimeError, match=r"same device.*fl:1 and cpu"):
            s1 @ torch.ones(3, 2)
        assert (s1 * torch.tensor(2.0)).device == torch.device("fl:1")  # a CPU scalar, as with CUDA


@pytest.mark.parametrize("device", ["cpu", "fl:1"])
def test_views_of_sparse_tensors_share_their_buffers_as_on_the_cpu(device):
    """permute (COO) and select (CSR) are views: writes through them reach the input. Through
    the CPU fallback they were copies, and an in-place op swapped a COO tensor's buffers, so a
    handle taken before it (s._values()) kept the old values."""
    dense = _DENSE[:3, :3]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        coo = dense.to_sparse().to(device)
        coo.permute(1, 0)._values().fill_(1.0)
        assert coo.to_dense().sum().item() == 5.0
        csr = dense.to_sparse_csr().to(device)
        csr.select(0, 1).values().fill_(9.0)
        assert csr.to_dense().cpu()[1].tolist() == [0.0, 0.0, 9.0]
        s = dense.to_sparse().to(device).coalesce()
        values = s._values()
        s.neg_()
        assert values.cpu().tolist() == [-1.0, -2.0, -3.0, -4.0, -5.0]
        assert not s.is_pinned()


def test_pinning_a_sparse_fl_tensor_is_refused_as_for_a_gpu_tensor():
    with pytest.raises(RuntimeError, match="only dense CPU tensors can be pinned"):
        _coo("fl:0").pin_memory()
    with pytest.raises(RuntimeError, match="only dense CPU tensors can be pinned"):
        _DENSE.to_sparse_csr().to("fl:0").pin_memory()


def test_a_csr_out_argument_takes_a_result_with_more_elements():
    a, b = _DENSE.to_sparse_csr().to("fl:0"), torch.eye(4).to_sparse_csr().to("fl:0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = torch.add(a, b, out=a)
    assert result is a and a._nnz() == 8
    torch.testing.assert_close(a.to_dense().cpu(), _DENSE + torch.eye(4))
