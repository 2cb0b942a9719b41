"""The CUDA plugin's fused-attention entries (cuDNN) called directly, without the binding:
python3 tools/gpu/check_cuda_attention_entries.py build-gpu/plugins/cuda/libfl_cuda.so

Loads the plugin with ctypes (struct offsets as pinned by abi/fl_abi_layout_check.h), calls
aten::_scaled_dot_product_fused_attention_overrideable and its _backward on torch CUDA tensors
on torch's current stream, and compares with a float64 reference: layouts, every bias kind, a
fully masked row, each decline, partial gradient masks, deterministic repeats, and the time
against torch's own cuDNN attention. torch (CUDA) imported first supplies libcudnn/libcublas.
Runs on the H200 machine (tools/gpu/run_h200.sh, step attention_entries)."""
import ctypes, json, math, os, sys, time
import torch

torch.manual_seed(0)
dev = torch.device("cuda:0")
print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name(0))

so = sys.argv[1]
lib = ctypes.CDLL(so, mode=ctypes.RTLD_LOCAL)
lib.fl_plugin_get_ops.restype = ctypes.c_void_p
ops = lib.fl_plugin_get_ops()

def fnptr(off, restype, *argtypes):
    p = ctypes.c_void_p.from_address(ops + off).value
    return ctypes.CFUNCTYPE(restype, *argtypes)(p)

init = fnptr(32, ctypes.c_int32, ctypes.c_void_p, ctypes.c_char_p)
last_error = fnptr(48, ctypes.c_char_p)
kernels_get = fnptr(232, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t))
assert init(None, b"") == 0, last_error()

class Tensor(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("data", ctypes.c_void_p), ("byte_offset", ctypes.c_int64),
                ("dtype", ctypes.c_int32), ("ndim", ctypes.c_int32), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("device", ctypes.c_int32), ("reserved0", ctypes.c_int32)]

class List(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("len", ctypes.c_int64)]

class U(ctypes.Union):
    _fields_ = [("tensor", ctypes.c_void_p), ("i", ctypes.c_int64), ("d", ctypes.c_double), ("b", ctypes.c_int32),
                ("lst", List)]

class Value(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int32), ("reserved0", ctypes.c_int32), ("u", U)]

class Call(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("device", ctypes.c_int32), ("flags", ctypes.c_uint32),
                ("stream", ctypes.c_void_p), ("num_inputs", ctypes.c_int32), ("num_outputs", ctypes.c_int32),
                ("inputs", ctypes.POINTER(Value)), ("outputs", ctypes.POINTER(Tensor)), ("kernel_data", ctypes.c_void_p),
                ("rng_seed", ctypes.c_uint64), ("rng_offset", ctypes.c_uint64)]

assert ctypes.sizeof(Tensor) == 56 and ctypes.sizeof(Value) == 24 and ctypes.sizeof(Call) == 72

KernelFn = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.POINTER(Call))
entries = ctypes.c_void_p()
count = ctypes.c_size_t()
assert kernels_get(ctypes.byref(entries), ctypes.byref(count)) == 0
table = {}
for i in range(count.value):
    base = entries.value + i * 48
    name = ctypes.c_char_p.from_address(base + 8).value.decode()
    table[name] = (ctypes.c_uint64.from_address(base + 16).value, ctypes.c_uint32.from_address(base + 24).value,
                   KernelFn(ctypes.c_void_p.from_address(base + 32).value))
FWD = "aten::_scaled_dot_product_fused_attention_overrideable"
BWD = FWD + "_backward"
print("entries:", FWD in table, BWD in table, "mask", hex(table[FWD][0]), "flags", table[FWD][1])

DT = {torch.float32: 0, torch.float64: 1, torch.float16: 2, torch.bfloat16: 3, torch.int64: 4}
keep = []

def fl_tensor(t):
    if t is None:
        return Tensor(ctypes.sizeof(Tensor), None, 0, 0, -1, None, None, 0, 0)
    shape = (ctypes.c_int64 * max(t.dim(), 1))(*t.shape)
    strides = (ctypes.c_int64 * max(t.dim(), 1))(*t.stride())
    keep.extend([shape, strides])
    return Tensor(ctypes.sizeof(Tensor), t.data_ptr(), 0, DT[t.dtype], t.dim(), shape, strides, 0, 0)

def v_none():
    return Value(0, 0, U())

def v_tensor(t):
    ft = fl_tensor(t)
    keep.append(ft)
    u = U(); u.tensor = ctypes.addressof(ft)
    return Value(1, 0, u)

def v_int(x):
    u = U(); u.i = x; return Value(2, 0, u)

def v_double(x):
    u = U(); u.d = x; return Value(3, 0, u)

def v_bool(x):
    u = U(); u.b = int(bool(x)); return Value(4, 0, u)

def v_bools(xs):
    arr = (ctypes.c_int32 * len(xs))(*[int(bool(x)) for x in xs]); keep.append(arr)
    u = U(); u.lst = List(ctypes.addressof(arr), len(xs)); return Value(9, 0, u)

def call(name, inputs, outputs, flags=0):
    ins = (Value * len(inputs))(*inputs)
    outs = (Tensor * len(outputs))(*[fl_tensor(o) for o in outputs])
    c = Call(ctypes.sizeof(Call), 0, flags, torch.cuda.current_stream().cuda_stream, len(inputs), len(outputs),
             ins, outs, None, 0, 0)
    rc = table[name][2](ctypes.byref(c))
    msg = last_error().decode() if rc != 0 else ""
    return rc, msg

def forward(q, k, v, bias=None, causal=False, scale=None, dropout=0.0, debug=False, o=None, want_lse=True, flags=0):
    B, H, Lq, E = q.shape
    Ev = v.shape[3]
    if o is None:
        o = torch.empty(B, Lq, H, Ev, device=dev, dtype=q.dtype).transpose(1, 2)
    lse = torch.empty(B, H, Lq, device=dev, dtype=torch.float32) if want_lse else None
    rc, msg = call(FWD, [v_tensor(q), v_tensor(k), v_tensor(v), v_tensor(bias) if bias is not None else v_none(),
                         v_double(dropout), v_bool(causal), v_bool(debug),
                         v_double(scale) if scale is not None else v_none()], [o, lse], flags)
    return rc, msg, o, lse

def backward(do, q, k, v, o, lse, bias=None, causal=False, scale=None, mask=(True, True, True, False), flags=0,
             want_dbias=False, grads=None):
    seed = torch.zeros((), dtype=torch.int64, device=dev)
    off = torch.zeros((), dtype=torch.int64, device=dev)
    if grads is None:
        grads = [torch.empty_like(q) if mask[0] else None, torch.empty_like(k) if mask[1] else None,
                 torch.empty_like(v) if mask[2] else None]
    dbias = torch.empty(q.shape[0], q.shape[1], q.shape[2], k.shape[2], device=dev, dtype=q.dtype) if want_dbias else None
    rc, msg = call(BWD, [v_tensor(do), v_tensor(q), v_tensor(k), v_tensor(v),
                         v_tensor(bias) if bias is not None else v_none(), v_bools(list(mask)), v_tensor(o),
                         v_tensor(lse), v_none(), v_none(), v_int(q.shape[2]), v_int(k.shape[2]), v_double(0.0),
                         v_bool(causal), v_tensor(seed), v_tensor(off),
                         v_double(scale) if scale is not None else v_none()], grads + [dbias], flags)
    return rc, msg, grads

def reference(q, k, v, bias, causal, scale):
    qd, kd, vd = (x.detach().double().requires_grad_() for x in (q, k, v))
    s = (qd @ kd.transpose(-1, -2)) * scale
    if bias is not None:
        s = s + bias.double()
    if causal:
        Lq, Lk = q.shape[2], k.shape[2]
        keepm = torch.ones(Lq, Lk, dtype=torch.bool, device=dev).tril()
        s = s.masked_fill(~keepm, float("-inf"))
    lse = torch.logsumexp(s, -1)
    # safe softmax: a row with every key masked gives zeros (and logsumexp -inf)
    dead = torch.isneginf(lse).detach()
    p = torch.softmax(s.masked_fill(dead[..., None], 0.0), -1) * (~dead)[..., None]
    o = p @ vd
    return qd, kd, vd, o, lse

results = []

def err(a, b):
    a = a.double(); b = b.double()
    fin = torch.isfinite(b)
    if not bool(torch.equal(torch.isfinite(a), fin)):
        return float("nan")
    d = (a - b)[fin].abs()
    return float(d.max()) if d.numel() else 0.0

def case(label, B=2, H=4, Lq=128, Lk=128, E=64, Ev=None, dtype=torch.bfloat16, bias_kind=None, causal=False,
         scale=None, layout="bshd", do_backward=True, flags=0, mask=(True, True, True, False)):
    Ev = Ev or E
    if layout == "bshd":
        q = torch.randn(B, Lq, H, E, device=dev, dtype=dtype).transpose(1, 2)
        k = torch.randn(B, Lk, H, E, device=dev, dtype=dtype).transpose(1, 2)
        v = torch.randn(B, Lk, H, Ev, device=dev, dtype=dtype).transpose(1, 2)
    else:
        q = torch.randn(B, H, Lq, E, device=dev, dtype=dtype)
        k = torch.randn(B, H, Lk, E, device=dev, dtype=dtype)
        v = torch.randn(B, H, Lk, Ev, device=dev, dtype=dtype)
    bias = None
    if bias_kind == "full":
        bias = torch.randn(B, H, Lq, Lk, device=dev, dtype=dtype)
    elif bias_kind == "11LL":
        bias = torch.randn(1, 1, Lq, Lk, device=dev, dtype=dtype).expand(B, H, Lq, Lk)
    elif bias_kind == "1HLL":
        bias = torch.randn(1, H, Lq, Lk, device=dev, dtype=dtype).expand(B, H, Lq, Lk)
    elif bias_kind == "keypad":
        m = torch.zeros(B, 1, 1, Lk, device=dev, dtype=dtype)
        m[0, ..., Lk // 2:] = float("-inf")
        bias = m.expand(B, H, Lq, Lk)
    elif bias_kind == "causal_as_bias":
        m = torch.zeros(Lq, Lk, device=dev, dtype=dtype).masked_fill(
            ~torch.ones(Lq, Lk, dtype=torch.bool, device=dev).tril(), float("-inf"))
        bias = m.expand(B, H, Lq, Lk)
    elif bias_kind == "row_masked":
        bias = torch.zeros(B, H, Lq, Lk, device=dev, dtype=dtype)
        bias[0, 0, 3, :] = float("-inf")
    elif bias_kind == "keys_bcast":
        bias = torch.randn(B, H, Lq, 1, device=dev, dtype=dtype).expand(B, H, Lq, Lk)
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    rc, msg, o, lse = forward(q, k, v, bias, causal, scale, flags=flags)
    r = {"case": label, "fwd_rc": rc}
    if rc != 0:
        r["fwd_msg"] = msg
        results.append(r); print(json.dumps(r)); return
    torch.cuda.synchronize()
    qd, kd, vd, oref, lseref = reference(q, k, v, bias, causal, sc)
    r["o_err"] = err(o, oref)
    r["lse_err"] = err(lse, lseref)
    if bias_kind == "row_masked":
        r["masked_row_o"] = [float(o[0, 0, 3].abs().max()), bool(torch.isnan(o[0, 0, 3]).any())]
        r["masked_row_lse"] = float(lse[0, 0, 3])
    if do_backward:
        do = torch.randn_like(o)
        rc, msg, grads = backward(do, q, k, v, o, lse, bias, causal, scale, mask=mask, flags=flags)
        r["bwd_rc"] = rc
        if rc != 0:
            r["bwd_msg"] = msg
        else:
            torch.cuda.synchronize()
            # reference gradients through the float64 graph, at the plugin's own forward output's
            # dO (the forward output in the gradient formula is the reference one)
            oref.backward(do.double())
            for name, g, ref in zip(("dq", "dk", "dv"), grads, (qd.grad, kd.grad, vd.grad)):
                if g is not None:
                    r[name + "_err"] = err(g, ref)
                    r[name + "_refmax"] = float(ref.abs().max())
            if flags & 2:
                rc2, _, grads2 = backward(do, q, k, v, o, lse, bias, causal, scale, mask=mask, flags=flags)
                torch.cuda.synchronize()
                r["bitwise_repeat"] = all(bool(torch.equal(a, b)) for a, b in zip(grads, grads2) if a is not None)
    results.append(r)
    print(json.dumps(r))

case("bf16 bshd 128x128 E64")
case("fp16 bhsd 128x128 E64", dtype=torch.float16, layout="bhsd")
case("bf16 causal Lq100 Lk150", Lq=100, Lk=150, causal=True)
case("bf16 causal Lq150 Lk100", Lq=150, Lk=100, causal=True)
case("bf16 E128 Ev64", E=128, Ev=64)
case("bf16 E256", E=256, Lq=64, Lk=64)
case("bf16 E72", E=72, Lq=64, Lk=64)
case("bf16 scale 0.3", scale=0.3)
case("bf16 bias full", bias_kind="full")
case("bf16 bias 11LL", bias_kind="11LL")
case("bf16 bias 1HLL", bias_kind="1HLL")
case("bf16 bias keypad", bias_kind="keypad")
case("bf16 bias keypad + causal", bias_kind="keypad", causal=True)
case("fp16 causal as bias Lk77", Lq=77, Lk=77, bias_kind="causal_as_bias", dtype=torch.float16)
case("bf16 bias full Lk77", Lq=50, Lk=77, bias_kind="full")
case("bf16 bias row fully masked", bias_kind="row_masked")
case("bf16 bias keys broadcast (declines)", bias_kind="keys_bcast", do_backward=False)
case("bf16 Lq1 decode", Lq=1, Lk=128)
case("bf16 Lk1 (declines)", Lk=1, do_backward=False)
case("bf16 E12 (declines)", E=12, do_backward=False)
case("fp32 (declines)", dtype=torch.float32, do_backward=False)
case("bf16 deterministic", flags=2)
case("bf16 deterministic causal bias", flags=2, causal=True, bias_kind="full")
case("bf16 only dq wanted", mask=(True, False, False, False))
case("bf16 only dk dv wanted", mask=(False, True, True, False))
case("bf16 seq 1024 E128 causal", Lq=1024, Lk=1024, E=128, causal=True, B=1, H=8)
case("bf16 seq 704 bias (torch#196678 shape)", Lq=704, Lk=704, bias_kind="11LL", B=1, H=2)

# Declines not covered above
q = torch.randn(1, 2, 64, 64, device=dev, dtype=torch.bfloat16)
print(json.dumps({"case": "dropout", "rc_msg": forward(q, q, q, dropout=0.1)[:2]}))
print(json.dumps({"case": "debug_mask", "rc_msg": forward(q, q, q, debug=True)[:2]}))
rc, msg, o, lse = forward(q, q, q)
bias = torch.randn(1, 2, 64, 64, device=dev, dtype=torch.bfloat16)
print(json.dumps({"case": "dbias wanted", "rc_msg": backward(torch.randn_like(o), q, q, q, o, lse, bias=bias,
                                                             mask=(True, True, True, True), want_dbias=True)[:2]}))
misal = torch.empty(1 * 2 * 64 * 64 + 1, device=dev, dtype=torch.bfloat16)[1:].view(1, 2, 64, 64)
print(json.dumps({"case": "misaligned q", "rc_msg": forward(misal, q, q)[:2]}))
print(json.dumps({"case": "no lse wanted", "rc": forward(q, q, q, want_lse=False)[0]}))

# A decode loop (one query, the key length growing by one per token) builds one plan per
# length: more than the plugin keeps (256), so the oldest are evicted; a length seen again after
# its eviction is rebuilt and still right.
def decode_errors(lengths):
    worst = 0.0
    for lk in lengths:
        q = torch.randn(1, 4, 1, 64, device=dev, dtype=torch.bfloat16)
        kv = torch.randn(1, 4, lk, 64, device=dev, dtype=torch.bfloat16)
        rc, msg, o, lse = forward(q, kv, kv)
        assert rc == 0, msg
        want = reference(q, kv, kv, None, False, 1 / math.sqrt(64))[3]
        worst = max(worst, err(o, want))
    return worst
t0 = time.perf_counter()
first = decode_errors(range(2, 302))
again = decode_errors([2, 3, 4])
print(json.dumps({"case": "decode loop Lk 2..301 (300 plans), then Lk 2..4 again after eviction",
                  "o_err_max": first, "o_err_again": again, "seconds": time.perf_counter() - t0}))

# Host cost per call and device time, against torch's own cuDNN attention
B, H, L, E = 4, 16, 1024, 128
q = torch.randn(B, L, H, E, device=dev, dtype=torch.bfloat16).transpose(1, 2)
k = torch.randn(B, L, H, E, device=dev, dtype=torch.bfloat16).transpose(1, 2)
v = torch.randn(B, L, H, E, device=dev, dtype=torch.bfloat16).transpose(1, 2)
o = torch.empty(B, L, H, E, device=dev, dtype=torch.bfloat16).transpose(1, 2)
lse = torch.empty(B, H, L, device=dev, dtype=torch.float32)
ins = [v_tensor(q), v_tensor(k), v_tensor(v), v_none(), v_double(0.0), v_bool(True), v_bool(False), v_none()]
for _ in range(5):
    call(FWD, ins, [o, lse])
torch.cuda.synchronize()
n = 50
t0 = time.perf_counter()
e0 = torch.cuda.Event(enable_timing=True); e1 = torch.cuda.Event(enable_timing=True)
e0.record()
for _ in range(n):
    call(FWD, ins, [o, lse])
host_us = (time.perf_counter() - t0) / n * 1e6
e1.record(); torch.cuda.synchronize()
fl_ms = e0.elapsed_time(e1) / n
from torch.nn.attention import sdpa_kernel, SDPBackend
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(5):
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.cuda.synchronize()
    e0.record()
    for _ in range(n):
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    e1.record(); torch.cuda.synchronize()
    torch_ms = e0.elapsed_time(e1) / n
print(json.dumps({"timing": "fwd causal B4 H16 L1024 E128 bf16", "fl_ms": fl_ms, "fl_host_us_per_call": host_us,
                  "torch_cudnn_ms": torch_ms}))
out = os.environ.get("OUT")
if out:
    json.dump(results, open(os.path.join(out, "sdpa_check.json"), "w"), indent=1)
