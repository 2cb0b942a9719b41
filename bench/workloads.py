"""Benchmark workloads, each a function of the device string only, so the same code measures
native PyTorch ("cpu", "cuda:0") and Torch-FL ("fl:0"). Every function returns a dict of
named measurements; `compare.py` runs each side in its own process and prints the ratios."""
from __future__ import annotations

import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))


def sync(device: str) -> None:
    kind = torch.device(device).type
    if kind == "cuda":
        torch.cuda.synchronize()
    elif kind == "fl":
        torch.fl.synchronize()


def _time_per_call(fn, device: str, min_seconds: float = 0.3, min_iters: int = 20) -> float:
    for _ in range(5):
        fn()
    sync(device)
    iters, elapsed = 0, 0.0
    start = time.perf_counter()
    while elapsed < min_seconds or iters < min_iters:
        for _ in range(10):
            fn()
        iters += 10
        sync(device)
        elapsed = time.perf_counter() - start
    return elapsed / iters


def small_ops(device: str) -> dict:
    """Per-call latency (µs) of add, mul, relu and matmul at 8 and 1M elements."""
    out = {}
    for n in (8, 1 << 20):
        a = torch.randn(n, device=device)
        b = torch.randn(n, device=device)
        side = max(int(n ** 0.5), 2)
        m = torch.randn(side, side, device=device)
        out[f"add n={n} (us)"] = _time_per_call(lambda: a + b, device) * 1e6
        out[f"mul n={n} (us)"] = _time_per_call(lambda: a * b, device) * 1e6
        out[f"relu n={n} (us)"] = _time_per_call(lambda: torch.relu(a), device) * 1e6
        out[f"matmul {side}x{side} (us)"] = _time_per_call(lambda: m @ m, device) * 1e6
    return out


def _timed_steps(step, device: str, warmup: int, steps: int) -> float:
    """Seconds for `steps` calls of `step` after `warmup` untimed ones, device work included."""
    for _ in range(warmup):
        step()
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync(device)
    return time.perf_counter() - start


def cnn_step(device: str, batch_size: int = 64):
    """One training step of the digits CNN (examples/train_cnn.py) with Adam, as a closure."""
    from train_cnn import DigitsCNN

    torch.manual_seed(0)
    model = DigitsCNN().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(batch_size, 1, 8, 8, device=device)
    y = torch.randint(0, 10, (batch_size,), device=device)

    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def cnn_training(device: str, batch_size: int = 64, steps: int = 60) -> dict:
    """Samples/s of the digits CNN training with Adam."""
    seconds = _timed_steps(cnn_step(device, batch_size), device, 5, steps)
    return {f"digits CNN train b={batch_size} (samples/s)": batch_size * steps / seconds}


def wide_step(device: str, batch_size: int = 4096):
    """One forward/backward of the wide tabular MLP (examples/wide_tabular.py) on a batch already
    on the device, as a closure: the GEMMs of the heterogeneous example's host device."""
    from wide_tabular import WideMLP

    torch.manual_seed(0)
    model = WideMLP().to(device)
    x = torch.randn(batch_size, 2048, device=device)
    y = torch.randint(0, 10, (batch_size,), device=device)

    def step():
        for p in model.parameters():
            p.grad = None
        F.cross_entropy(model(x), y).backward()

    return step


def wide_forward_backward(device: str, batch_size: int = 4096, steps: int = 10) -> dict:
    """Samples/s of the wide MLP's forward/backward."""
    seconds = _timed_steps(wide_step(device, batch_size), device, 2, steps)
    return {f"wide MLP fwd+bwd b={batch_size} (samples/s)": batch_size * steps / seconds}


class _Block(nn.Module):
    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * 4
        self.c1 = nn.Conv2d(cin, width, 1, bias=False)
        self.b1 = nn.BatchNorm2d(width)
        self.c2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.b2 = nn.BatchNorm2d(width)
        self.c3 = nn.Conv2d(width, cout, 1, bias=False)
        self.b3 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        idt = x if self.down is None else self.down(x)
        x = F.relu(self.b1(self.c1(x)))
        x = F.relu(self.b2(self.c2(x)))
        return F.relu(self.b3(self.c3(x)) + idt)


class ResNet50(nn.Module):
    """ResNet-50 (torchvision's layout: 3-4-6-3 bottleneck blocks), written out so the
    benchmark needs no torchvision."""

    def __init__(self, classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(blocks):
                layers.append(_Block(cin, width, stride if i == 0 else 1))
                cin = width * 4
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet50_step(device: str, batch_size: int = 256):
    """One channels_last, bf16-autocast SGD step of ResNet-50 on random images, as a closure."""
    torch.manual_seed(0)
    model = ResNet50().to(device).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(batch_size, 3, 224, 224, device=device).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch_size,), device=device)
    dtype = torch.bfloat16

    def step():
        with torch.autocast(torch.device(device).type, dtype=dtype):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def resnet50_training(device: str, batch_size: int = 256, steps: int = 10) -> dict:
    seconds = _timed_steps(resnet50_step(device, batch_size), device, 3, steps)
    return {f"ResNet-50 train b={batch_size} bf16 (samples/s)": batch_size * steps / seconds}


class _GPTBlock(nn.Module):
    """A pre-norm transformer block; with `sdpa`, attention is F.scaled_dot_product_attention
    (causal), as nanoGPT and Hugging Face models call it, else written out with a mask."""

    def __init__(self, d: int, heads: int, sdpa: bool = False):
        super().__init__()
        self.sdpa = sdpa
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / (d // self.heads) ** 0.5)
            mask = torch.ones(t, t, device=x.device, dtype=torch.bool).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = att @ v
        y = y.transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT2Small(nn.Module):
    def __init__(self, vocab: int = 50257, d: int = 768, layers: int = 12, heads: int = 12, ctx: int = 1024,
                 sdpa: bool = False):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.blocks = nn.Sequential(*[_GPTBlock(d, heads, sdpa) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        return self.head(self.ln(self.blocks(x)))


def gpt2_step(device: str, batch: int = 8, seq: int = 512, clip: float | None = None, sdpa: bool = False):
    """One bf16-autocast AdamW step of a GPT-2-small-shaped model, as a closure; with `clip`,
    the gradients are clipped to that total norm first (clip_grad_norm_, as LLM training does);
    with `sdpa`, attention is F.scaled_dot_product_attention (on cuda:0 a fused flash kernel,
    on fl ATen's math path over the plugin's kernels)."""
    torch.manual_seed(0)
    model = GPT2Small(sdpa=sdpa).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    idx = torch.randint(0, 50257, (batch, seq), device=device)

    def step():
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
            logits = model(idx)
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), idx.view(-1))
        opt.zero_grad()
        loss.backward()
        if clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()

    return step


def gpt2_training(device: str, batch: int = 8, seq: int = 512, steps: int = 5) -> dict:
    seconds = _timed_steps(gpt2_step(device, batch, seq), device, 2, steps)
    return {f"GPT-2 small train {batch}x{seq} bf16 (tokens/s)": batch * seq * steps / seconds}


def gpt2_clipped_training(device: str, batch: int = 8, seq: int = 512, steps: int = 5) -> dict:
    seconds = _timed_steps(gpt2_step(device, batch, seq, clip=1.0), device, 2, steps)
    return {f"GPT-2 small train {batch}x{seq} bf16, clip_grad_norm_ (tokens/s)": batch * seq * steps / seconds}


def gpt2_sdpa_training(device: str, batch: int = 8, seq: int = 512, steps: int = 5) -> dict:
    seconds = _timed_steps(gpt2_step(device, batch, seq, clip=1.0, sdpa=True), device, 2, steps)
    return {f"GPT-2 small train {batch}x{seq} bf16, SDPA + clip_grad_norm_ (tokens/s)": batch * seq * steps / seconds}


def regression_step(device: str, batch_size: int = 1024):
    """One AdamW step of an MLP regressor (MSE loss, gradients clipped to norm 1), as a closure:
    the loss and the clipping every regression loop calls."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 16)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(batch_size, 64, device=device)
    y = torch.randn(batch_size, 16, device=device)

    def step():
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return step


def regression_training(device: str, batch_size: int = 1024, steps: int = 100) -> dict:
    """Samples/s of the MLP regressor's training steps."""
    seconds = _timed_steps(regression_step(device, batch_size), device, 5, steps)
    return {f"MLP regression train b={batch_size}, MSE + clip_grad_norm_ (samples/s)": batch_size * steps / seconds}


class _UNetBlock(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.GroupNorm(8, cout), nn.LeakyReLU(0.1),
                                  nn.Conv2d(cout, cout, 3, padding=1), nn.GroupNorm(8, cout), nn.LeakyReLU(0.1))

    def forward(self, x):
        return self.body(x)


class _UNet(nn.Module):
    """Two-level UNet: GroupNorm, LeakyReLU, max pooling, nearest upsampling, skip concatenation."""

    def __init__(self):
        super().__init__()
        self.down1, self.down2, self.mid = _UNetBlock(3, 32), _UNetBlock(32, 64), _UNetBlock(64, 128)
        self.up2, self.up1 = _UNetBlock(128 + 64, 64), _UNetBlock(64 + 32, 32)
        self.head = nn.Conv2d(32, 1, 1)

    def forward(self, x):
        d1 = self.down1(x)
        d2 = self.down2(F.max_pool2d(d1, 2))
        m = self.mid(F.max_pool2d(d2, 2))
        u2 = self.up2(torch.cat([F.interpolate(m, scale_factor=2, mode="nearest"), d2], 1))
        u1 = self.up1(torch.cat([F.interpolate(u2, scale_factor=2, mode="nearest"), d1], 1))
        return self.head(u1)


def unet_step(device: str, batch_size: int = 16, size: int = 128):
    """One AdamW step of a small UNet segmenting random images with BCE-with-logits, as a closure:
    GroupNorm, LeakyReLU and nearest upsampling forward and backward every step."""
    torch.manual_seed(0)
    model = _UNet().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(batch_size, 3, size, size, device=device)
    y = (torch.rand(batch_size, 1, size, size, device=device) > 0.5).float()

    def step():
        opt.zero_grad()
        F.binary_cross_entropy_with_logits(model(x), y).backward()
        opt.step()

    return step


def unet_training(device: str, batch_size: int = 16, size: int = 128, steps: int = 20) -> dict:
    seconds = _timed_steps(unet_step(device, batch_size, size), device, 3, steps)
    return {f"UNet train {batch_size}x3x{size}x{size}, GroupNorm + upsample + BCE (samples/s)": batch_size * steps / seconds}


class _LlamaBlock(nn.Module):
    """Pre-norm decoder block: RMSNorm, rotary embeddings computed each step, SDPA, SwiGLU."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.gate, self.up = nn.Linear(dim, 4 * dim, bias=False), nn.Linear(dim, 4 * dim, bias=False)
        self.down = nn.Linear(4 * dim, dim, bias=False)

    @staticmethod
    def rotary(x):
        length, d = x.shape[-2], x.shape[-1]
        inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2, device=x.device).float() / d))
        angles = torch.outer(torch.arange(length, device=x.device).float(), inv_freq)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)

    def forward(self, x):
        b, length, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, length, 3, self.heads, dim // self.heads).unbind(2)
        attn = F.scaled_dot_product_attention(self.rotary(q.transpose(1, 2)), self.rotary(k.transpose(1, 2)),
                                              v.transpose(1, 2), is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, length, dim))
        y = self.norm2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


def llama_step(device: str, batch: int = 8, seq: int = 512, dim: int = 512, layers: int = 4, vocab: int = 32000):
    """One bf16-autocast AdamW step of a small LLaMA-style decoder, as a closure."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(vocab, dim), *[_LlamaBlock(dim, 8) for _ in range(layers)],
                          nn.RMSNorm(dim), nn.Linear(dim, vocab, bias=False)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, vocab, (batch, seq + 1), device=device)
    device_type = torch.device(device).type

    def step():
        opt.zero_grad()
        with torch.autocast(device_type, dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return step


def llama_training(device: str, batch: int = 8, seq: int = 512, steps: int = 5) -> dict:
    seconds = _timed_steps(llama_step(device, batch, seq), device, 2, steps)
    return {f"LLaMA-style train {batch}x{seq} bf16, rotary + RMSNorm + SwiGLU (tokens/s)": batch * seq * steps / seconds}


def gemm_and_bandwidth(device: str, n: int = 8192, add_bytes: int = 1 << 30) -> dict:
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    t = _time_per_call(lambda: a @ b, device, min_seconds=1.0, min_iters=10)
    x = torch.randn(add_bytes // 4, device=device)
    y = torch.randn(add_bytes // 4, device=device)
    out = torch.empty_like(x)
    t_add = _time_per_call(lambda: torch.add(x, y, out=out), device, min_seconds=1.0, min_iters=10)
    return {
        f"bf16 GEMM {n}^3 (TFLOP/s)": 2 * n ** 3 / t / 1e12,
        f"fp32 add {add_bytes >> 20} MiB (GB/s)": 3 * add_bytes / t_add / 1e9,
    }


# The training steps by workload name, for bench/profile_step.py.
TRAINING_STEPS = {"cnn": cnn_step, "resnet50": resnet50_step, "gpt2": gpt2_step, "regression": regression_step,
                  "unet": unet_step, "llama": llama_step}

WORKLOADS = {
    "small_ops": small_ops,
    "cnn": cnn_training,
    "resnet50": resnet50_training,
    "gpt2": gpt2_training,
    "gpt2_clip": gpt2_clipped_training,
    "gpt2_sdpa": gpt2_sdpa_training,
    "regression": regression_training,
    "unet": unet_training,
    "llama": llama_training,
    "gemm": gemm_and_bandwidth,
    "wide": wide_forward_backward,
}
