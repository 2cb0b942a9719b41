"""Views on fl tensors share memory with their base, as on CPU: a write through the view
changes the base. ATen registers some views per backend (view_as_real, view_as_complex,
unfold); routed to the CPU fallback they returned copies and the write was lost (and c10d's
complex collectives, which write through view_as_real, silently did nothing). Copies of
tensors with the conjugate or negative bit set crashed with endless recursion."""
from __future__ import annotations

import pytest
import torch

import torch_fl  # noqa: F401

DEV = "fl:0"

VIEWS = {
    "view_as_real": (lambda: torch.randn(4, dtype=torch.complex64), torch.view_as_real, 7.0),
    "view_as_complex": (lambda: torch.randn(4, 2), torch.view_as_complex, 1 + 3j),
    "real": (lambda: torch.randn(4, dtype=torch.complex64), lambda t: t.real, 3.0),
    "imag": (lambda: torch.randn(4, dtype=torch.complex64), lambda t: t.imag, 3.0),
    "unfold": (lambda: torch.randn(4, 6), lambda t: t.unfold(1, 2, 2), 5.0),
    "diagonal": (lambda: torch.randn(4, 6), torch.diagonal, 5.0),
    "narrow": (lambda: torch.randn(4, 6), lambda t: t.narrow(1, 1, 2), 5.0),
    "transpose": (lambda: torch.randn(4, 6), lambda t: t.t(), 5.0),
    "view dtype": (lambda: torch.randn(4, 6), lambda t: t.view(torch.int32), 0),
    "as_strided": (lambda: torch.randn(4, 6), lambda t: t.as_strided((2, 2), (1, 2)), 5.0),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_a_write_through_a_view_reaches_its_base(name):
    make, view, value = VIEWS[name]
    base = make()
    expected = base.clone()
    view(expected).fill_(value)
    on_fl = base.to(DEV)
    v = view(on_fl)
    assert v.device == torch.device(DEV)
    assert v.untyped_storage().data_ptr() == on_fl.untyped_storage().data_ptr()
    v.fill_(value)
    assert torch.equal(on_fl.cpu(), expected)


def test_copies_of_conjugate_and_negative_views_apply_their_bits():
    c = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    x = c.to(DEV)
    assert torch.equal(x.conj().cpu(), c.conj())  # was endless recursion (a crash)
    assert torch.equal(x.conj().clone().cpu(), c.conj())
    assert torch.equal(torch.ops.aten._neg_view(x).cpu(), -c)
    assert torch.equal((-x.conj()).cpu(), -c.conj())
    into = torch.empty(2, dtype=torch.complex64, device=DEV)
    into.copy_(x.conj())
    assert torch.equal(into.cpu(), c.conj())
    into.conj().copy_(c)  # a copy into a conjugate view stores the conjugate
    assert torch.equal(into.cpu(), c.conj())
    y = x.clone()
    y.conj().fill_(2 + 1j)
    assert torch.equal(y.cpu(), torch.full((2,), 2 - 1j, dtype=torch.complex64))
    assert torch.equal((x.conj() * x).cpu(), (c.conj() * c))
    real = torch.empty(2, device=DEV)
    real.copy_(x.conj())  # a real destination takes the real parts (was: view_as_real on it)
    assert torch.equal(real.cpu(), c.real)
    host = torch.empty(2, dtype=torch.complex64).conj()
    host.copy_(x)  # fl -> a conjugate view on the host
    assert torch.equal(host.resolve_conj(), c)


@pytest.mark.parametrize("case", ["shifted", "transposed", "expanded_output"])
def test_in_place_ops_on_overlapping_memory_are_refused_as_on_the_cpu(case):
    """Kernels that write while they read (in place) get no output whose elements overlap an
    input's other elements or each other: their loop order (split over threads in the CPU
    plugin) would decide the result. The message is ATen's own."""
    def run(device):
        x = torch.arange(12.0).reshape(3, 4).to(device)
        if case == "shifted":
            x.view(-1)[1:].add_(x.view(-1)[:-1])
        elif case == "transposed":
            sq = x[:, :3].contiguous()
            sq.add_(sq.t())
        else:
            torch.ones(4, device=device).expand(3, 4).mul_(2)
    with pytest.raises(RuntimeError) as cpu_error:
        run("cpu")
    with pytest.raises(RuntimeError) as fl_error:
        run("fl:0")
    assert str(fl_error.value).splitlines()[0] == str(cpu_error.value).splitlines()[0]


def test_in_place_ops_on_the_same_elements_still_run():
    x = torch.arange(12.0).reshape(3, 4)
    f = x.to("fl:0")
    f.add_(f).mul_(f)
    x.add_(x).mul_(x)
    assert torch.equal(f.cpu(), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_matrix_product_into_one_of_its_operands_reads_them_as_they_were(dtype):
    """addmm_/baddbmm_ write their output while BLAS reads the operands: an operand in the
    output's memory (all of it, or part) is copied first. ATen's own CPU gets x.addmm_(x, x)
    wrong; the plugin computes x + x @ x."""
    torch.manual_seed(0)
    x = torch.randn(48, 48, dtype=dtype)
    w = torch.randn(24, 48, dtype=dtype)
    b = torch.randn(3, 16, 16, dtype=dtype)
    cases = {
        "addmm_(x, x, x)": (lambda t: t.addmm_(t, t), x, x + x @ x),
        "addmm_(x, x[:, :24], w)": (lambda t: t.addmm_(t[:, :24], w.to(t.device)), x, x + x[:, :24] @ w),
        "baddbmm_(b, b, b)": (lambda t: t.baddbmm_(t, t), b, b + b @ b),
        # (ATen's CPU refuses this one; the plugin reads the bias before writing)
        "addmm(x.t(), x[:, :24], w, out=x)": (lambda t: torch.addmm(t.t(), t[:, :24], w.to(t.device), out=t), x,
                                               x.t() + x[:, :24] @ w),
    }
    for name, (op, value, expected) in cases.items():
        got = value.to(DEV)
        op(got)
        torch.testing.assert_close(got.cpu(), expected, msg=name)
