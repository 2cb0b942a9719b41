"""F.scaled_dot_product_attention on fl through PyTorch's PrivateUse1 hook: the choice stub
picks the plugin's fused-attention entry (`_scaled_dot_product_fused_attention_overrideable`
and its backward) when the plugin has one for the dtype and the call is one it serves, ATen's
math path otherwise; a call the fused kernel declines runs as other fl ops (the generic tier,
counted and warned). Results are checked against PyTorch's CPU SDPA in float64."""
from __future__ import annotations

import textwrap
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import torch_fl
from conftest import op_calls, run_python

FUSED = "aten::_scaled_dot_product_fused_attention_overrideable"
FUSED_BACKWARD = "aten::_scaled_dot_product_fused_attention_overrideable_backward"

# (rtol, atol) against a float64 reference, per dtype.
TOLERANCE = {torch.float32: (1e-4, 1e-5), torch.float64: (1e-10, 1e-12),
             torch.bfloat16: (2e-2, 2e-2), torch.float16: (5e-3, 5e-3)}


def _tiers(op):
    return op_calls(torch_fl.fallback_stats(), op)


def _fallbacks():
    stats = torch_fl.fallback_stats()
    return {k: v["cpu_fallback"] + v["generic"] for k, v in stats.items() if v["cpu_fallback"] + v["generic"]}


def _inputs(b=2, h=3, lq=9, lk=9, e=8, ev=8, dtype=torch.float32, transposed=False, seed=0):
    """q, k, v on the CPU; `transposed` makes them [B, L, H, E] tensors seen as [B, H, L, E], as
    a GPT block's q.view(B, L, H, E).transpose(1, 2) does."""
    g = torch.Generator().manual_seed(seed)

    def make(length, size):
        if transposed:
            return torch.randn(b, length, h, size, generator=g).to(dtype).transpose(1, 2)
        return torch.randn(b, h, length, size, generator=g).to(dtype)

    return make(lq, e), make(lk, e), make(lk, ev)


def _run(q, k, v, device, dtype=None, **kwargs):
    """SDPA forward and backward (loss: sum of out * a fixed weight) on `device`; returns the
    output and the gradients of q, k, v (and of an attn_mask given with requires_grad)."""
    leaves = [t.detach().to(device=device, dtype=dtype or t.dtype).requires_grad_() for t in (q, k, v)]
    kw = {}
    for name, value in kwargs.items():
        if torch.is_tensor(value):
            wants_grad = value.requires_grad
            value = value.detach().to(device=device, dtype=dtype if value.is_floating_point() and dtype else value.dtype)
            if wants_grad:
                value.requires_grad_()
                leaves.append(value)
        kw[name] = value
    out = F.scaled_dot_product_attention(*leaves[:3], **kw)
    weight = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).reshape(out.shape).to(device, out.dtype)
    (out * weight).sum().backward()
    return out, [leaf.grad for leaf in leaves]


def _check(q, k, v, dtype, **kwargs):
    want, want_grads = _run(q, k, v, "cpu", torch.float64, **kwargs)
    torch_fl.reset_fallback_stats()
    got, got_grads = _run(q, k, v, "fl:0", dtype, **kwargs)
    assert _tiers(FUSED)["native"] == 1 and _tiers(FUSED_BACKWARD)["native"] == 1, torch_fl.fallback_stats()
    assert not _fallbacks(), _fallbacks()
    rtol, atol = TOLERANCE[dtype]
    assert got.dtype == dtype
    torch.testing.assert_close(got.detach().cpu().double(), want.detach(), rtol=rtol, atol=atol)
    for g, w in zip(got_grads, want_grads):
        assert g is not None and g.dtype == dtype
        torch.testing.assert_close(g.cpu().double(), w, rtol=rtol * 10, atol=atol * 10)
    return got


@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_fused_attention_serves_sdpa_and_matches_cpu(dtype, causal):
    q, k, v = _inputs()
    _check(q, k, v, dtype, is_causal=causal)


@pytest.mark.parametrize("case", ["cross attention, causal", "value head size differs", "explicit scale",
                                  "one query", "transposed layout"])
def test_fused_attention_shapes(case):
    if case == "cross attention, causal":  # Lq < Lk: ATen's causal mask is top-left aligned
        q, k, v = _inputs(lq=5, lk=11)
        _check(q, k, v, torch.float32, is_causal=True)
    elif case == "value head size differs":
        q, k, v = _inputs(e=8, ev=5)
        _check(q, k, v, torch.float32)
    elif case == "explicit scale":
        q, k, v = _inputs()
        _check(q, k, v, torch.float32, scale=0.3)
    elif case == "one query":
        q, k, v = _inputs(lq=1, lk=7)
        _check(q, k, v, torch.float32)
    else:
        q, k, v = _inputs(transposed=True)
        got = _check(q, k, v, torch.float32, is_causal=True)
        # The output keeps the query's layout, so transposing it back to [B, L, H, E] is free
        # (as CUDA's flash attention): no copy before the projection's view.
        assert got.transpose(1, 2).is_contiguous()


@pytest.mark.parametrize("mask", ["bool [Lq, Lk]", "bool with a fully masked row", "float [B, 1, Lq, Lk]",
                                  "float [Lq, Lk] that requires grad", "float [B, H, Lq, Lk] that requires grad"])
def test_fused_attention_with_masks(mask):
    q, k, v = _inputs(b=2, h=3, lq=6, lk=7)
    g = torch.Generator().manual_seed(5)
    if mask.startswith("bool"):
        m = torch.rand(6, 7, generator=g) > 0.4
        m[:, 0] = True
        if "fully masked" in mask:
            m[2] = False
        got = _check(q, k, v, torch.float32, attn_mask=m)
        if "fully masked" in mask:  # ATen's safe softmax: zeros, not NaN, and zero gradients
            assert torch.equal(got[:, :, 2].detach().cpu(), torch.zeros(2, 3, 8))
    elif mask.startswith("float [B, 1"):
        m = torch.randn(2, 1, 6, 7, generator=g)  # a constant bias: no gradient wanted
        _check(q, k, v, torch.float32, attn_mask=m)
    else:
        shape = (6, 7) if "[Lq, Lk]" in mask else (2, 3, 6, 7)
        m = torch.randn(*shape, generator=g).requires_grad_()
        _check(q, k, v, torch.float32, attn_mask=m)  # its gradient (summed over broadcast dims) is checked


def test_sdpa_in_a_training_step_stays_native():
    """A causal self-attention layer as GPT blocks write it: every op of forward and backward
    native, the attention one fused kernel each way."""
    torch.manual_seed(0)
    x = torch.randn(2, 10, 16)
    layer = torch.nn.Linear(16, 48)
    fl_layer = torch.nn.Linear(16, 48).to("fl:0")
    fl_layer.load_state_dict(layer.state_dict())

    def block(lin, inp):
        qkv = lin(inp).view(2, 10, 3, 4, 4)
        q, k, v = qkv.unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return y.transpose(1, 2).reshape(2, 10, 16)

    want = block(layer, x)
    want.square().mean().backward()
    torch_fl.reset_fallback_stats()
    got = block(fl_layer, x.to("fl:0"))
    got.square().mean().backward()
    assert _tiers(FUSED)["native"] == 1 and _tiers(FUSED_BACKWARD)["native"] == 1
    assert not _fallbacks(), _fallbacks()
    torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fl_layer.weight.grad.cpu(), layer.weight.grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("why", ["dropout", "sdpa_kernel(MATH)", "grouped-query heads", "3-D inputs"])
def test_calls_the_fused_entry_does_not_serve_take_atens_math_path(why):
    q, k, v = _inputs()
    kwargs = {}
    if why == "grouped-query heads":
        k, v = k[:, :1], v[:, :1]
        kwargs["enable_gqa"] = True
    if why == "3-D inputs":
        q, k, v = q[0], k[0], v[0]
    if why == "dropout":
        kwargs["dropout_p"] = 0.5
    fq, fk, fv = (t.to("fl:0") for t in (q, k, v))
    torch_fl.reset_fallback_stats()
    if why == "sdpa_kernel(MATH)":
        with sdpa_kernel(SDPBackend.MATH):
            got = F.scaled_dot_product_attention(fq, fk, fv, **kwargs)
    else:
        got = F.scaled_dot_product_attention(fq, fk, fv, **kwargs)
    assert _tiers(FUSED) == {"native": 0, "generic": 0, "cpu_fallback": 0}
    if why == "dropout":
        assert torch.isfinite(got).all().item()
    else:
        want = F.scaled_dot_product_attention(q, k, v, **kwargs)
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)


def test_a_call_the_plugin_declines_runs_as_other_fl_ops_and_is_counted():
    """The CPU plugin's kernel takes a bias of the query's dtype only; a float32 bias with a
    bfloat16 query (a direct call of the overrideable op) is declined, and the decomposition in
    other fl ops serves forward and backward: counted in the generic tier, warned once with the
    plugin's reason, with CPU's results."""
    q, k, v = _inputs(lq=6, lk=6, dtype=torch.bfloat16)
    bias = torch.randn(6, 6, generator=torch.Generator().manual_seed(2))
    op = torch.ops.aten._scaled_dot_product_fused_attention_overrideable

    def run(device, dtype):
        leaves = [t.detach().to(device, dtype).requires_grad_() for t in (q, k, v)]
        b = bias.to(device)
        out = op(*leaves, attn_bias=b.expand(2, 3, 6, 6), is_causal=True)[0]
        out.float().square().sum().backward()
        return out, [t.grad for t in leaves]

    # Reference: PyTorch's CPU SDPA in float64 with the same bias plus the causal mask.
    ref = [t.detach().double().requires_grad_() for t in (q, k, v)]
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    ref_out = F.scaled_dot_product_attention(*ref, attn_mask=bias.double().masked_fill(~causal, float("-inf")))
    ref_out.float().square().sum().backward()
    torch_fl.reset_fallback_stats()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got, grads = run("fl:0", torch.bfloat16)
    assert _tiers(FUSED) == {"native": 0, "generic": 1, "cpu_fallback": 0}
    assert _tiers(FUSED_BACKWARD) == {"native": 0, "generic": 1, "cpu_fallback": 0}
    messages = [str(w.message) for w in caught if FUSED in str(w.message)]
    assert messages and "generic tier" in messages[0] and "attn_bias's dtype" in messages[0], messages
    torch.testing.assert_close(got.detach().cpu().double(), ref_out.detach(), rtol=2e-2, atol=2e-2)
    for g, r in zip(grads, ref):
        torch.testing.assert_close(g.cpu().double(), r.grad, rtol=5e-2, atol=5e-2)


STRICT_CODE = textwrap.dedent("""
    import torch, torch_fl
    q = torch.randn(1, 2, 4, 8, dtype=torch.bfloat16).to("fl:0")
    bias = torch.zeros(1, 2, 4, 4).to("fl:0")  # float32: the CPU plugin's kernel declines it
    try:
        torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, q, q, attn_bias=bias)
        print("NO ERROR")
        print("GENERIC:", torch_fl.fallback_stats()[
            "aten::_scaled_dot_product_fused_attention_overrideable"]["generic"])
    except NotImplementedError as e:
        print("NIE:", e)
    print("TIER:", torch_fl.op_support("aten::_scaled_dot_product_fused_attention_overrideable", dtype=torch.bfloat16))
""")


def test_strict_mode_lets_a_declined_fused_call_run_as_the_math_path_would():
    """The decomposition a declined call runs is what ATen's math path would have run (had the
    choice not picked the fused entry): strict mode does not refuse it, but it is counted."""
    r = run_python(STRICT_CODE, env={"FL_FALLBACK_STRICT": "1"})
    assert r.returncode == 0, r.stderr
    assert "NO ERROR" in r.stdout, r.stdout + r.stderr
    assert "GENERIC: 1" in r.stdout, r.stdout
    assert "TIER: native" in r.stdout, r.stdout


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64], ids=str)
def test_a_float32_mask_with_another_query_dtype_takes_the_math_path(dtype):
    """ATen accepts a float32 mask with any query dtype; the fused entries take a bias of the
    query's dtype only, so the choice leaves such a call to the math path (all native)."""
    q, k, v = (t.to(dtype).to("fl:0") for t in _inputs(lq=5, lk=5))
    mask = torch.randn(5, 5).to("fl:0")
    torch_fl.reset_fallback_stats()
    got = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert _tiers(FUSED) == {"native": 0, "generic": 0, "cpu_fallback": 0}
    want = F.scaled_dot_product_attention(*(t.cpu() for t in (q, k, v)), attn_mask=mask.cpu())
    torch.testing.assert_close(got.cpu(), want, **({"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {}))


def test_a_head_size_of_zero_takes_the_math_path():
    q, k, v = _inputs(e=0, ev=4)
    torch_fl.reset_fallback_stats()
    got = F.scaled_dot_product_attention(*(t.to("fl:0") for t in (q, k, v)))
    assert _tiers(FUSED)["native"] == 0
    torch.testing.assert_close(got.cpu(), F.scaled_dot_product_attention(q, k, v))


def test_a_query_expanded_over_the_batch_keeps_the_head_dimension_innermost():
    """Shared latent queries (lat.expand(B, ...)) have a stride-0 batch: the output's batch goes
    outermost, not innermost, so its head dimension has stride 1 (what cuDNN needs)."""
    q, k, v = _inputs(b=3)
    latent = q[:1].expand(3, -1, -1, -1)
    assert latent.stride(0) == 0
    got = _check(latent, k, v, torch.float32)
    assert got.stride(-1) == 1 and got.stride(0) == max(got.stride())


def test_the_generic_tier_computes_16_bit_calls_in_float():
    """A declined bfloat16 call (a float32 bias, passed directly) computes its products in
    float: as accurate as the fused kernel, not 2-4x worse as bfloat16 matmuls were."""
    q, k, v = _inputs(lq=32, lk=32, e=64, ev=64, dtype=torch.float64)
    q = q * 3
    op = torch.ops.aten._scaled_dot_product_fused_attention_overrideable
    want = F.scaled_dot_product_attention(q, k, v)
    fq, fk, fv = (t.to(torch.bfloat16).to("fl:0") for t in (q, k, v))
    torch_fl.reset_fallback_stats()
    generic = op(fq, fk, fv, attn_bias=torch.zeros(2, 3, 32, 32).to("fl:0"))[0]
    native = op(fq, fk, fv)[0]
    assert _tiers(FUSED) == {"native": 1, "generic": 1, "cpu_fallback": 0}
    err_generic = (generic.cpu().double() - want).abs().max().item()
    err_native = (native.cpu().double() - want).abs().max().item()
    assert err_generic <= 1.5 * err_native, (err_generic, err_native)
