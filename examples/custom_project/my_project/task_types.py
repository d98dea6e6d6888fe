"""A task type: star ratings (1..max_stars) learned as one real value, scored as the nearest
star. It has a config key of its own (`max_stars`) and a lower-is-better metric (`mae`)."""

from dataclasses import dataclass

import numpy as np

from mtl.models.heads import RegressionHead
from mtl.task_types import TaskConfig, TaskType, metric, metrics


@metric(name="mae", higher_is_better=False)
def mean_abs_error(predictions, references) -> float:
    """Mean absolute error, in stars."""
    return float(np.mean(np.abs(np.asarray(predictions) - np.asarray(references))))


class StarRating(TaskType):
    """`text_column` -> a rating in 1..`max_stars` (`label_column`); trained with MSE on the
    value, predicted as the nearest star; metrics `accuracy` (exact star) and `mae`."""

    @dataclass
    class Options(TaskConfig):
        max_stars: int = 5  # the highest rating; predictions are clamped to 1..max_stars

    known_metrics = (metrics.accuracy, mean_abs_error)
    default_metrics = ("accuracy", "mae")
    label_dtype = np.float32

    def columns(self) -> list[str]:
        return [self.config.text_column, self.config.label_column]

    def encode(self, rows, tokenizer, label_names, where):
        enc = tokenizer(
            rows[self.config.text_column], truncation=True, max_length=self.config.max_length
        )
        return {
            "input_ids": enc["input_ids"],
            "labels": [float(x) for x in rows[self.config.label_column]],
            "length": [len(ids) for ids in enc["input_ids"]],
        }

    def num_labels(self, label_names) -> int:
        return 1

    def default_head(self, hidden_size, num_labels, dropout):
        return RegressionHead(hidden_size, dropout=dropout)

    def predict(self, logits, batch) -> list[int]:
        stars = logits.float().reshape(-1).round().clamp(1, self.config.max_stars)
        return stars.int().cpu().tolist()

    def prepare(self, predictions, references, label_names):
        return np.asarray(predictions), np.rint(np.asarray(references)).astype(int)
