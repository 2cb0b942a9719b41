"""A wide tabular classification task and its model, for the heterogeneous-training example.

Each sample is a row of `features` standard-normal floats held in host memory (as rows read
from a feature store would be); its class is the argmax of a fixed random linear function of
the first `informative` features plus noise, so a small MLP can learn it and its test accuracy
says whether training worked. Per sample, the model does little arithmetic on many bytes: a
GPU's step is bounded by copying the batch from host memory rather than by its compute or its
kernel launches, while a CPU device computes on rows already in its memory — the case where a
CPU beside a GPU adds throughput instead of only latency.
"""
from __future__ import annotations

import torch
import torch.nn as nn


class WideMLP(nn.Module):
    def __init__(self, features: int = 2048, hidden: int = 64, classes: int = 10):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def load_wide_data(seed: int, samples: int = 131072, features: int = 2048, classes: int = 10,
                   informative: int = 64, noise: float = 0.5):
    """((x_train, y_train), (x_test, y_test)), 80% / 20% of `samples` rows, float32 / int64."""
    if not 0 < informative <= features:
        raise ValueError(f"informative must be in 1..features ({features}), got {informative}")
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=g)
    teacher = torch.randn(informative, classes, generator=g) / informative ** 0.5
    logits = x[:, :informative] @ teacher + noise * torch.randn(samples, classes, generator=g)
    y = logits.argmax(dim=1)
    split = int(0.8 * samples)
    return (x[:split], y[:split]), (x[split:], y[split:])
