"""The CPU plugin splits its own loops (elementwise, softmax and its backward, reductions) over
its threads (`FL_CPU_THREADS`). Every output element is computed as on one thread, so results
keep their bits whatever the thread count; and they match torch's CPU."""
from __future__ import annotations

import pytest
import torch

from conftest import run_python

# Each case is large enough (several times the plugin's grain of 32768 elements) that four
# threads run four parts. compute(dev) runs every case on `dev` from one seeded generator: on
# fl:0 in a subprocess per thread count (saved to a file, compared bit for bit), and on
# torch's CPU here, as the reference.
COMPUTE = r'''
import torch
import torch.nn.functional as F


def compute(dev):
    g = torch.Generator().manual_seed(0)

    def r(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(dtype)

    x, y = r(300001), r(300001)
    m, row = r(640, 515), r(515)
    t3 = r(64, 300, 33)
    logits = r(20000, 10)
    wide = r(8, 40000)
    ints = torch.randint(-3, 4, (5000, 70), generator=g)
    nan_rows = r(3000, 64)
    nan_rows[::7, 5] = float("nan")
    wide_rows = r(64, 4096)
    wide_nan = r(64, 4096)
    wide_nan[::9, ::13] = float("nan")
    wide_ints = torch.randint(0, 3, (64, 4096), generator=g)  # ties down every column
    out = {}
    out["add_contiguous"] = (x.to(dev) + 2 * y.to(dev)).cpu()
    out["relu"] = torch.relu(x.to(dev)).cpu()
    out["broadcast_strided"] = (m.to(dev)[:, ::2] * row.to(dev)[::2] - 1).cpu()
    tm = m.t().contiguous().to(dev).t()  # a transposed view: several rows of the output
    tm.mul_(3).add_(m.to(dev))
    out["in_place_transposed"] = tm.cpu()
    out["half_plus_float"] = (x.half().to(dev) + y.to(dev)).cpu()
    out["where"] = torch.where(x.to(dev) > 0, x.to(dev), y.to(dev)).cpu()
    lp = logits.to(dev).requires_grad_()
    ls = F.log_softmax(lp, dim=1)
    ls.backward(r(20000, 10).to(dev))
    out["log_softmax"], out["log_softmax_grad"] = ls.detach().cpu(), lp.grad.cpu()
    wp = wide.to(dev).requires_grad_()
    sm = F.softmax(wp, dim=0)  # the softmax dim outside: inner rows
    sm.backward(r(8, 40000).to(dev))
    out["softmax_dim0"], out["softmax_dim0_grad"] = sm.detach().cpu(), wp.grad.cpu()
    h = r(4096, 64).to(dev).requires_grad_()
    torch.relu(h).backward(r(4096, 64).to(dev))
    out["threshold_backward"] = h.grad.cpu()
    b = r(4096, 64).to(dev)
    out["sum_dim0"] = b.sum(0).cpu()
    out["sum_dim1"] = b.sum(1).cpu()
    out["sum_dims_0_2"] = t3.to(dev).sum((0, 2)).cpu()
    out["mean_dim1_strided"] = t3.to(dev).transpose(1, 2).mean(1).cpu()
    out["amax_nan"] = nan_rows.to(dev).amax(1).cpu()
    out["amin_dim0"] = nan_rows.to(dev).amin(0).cpu()
    out["argmax_ties"] = ints.to(dev).argmax(1).cpu()
    v, i = ints.to(dev).max(0)
    out["max_dim0"], out["max_dim0_index"] = v.cpu(), i.cpu()
    out["int_sum"] = ints.to(dev).sum(1).cpu()
    out["sum_dim0_wide"] = wide_rows.to(dev).sum(0).cpu()  # split along the innermost dim
    out["amax_dim0_wide_nan"] = wide_nan.to(dev).amax(0).cpu()
    out["argmax_dim0_wide_ties"] = wide_ints.to(dev).argmax(0).cpu()
    return out
'''

RUN_ON_FL = COMPUTE + r'''
import torch_fl
torch.save(compute("fl:0"), "{path}")
'''


def _run(tmp_path, threads: int) -> dict:
    path = tmp_path / f"threads{threads}.pt"
    r = run_python(RUN_ON_FL.replace("{path}", str(path)),
                   env={"FL_CPU_THREADS": str(threads), "FL_CPU_DEVICES": "1"}, timeout=300)
    assert r.returncode == 0, r.stderr
    return torch.load(path)


def _bits(t: torch.Tensor) -> torch.Tensor:
    if t.is_floating_point():
        return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return t


@pytest.fixture(scope="module")
def by_threads(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cpu_threads")
    return {n: _run(tmp, n) for n in (1, 4)}


def test_four_threads_give_the_bits_of_one(by_threads):
    one, four = by_threads[1], by_threads[4]
    assert one.keys() == four.keys()
    differing = [k for k in one if not torch.equal(_bits(one[k]), _bits(four[k]))]
    assert differing == []


def test_the_split_loops_match_torchs_cpu(by_threads):
    # The same computations on torch's CPU, from the same generator, so that a part skipped or
    # run twice would show (the bit-for-bit test alone would not see a split made the same
    # way for both counts).
    namespace: dict = {}
    exec(COMPUTE, namespace)
    expected = namespace["compute"]("cpu")
    got = by_threads[4]
    assert got.keys() == expected.keys()
    for name, want in expected.items():
        # Sums accumulate in double in the plugin (ATen: a float cascade), the softmaxes use
        # libm's exp: a few ulps apart.
        torch.testing.assert_close(got[name], want, rtol=1e-5, atol=1e-5, equal_nan=True, msg=name)
