"""A task head: attention pooling over the tokens instead of the mean."""

import torch
from torch import nn
from torch.nn import functional as F


class AttentionPoolHead(nn.Module):
    """A learned score per token, softmax over the non-pad tokens, the weighted sum -> logits."""

    def __init__(self, hidden_size: int, num_labels: int, dropout: float = 0.1):
        super().__init__()
        self.score = nn.Linear(hidden_size, 1)
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden_size, num_labels)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        scores = self.score(hidden).squeeze(-1).masked_fill(attention_mask == 0, -1e4)
        pooled = (scores.softmax(-1).unsqueeze(-1) * hidden).sum(1)
        return self.out(self.dropout(pooled))

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float(), labels)
