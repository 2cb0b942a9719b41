"""Which ops of common training code do not run native on an fl device.

Runs one or two training steps of small models of common families on the device — a
LLaMA-style decoder (rotary embeddings, RMSNorm, SwiGLU, SDPA, label smoothing, AdamW, clipping),
a UNet-style conv net (GroupNorm, LeakyReLU, nearest upsampling, BCE with logits, flips), a
ViT-style encoder (nn.TransformerEncoder, SGD with Nesterov), a GAN-style discriminator step,
and assorted metric and loss code (accuracy, top-k, gather/scatter, masks, sorting) — and prints,
per family, each op that took the generic tier or the CPU fallback, with its counts
(torch_fl.fallback_stats()). A model here differs from a user's; torch_fl.coverage_report()
answers the same question for a given function before running it on the device.

    python tools/fallback_survey.py [fl:0] [--strict]

--strict exits 1 when any op took the CPU fallback (fills that a plugin leaves to ATen on
purpose, such as the CPU plugin's random fills, count too).
"""
from __future__ import annotations

import argparse
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_fl


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


def rotary(x, positions):
    d = x.shape[-1]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2, device=x.device).float() / d))
    angles = torch.outer(positions.float(), inv_freq)
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)


class TinyLlama(nn.Module):
    def __init__(self, vocab=100, dim=64, heads=4, hidden=128):
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, dim)
        self.norm1, self.norm2 = RMSNorm(dim), RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.gate, self.up = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        b, length, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, length, 3, self.heads, dim // self.heads).unbind(2)
        positions = torch.arange(length, device=tokens.device)
        q, k = rotary(q.transpose(1, 2), positions), rotary(k.transpose(1, 2), positions)
        attn = F.scaled_dot_product_attention(q, k, v.transpose(1, 2), is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, length, dim))
        y = self.norm2(x)
        x = x + self.down(F.silu(self.gate(y)) * self.up(y))
        return self.head(x)


def llama(device):
    model = TinyLlama().to(device)
    opt = torch.optim.AdamW(model.parameters())
    tokens = torch.randint(0, 100, (2, 17), device=device)
    for _ in range(2):
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten(), label_smoothing=0.1)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()


def unet(device):
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.LeakyReLU(0.1), nn.MaxPool2d(2),
                        nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(8, 1, 1)).to(device)
    x = torch.flip(torch.randn(2, 3, 16, 16, device=device), dims=[3])
    target = (torch.rand(2, 1, 16, 16, device=device) > 0.5).float()
    F.binary_cross_entropy_with_logits(net(x), target).backward()


def vit(device):
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, norm_first=True, activation="gelu")
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).to(device)
    x = torch.randn(2, 10, 32, device=device, requires_grad=True)
    model(x).pow(2).mean().backward()
    torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True).step()


def gan_discriminator(device):
    disc = nn.Sequential(nn.Linear(16, 32), nn.LeakyReLU(0.2), nn.Dropout(0.3), nn.Linear(32, 1)).to(device)
    real, fake = torch.randn(8, 16, device=device), torch.randn(8, 16, device=device)
    logits = disc(torch.cat([real, fake]))
    labels = torch.cat([torch.ones(8, 1, device=device), torch.zeros(8, 1, device=device)])
    F.binary_cross_entropy_with_logits(logits, labels).backward()
    torch.optim.Adam(disc.parameters(), betas=(0.5, 0.999)).step()


def metrics_and_losses(device):
    x = torch.randn(8, 10, device=device)
    t = torch.randint(0, 10, (8,), device=device)
    (x.argmax(1) == t).float().mean().item()
    (x.topk(5, 1).indices == t[:, None]).any(1).sum()
    x.gather(1, t[:, None])
    torch.zeros(10, device=device).scatter_add_(0, t, torch.ones(8, device=device))
    x[x > 0]
    x.cumsum(1)
    x.sort(1)
    x.t()[t]
    x.floor() + x.ceil() + x.round() + torch.erf(x) + torch.log1p(x.abs()) + torch.expm1(x)
    F.softplus(x) + F.elu(x) + F.hardtanh(x) + F.smooth_l1_loss(x, x * 2) + F.l1_loss(x, x * 0)
    (t & 3) | (t ^ 1)
    x.max() + x.min()
    torch.nonzero(x > 0)
    F.one_hot(t, 10)
    F.kl_div(F.log_softmax(x, 1), F.softmax(x, 1), reduction="batchmean")


FAMILIES = {"llama": llama, "unet": unet, "vit": vit, "gan_discriminator": gan_discriminator,
            "metrics_and_losses": metrics_and_losses}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("device", nargs="?", default="fl:0")
    parser.add_argument("--strict", action="store_true", help="exit 1 when any op took the CPU fallback")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the fallback warnings: this report lists them
    torch.manual_seed(0)
    any_fallback = False
    for name, family in FAMILIES.items():
        torch_fl.reset_fallback_stats()
        family(args.device)
        stats = torch_fl.fallback_stats()
        calls = sum(s["native"] + s["generic"] + s["cpu_fallback"] for s in stats.values())
        off = {op: s for op, s in sorted(stats.items()) if s["generic"] or s["cpu_fallback"]}
        print(f"== {name}: {calls} op calls, {len(off)} ops not native")
        for op, s in off.items():
            print(f"   {op:48} generic {s['generic']:3}  cpu_fallback {s['cpu_fallback']:3}")
        any_fallback |= any(s["cpu_fallback"] for s in off.values())
    return 1 if args.strict and any_fallback else 0


if __name__ == "__main__":
    sys.exit(main())
