"""Dev metrics per task type, kept as sums so that processes can add theirs up exactly.

Each metric object turns a batch's logits and labels into a fixed-length tensor of sufficient
statistics (`update`), which the evaluation loop adds up over batches and over processes
(one all-reduce), then `compute` turns the summed statistics into named figures.
"""

from __future__ import annotations

import torch

IGNORE_INDEX = -100


class Accuracy:
    """Sequence classification: accuracy (`main`) over all dev examples."""

    main = "accuracy"
    size = 2  # correct, total

    def __init__(self, num_labels: int, label_names: list[str] | None = None):
        self.num_labels = num_labels

    def update(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        correct = (logits.argmax(-1) == labels).sum()
        return torch.stack([correct, torch.tensor(labels.numel())]).double()

    def compute(self, stats: torch.Tensor) -> dict[str, float]:
        return {"accuracy": float(stats[0] / stats[1].clamp(min=1))}


class TokenF1:
    """Token classification: micro F1 (`main`) over the entity labels (all but "O"), per word.

    Only positions whose label is not -100 count (the first sub-token of each word).
    """

    main = "f1"

    def __init__(self, num_labels: int, label_names: list[str] | None = None):
        self.num_labels = num_labels
        names = label_names or [str(i) for i in range(num_labels)]
        self.positive = torch.tensor([name != "O" for name in names])
        self.size = 3 * num_labels + 2  # tp, fp, fn per label; correct, total

    def update(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = logits[:, : labels.shape[1]]
        keep = labels != IGNORE_INDEX
        pred, gold = logits.argmax(-1)[keep], labels[keep]
        k = self.num_labels
        tp = torch.bincount(gold[pred == gold], minlength=k)
        fp = torch.bincount(pred[pred != gold], minlength=k)
        fn = torch.bincount(gold[pred != gold], minlength=k)
        total = torch.tensor([int((pred == gold).sum()), gold.numel()])
        return torch.cat([tp, fp, fn, total]).double()

    def compute(self, stats: torch.Tensor) -> dict[str, float]:
        k = self.num_labels
        tp, fp, fn = stats[:k], stats[k : 2 * k], stats[2 * k : 3 * k]
        pos = self.positive
        tp, fp, fn = tp[pos].sum(), fp[pos].sum(), fn[pos].sum()
        precision = float(tp / (tp + fp).clamp(min=1))
        recall = float(tp / (tp + fn).clamp(min=1))
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        accuracy = float(stats[3 * k] / stats[3 * k + 1].clamp(min=1))
        return {"f1": f1, "precision": precision, "recall": recall, "accuracy": accuracy}


class Pearson:
    """Regression: Pearson correlation (`main`) and mean squared error."""

    main = "pearson"
    size = 6  # n, sum x, sum y, sum xx, sum yy, sum xy

    def __init__(self, num_labels: int = 1, label_names: list[str] | None = None):
        pass

    def update(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x, y = logits.double().reshape(-1), labels.double().reshape(-1)
        n = torch.tensor(float(x.numel()), dtype=torch.float64)
        return torch.stack([n, x.sum(), y.sum(), (x * x).sum(), (y * y).sum(), (x * y).sum()])

    def compute(self, stats: torch.Tensor) -> dict[str, float]:
        n, sx, sy, sxx, syy, sxy = (float(v) for v in stats)
        if n == 0:
            return {"pearson": 0.0, "mse": 0.0}
        cov = sxy - sx * sy / n
        vx, vy = sxx - sx * sx / n, syy - sy * sy / n
        pearson = cov / (vx * vy) ** 0.5 if vx > 0 and vy > 0 else 0.0
        mse = (sxx - 2 * sxy + syy) / n
        return {"pearson": pearson, "mse": mse}
