"""Trains a small CNN on scikit-learn's handwritten digits (8x8 images, 10 classes) on any
device — `--device fl:0` runs it through Torch-FL; `--device cpu` (or cuda) natively. The
script is the same for every device: only the device string changes.

    python examples/train_cnn.py --device fl:0 --epochs 5
"""
from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from tqdm import tqdm


class DigitsCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(32 * 2 * 2, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        return self.fc2(F.relu(self.fc1(x)))


def load_data(seed: int):
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(x), generator=g)
    x, y = x[perm], y[perm]
    split = int(0.8 * len(x))
    return (x[:split], y[:split]), (x[split:], y[split:])


def train(device: str, epochs: int, batch_size: int, seed: int, lr: float, quiet: bool = False) -> dict:
    torch.manual_seed(seed)
    (xtr, ytr), (xte, yte) = load_data(seed)
    model = DigitsCNN().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    xtr_d, ytr_d = xtr.to(device), ytr.to(device)
    losses = []
    start = time.perf_counter()
    steps = (len(xtr) + batch_size - 1) // batch_size
    for epoch in range(epochs):
        bar = tqdm(range(steps), desc=f"epoch {epoch + 1}/{epochs} on {device}", disable=True if quiet else None, leave=False)
        for i in bar:
            xb = xtr_d[i * batch_size:(i + 1) * batch_size]
            yb = ytr_d[i * batch_size:(i + 1) * batch_size]
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
    seconds = time.perf_counter() - start
    with torch.no_grad():
        pred = model(xte.to(device)).argmax(dim=1).cpu()
    accuracy = (pred == yte).float().mean().item()
    return {
        "device": device,
        "losses": losses,
        "accuracy": accuracy,
        "seconds": seconds,
        "samples_per_second": epochs * len(xtr) / seconds,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="fl:0")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compare", default="", help="also train on this device (e.g. cpu) and compare")
    p.add_argument("--json", default="", help="write the results here")
    args = p.parse_args()

    if args.device.startswith("fl") or args.compare.startswith("fl"):
        import torch_fl

        for d in torch_fl.list_devices():
            print(f"{d['device']}: {d['vendor']} {d['name']} [{d['stable_id']}] via {d['plugin']} "
                  f"({d['kernels']} kernels)")
        torch_fl.reset_fallback_stats()
    result = train(args.device, args.epochs, args.batch_size, args.seed, args.lr)
    print(f"{args.device}: final loss {result['losses'][-1]:.4f}, test accuracy "
          f"{result['accuracy']:.4f}, {result['samples_per_second']:.0f} samples/s")
    out = {"run": result}
    if args.device.startswith("fl"):
        import torch_fl

        print(torch_fl.fallback_report())
    if args.compare:
        ref = train(args.compare, args.epochs, args.batch_size, args.seed, args.lr, quiet=True)
        diff = max(abs(a - b) for a, b in zip(result["losses"], ref["losses"]))
        print(f"{args.compare}: final loss {ref['losses'][-1]:.4f}, test accuracy {ref['accuracy']:.4f}, "
              f"{ref['samples_per_second']:.0f} samples/s")
        print(f"max |loss difference| over {len(ref['losses'])} steps: {diff:.2e}")
        out["reference"] = ref
        out["max_loss_difference"] = diff
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
