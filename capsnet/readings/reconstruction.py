"""A test set's readings as the Evaluate page shows them: reconstructions of a batch, the most confident mistakes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from capsnet.data.pictures import as_pictures
from capsnet.nn.registry import AnyModel


@dataclass
class Reconstructions:
    """A batch read by the network: reconstructions from the predicted capsules."""

    reconstructions: np.ndarray  # (B, H, W) pictures, or (B, H, W, 3) in colour (`capsnet.data.pictures`)
    lengths: np.ndarray  # (B, K) the class scores: capsule lengths, or the EM network's activations a_j
    predictions: np.ndarray  # (B,)


def reconstruct(model: AnyModel, images: torch.Tensor | np.ndarray, batch_size: int = 256) -> Reconstructions:
    """Lengths (the EM network: activations), predictions and reconstructions (from the predicted capsule, as
    pictures) of images (B, C, H, W), by a network with a decoder."""
    if getattr(model, "decoder", None) is None:
        raise ValueError("this network has no decoder: nothing to redraw the inputs with")
    x = torch.as_tensor(images, dtype=torch.float32)
    c, side = model.config.in_channels, model.config.image_size
    x = x.reshape(-1, c, side, side)  # (B, C, H, W)
    device = next(model.parameters()).device
    recon, lengths, predictions = [], [], []
    with torch.inference_mode():
        for start in range(0, len(x), batch_size):  # batches, not examples
            out = model(x[start : start + batch_size].to(device))
            recon.append(out.reconstruction.float().cpu())  # (b, C, H, W)
            lengths.append(out.scores.float().cpu())
            predictions.append(out.prediction.cpu())
    if not recon:
        empty = as_pictures(torch.zeros(0, c, side, side))
        return Reconstructions(empty, np.zeros((0, model.config.num_classes), np.float32), np.zeros(0, np.int64))
    return Reconstructions(
        reconstructions=as_pictures(torch.cat(recon)),
        lengths=torch.cat(lengths).numpy(),
        predictions=torch.cat(predictions).numpy(),
    )


def misclassified(predictions: np.ndarray, labels: np.ndarray, lengths: np.ndarray, limit: int = 12) -> np.ndarray:
    """Indices of wrongly classified examples, the most confidently wrong first (longest wrong capsule)."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    wrong = np.flatnonzero(predictions != labels)
    confidence = np.asarray(lengths)[wrong, predictions[wrong]]
    return wrong[np.argsort(-confidence, kind="stable")][:limit]
