"""A tiny Lightning fit on fl, used by test_lightning.py (in process, and as a script for
`strategy="ddp"`, which Lightning relaunches once per extra rank with the same argv):

    python _lightning_fit.py DEVICES STRATEGY PRECISION OUT_JSON

DEVICES is a count ("2") or device indices with a comma ("1," for fl:1 alone, "0,1").

Writes, per rank, OUT_JSON.rank<N> with the device each training step ran on, the losses, the
strategy and precision plugin names and the final parameters' checksum."""
from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("FL_CPU_DEVICES", "2")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import torch_fl  # noqa: E402,F401 - registers fl (and "fl" with Lightning when it loads)
import lightning.pytorch as L  # noqa: E402


class TinyClassifier(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        # FL_FIT_SYNC_BN=1: with a batch norm, and the Trainer's sync_batchnorm=True.
        norm = [nn.BatchNorm1d(32)] if os.environ.get("FL_FIT_SYNC_BN") == "1" else []
        self.net = nn.Sequential(nn.Linear(8, 32), *norm, nn.ReLU(), nn.Linear(32, 3))
        self.losses: list[float] = []
        self.devices_seen: set[str] = set()
        self.compute_dtypes: set[str] = set()
        self.sync_batch_norms = 0  # SyncBatchNorm modules during training (Lightning reverts them after fit)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        loss = F.cross_entropy(logits, y)
        self.losses.append(float(loss.detach().cpu()))
        self.devices_seen.add(str(x.device))
        if batch_idx == 0:
            self.sync_batch_norms = sum(isinstance(m, nn.SyncBatchNorm) for m in self.modules())
        self.compute_dtypes.add(str(logits.dtype))
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.3)


def make_loader(batch_size: int = 32) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    return DataLoader(TensorDataset(x, y), batch_size=batch_size)


class Drift(L.Callback):
    """After each step, rank r adds r * 1e-6 to every parameter: the last-bit drift of ranks
    whose plugins round differently, made large enough to see on two CPU-plugin ranks."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        with torch.no_grad():
            for p in pl_module.parameters():
                p.add_(trainer.global_rank * 1e-6)


def fit(devices, strategy: str = "auto", precision: str = "32-true", epochs: int = 4, callbacks=()):
    torch.manual_seed(0)
    model = TinyClassifier()
    trainer = L.Trainer(accelerator="fl", devices=devices, strategy=strategy, precision=precision,
                        max_epochs=epochs, enable_progress_bar=False, enable_checkpointing=False,
                        logger=False, enable_model_summary=False, callbacks=list(callbacks),
                        sync_batchnorm=os.environ.get("FL_FIT_SYNC_BN") == "1")
    trainer.fit(model, make_loader())
    return trainer, model


def main() -> None:
    # DEVICES: a count ("2"), or indices with a comma ("1," is fl:1 alone; "0,1").
    devices = [int(d) for d in sys.argv[1].split(",") if d] if "," in sys.argv[1] else int(sys.argv[1])
    strategy, precision, out = sys.argv[2], sys.argv[3], sys.argv[4]
    # FL_FIT_DRIFT=1 adds Drift; FL_FIT_RESYNC_EVERY=N then torch_fl.lightning.ResyncReplicas(N).
    callbacks = [Drift()] if os.environ.get("FL_FIT_DRIFT") == "1" else []
    if os.environ.get("FL_FIT_RESYNC_EVERY"):
        from torch_fl.lightning import ResyncReplicas
        callbacks.append(ResyncReplicas(int(os.environ["FL_FIT_RESYNC_EVERY"])))
    trainer, model = fit(devices, strategy, precision, callbacks=callbacks)
    result = {
        "rank": trainer.global_rank,
        "world_size": trainer.world_size,
        "strategy": type(trainer.strategy).__name__,
        "root_device": str(trainer.strategy.root_device),
        "backend": getattr(trainer.strategy, "process_group_backend", None),
        "devices_seen": sorted(model.devices_seen),
        "losses": model.losses,
        "params": [p.detach().cpu().double().sum().item() for p in model.parameters()],
        "resyncs": sum(getattr(c, "resyncs", 0) for c in trainer.callbacks),
        "sync_batch_norms": model.sync_batch_norms,
        "buffers": [b.detach().cpu().double().sum().item() for b in model.buffers()],
    }
    with open(f"{out}.rank{trainer.global_rank}", "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
