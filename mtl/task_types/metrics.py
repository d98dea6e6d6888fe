"""Dev metrics for GLUE, SQuAD, SWAG and CoNLL, each a `Metric`: `(predictions, references) ->
float` that knows whether a higher value is better.

A task names its metrics in its config, `metrics: [mcc, accuracy]`; the first is its main one.
A name without a dot is one of its task type's `known_metrics` (found by the `Metric`'s own
`name`); `package.module.function` imports a metric of your own, which is higher-is-better unless
it is a `Metric(..., higher_is_better=False)` or made with `@metric(higher_is_better=False)`.

Each function equals its reference (scikit-learn, scipy, seqeval, the official SQuAD script) to
1e-6 and is written with numpy and plain Python so that none of those is needed at run time.
Where the reference raises or returns nan these return 0.0 instead: empty inputs, the
correlation of a constant series, F1/precision/recall with a zero denominator. Scores are
fractions in [0, 1], SQuAD's included (the official script reports percentages).
Predictions and references of different lengths raise `MtlError`.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from mtl.errors import MtlError


@dataclass(frozen=True)
class Metric:
    """A dev metric: `fn(predictions, references) -> float`, called as the metric itself.

    `name` is what a task's `metrics:` list and the logged key `eval/<task>/<name>` call it;
    `higher_is_better` says which way the best value lies (W&B summaries, early stopping's
    direction in reports, the figures).
    """

    fn: Callable[..., float]
    name: str
    higher_is_better: bool = True

    def __call__(self, predictions, references) -> float:
        return self.fn(predictions, references)


def metric(
    fn: Callable | None = None, *, name: str | None = None, higher_is_better: bool = True
) -> Metric | Callable[[Callable], Metric]:
    """`@metric` or `@metric(higher_is_better=False)`: a function as a `Metric` named after it."""

    def wrap(f: Callable) -> Metric:
        return Metric(f, name or f.__name__, higher_is_better)

    return wrap(fn) if fn is not None else wrap


def as_metric(obj: Callable, name: str) -> Metric:
    """`obj` as a `Metric` called `name`: its own direction if it is one (or has a
    `higher_is_better` attribute), else higher-is-better."""
    if isinstance(obj, Metric):
        return Metric(obj.fn, name, obj.higher_is_better)
    return Metric(obj, name, bool(getattr(obj, "higher_is_better", True)))


# Classification: int arrays of class ids, shape [n].


def _same_length(pred: np.ndarray, ref: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    if pred.shape != ref.shape:
        raise MtlError(
            f"metric {name}: {pred.size} predictions for {ref.size} references; give one each"
        )
    return pred, ref


def _class_ids(predictions, references, name: str) -> tuple[np.ndarray, np.ndarray]:
    pred, ref = np.asarray(predictions).reshape(-1), np.asarray(references).reshape(-1)
    return _same_length(pred, ref, name)


@metric
def accuracy(predictions, references) -> float:
    """Fraction of examples whose predicted class equals the reference (sklearn accuracy_score)."""
    pred, ref = _class_ids(predictions, references, "accuracy")
    return float(np.mean(pred == ref)) if ref.size else 0.0


@metric
def f1(predictions, references) -> float:
    """F1 of class 1 for binary labels 0/1 (sklearn f1_score, average="binary")."""
    pred, ref = _class_ids(predictions, references, "f1")
    if not np.isin(pred, (0, 1)).all() or not np.isin(ref, (0, 1)).all():
        raise MtlError("metric f1 is binary (class ids 0/1); use macro_f1 for more classes")
    tp = int(np.sum((pred == 1) & (ref == 1)))
    wrong = int(np.sum(pred != ref))
    return 2 * tp / (2 * tp + wrong) if tp else 0.0


@metric
def macro_f1(predictions, references) -> float:
    """Unweighted mean of per-class F1 over the classes in either (sklearn, average="macro")."""
    pred, ref = _class_ids(predictions, references, "macro_f1")
    if not ref.size:
        return 0.0
    classes, ids = np.unique(np.concatenate([pred, ref]), return_inverse=True)
    pred_ids, ref_ids = ids[: pred.size], ids[pred.size :]
    k = classes.size
    tp = np.bincount(ref_ids[pred_ids == ref_ids], minlength=k)
    total = np.bincount(pred_ids, minlength=k) + np.bincount(ref_ids, minlength=k)
    return float(np.mean(2 * tp / total))


@metric
def mcc(predictions, references) -> float:
    """Matthews correlation, multi-class form (sklearn matthews_corrcoef); 0.0 if undefined."""
    pred, ref = _class_ids(predictions, references, "mcc")
    n = ref.size
    classes, ids = np.unique(np.concatenate([pred, ref]), return_inverse=True)
    k = classes.size
    pred_sum = np.bincount(ids[:n], minlength=k).astype(object)  # Python ints: no overflow
    ref_sum = np.bincount(ids[n:], minlength=k).astype(object)
    correct = int(np.sum(pred == ref))
    cov_pr = correct * n - int(np.dot(pred_sum, ref_sum))
    cov_pp = n * n - int(np.dot(pred_sum, pred_sum))
    cov_rr = n * n - int(np.dot(ref_sum, ref_sum))
    if cov_pp == 0 or cov_rr == 0:
        return 0.0
    return cov_pr / (np.sqrt(float(cov_pp)) * np.sqrt(float(cov_rr)))


# Multi-label: binary indicator matrices, shape [n, k]. A single column [n, 1] is one label
# (sklearn would read it as binary classes 0/1 and average over both).


def _indicators(predictions, references, name: str) -> tuple[np.ndarray, np.ndarray]:
    pred, ref = np.asarray(predictions), np.asarray(references)
    if pred.ndim != 2 or pred.shape != ref.shape:
        raise MtlError(
            f"metric {name} takes [n, k] 0/1 indicator matrices of one shape, got "
            f"{pred.shape} and {ref.shape}; for single-label classes use accuracy or macro_f1"
        )
    if not (np.isin(pred, (0, 1)).all() and np.isin(ref, (0, 1)).all()):
        raise MtlError(f"metric {name} takes 0/1 indicator matrices; threshold the scores first")
    return pred.astype(bool), ref.astype(bool)


@metric
def micro_f1(predictions, references) -> float:
    """F1 over all (example, label) cells of indicator matrices (sklearn, average="micro")."""
    pred, ref = _indicators(predictions, references, "micro_f1")
    tp = int(np.sum(pred & ref))
    wrong = int(np.sum(pred != ref))
    return 2 * tp / (2 * tp + wrong) if tp else 0.0


@metric
def macro_f1_multilabel(predictions, references) -> float:
    """Mean F1 over the k label columns, 0 for a column never predicted nor true (sklearn macro)."""
    pred, ref = _indicators(predictions, references, "macro_f1_multilabel")
    if not pred.shape[1]:
        return 0.0
    tp = np.sum(pred & ref, axis=0)
    total = np.sum(pred, axis=0) + np.sum(ref, axis=0)
    return float(np.mean(np.divide(2 * tp, total, out=np.zeros(tp.shape), where=total > 0)))


@metric
def subset_accuracy(predictions, references) -> float:
    """Fraction of examples whose whole label set is right (sklearn accuracy_score, multi-label)."""
    pred, ref = _indicators(predictions, references, "subset_accuracy")
    return float(np.mean(np.all(pred == ref, axis=1))) if len(ref) else 0.0


# Regression: float arrays, flattened.


def _floats(predictions, references, name: str) -> tuple[np.ndarray, np.ndarray]:
    pred = np.asarray(predictions, dtype=np.float64).reshape(-1)
    ref = np.asarray(references, dtype=np.float64).reshape(-1)
    return _same_length(pred, ref, name)


def _correlation(x: np.ndarray, y: np.ndarray) -> float:
    if x.size < 2 or (x == x[0]).all() or (y == y[0]).all():
        return 0.0
    # As scipy.stats.pearsonr: centre, scale by the largest value, then normalise.
    xm, ym = x - x.mean(), y - y.mean()
    xm, ym = xm / np.abs(xm).max(), ym / np.abs(ym).max()
    r = np.dot(xm / np.linalg.norm(xm), ym / np.linalg.norm(ym))
    return float(np.clip(r, -1.0, 1.0))


def _average_ranks(x: np.ndarray) -> np.ndarray:
    # scipy.stats.rankdata(method="average"): ties share the mean of their 1-based ranks.
    order = np.argsort(x, kind="mergesort")
    ranks_of_sorted = np.empty(x.size, dtype=np.intp)
    ranks_of_sorted[order] = np.arange(x.size)
    xs = x[order]
    new_value = np.r_[True, xs[1:] != xs[:-1]]
    dense = np.cumsum(new_value)[ranks_of_sorted]
    bounds = np.r_[np.flatnonzero(new_value), x.size]
    return 0.5 * (bounds[dense] + bounds[dense - 1] + 1)


@metric
def pearson(predictions, references) -> float:
    """Pearson correlation (scipy.stats.pearsonr); 0.0 for a constant series or under 2 points."""
    return _correlation(*_floats(predictions, references, "pearson"))


@metric
def spearman(predictions, references) -> float:
    """Spearman correlation, ties given average ranks (scipy.stats.spearmanr); 0.0 if constant."""
    pred, ref = _floats(predictions, references, "spearman")
    if pred.size < 2:
        return 0.0
    return _correlation(_average_ranks(pred), _average_ranks(ref))


@metric(higher_is_better=False)
def mse(predictions, references) -> float:
    """Mean squared error (sklearn mean_squared_error)."""
    pred, ref = _floats(predictions, references, "mse")
    return float(np.mean((pred - ref) ** 2)) if ref.size else 0.0


# Tagging: one list of tag names per sentence, scored as seqeval does with mode="strict",
# scheme=IOB2: a span is a B-X followed by any I-X of the same type; an I-X that does not
# continue a span is no span. Only "O" is outside. A tag without a B-/I- prefix ("PER") is
# read as IO tagging, where seqeval would raise or misread it: a run of the same such tag is one
# span of that type. IOBES/BILOU tags (E-, S-, L-, U-) raise MtlError: convert them to IOB2.

_OTHER_SCHEME = re.compile(r"[ESLU]-")


def _sentences(predictions, references, name: str) -> list[tuple[Sequence[str], Sequence[str]]]:
    pairs = list(zip(predictions, references, strict=False))
    if len(predictions) != len(references) or any(len(p) != len(r) for p, r in pairs):
        raise MtlError(
            f"metric {name}: predictions and references differ in the number of sentences or "
            "of tags in a sentence; pass one tag per word"
        )
    return pairs


def _spans(sentences: Sequence[Sequence[str]]) -> set[tuple[int, int, int, str]]:
    """(sentence, start, end, type) of each span under strict IOB2, unprefixed tags as IO."""
    spans = set()
    for sent, tags in enumerate(sentences):
        opened: tuple[int, str] | None = None
        prev = "O"
        for i, tag in enumerate([*tags, "O"]):
            if tag[:2] in ("B-", "I-"):
                prefix, kind = tag[0], tag[2:]
            elif tag == "O":
                prefix, kind = "O", ""
            elif _OTHER_SCHEME.match(tag):
                raise MtlError(f"tag {tag!r} is not IOB2; convert the tags to B-/I-/O (IOB2)")
            else:
                prefix, kind = ("I" if tag == prev else "B"), tag
            if opened is not None and not (prefix == "I" and kind == opened[1]):
                spans.add((sent, opened[0], i, opened[1]))
                opened = None
            if prefix == "B":
                opened = (i, kind)
            prev = tag
    return spans


def _span_counts(predictions, references, name: str) -> tuple[int, int, int]:
    pairs = _sentences(predictions, references, name)
    pred = _spans([p for p, _ in pairs])
    ref = _spans([r for _, r in pairs])
    return len(pred & ref), len(pred), len(ref)


@metric
def span_precision(predictions, references) -> float:
    """Fraction of predicted spans that match a reference span exactly (seqeval strict IOB2)."""
    tp, n_pred, _ = _span_counts(predictions, references, "span_precision")
    return tp / n_pred if n_pred else 0.0


@metric
def span_recall(predictions, references) -> float:
    """Fraction of reference spans predicted exactly (seqeval recall_score, strict IOB2)."""
    tp, _, n_ref = _span_counts(predictions, references, "span_recall")
    return tp / n_ref if n_ref else 0.0


@metric
def span_f1(predictions, references) -> float:
    """Micro F1 of exactly matching spans over all types (seqeval f1_score, strict IOB2)."""
    tp, n_pred, n_ref = _span_counts(predictions, references, "span_f1")
    return 2 * tp / (n_pred + n_ref) if tp else 0.0


@metric
def token_accuracy(predictions, references) -> float:
    """Fraction of words whose tag equals the reference tag (seqeval accuracy_score)."""
    pairs = _sentences(predictions, references, "token_accuracy")
    total = sum(len(r) for _, r in pairs)
    correct = sum(p == r for pred, ref in pairs for p, r in zip(pred, ref, strict=True))
    return correct / total if total else 0.0


# Extractive QA, as the official SQuAD v2.0 script (v1.1 agrees on answerable questions):
# predictions are answer texts ("" = no answer); references are each question's gold texts,
# where an empty list (or only golds that normalise to "") means unanswerable, whose one gold
# answer is "". A question scores its best gold answer. A str reference is one gold answer.

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def _normalize_answer(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _gold_answers(reference: str | Sequence[str]) -> list[str]:
    golds = [reference] if isinstance(reference, str) else reference
    return [g for g in map(_normalize_answer, golds) if g] or [""]


def _qa_pairs(predictions, references, name: str) -> list[tuple[str, list[str]]]:
    if len(predictions) != len(references):
        raise MtlError(
            f"metric {name}: {len(predictions)} predictions for {len(references)} questions; "
            "pass one answer text per question"
        )
    golds = map(_gold_answers, references)
    return list(zip(map(_normalize_answer, predictions), golds, strict=True))


def _token_f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    return 2 * same / (len(pred_tokens) + len(gold_tokens))


@metric
def exact_match(predictions, references) -> float:
    """Fraction of questions whose normalised answer equals a normalised gold answer (SQuAD)."""
    pairs = _qa_pairs(predictions, references, "exact_match")
    return sum(pred in golds for pred, golds in pairs) / len(pairs) if pairs else 0.0


@metric
def squad_f1(predictions, references) -> float:
    """Mean over questions of the best bag-of-tokens F1 against a gold answer (SQuAD)."""
    pairs = _qa_pairs(predictions, references, "squad_f1")
    scores = [max(_token_f1(p.split(), g.split()) for g in golds) for p, golds in pairs]
    return sum(scores) / len(scores) if scores else 0.0


# -- Tagging with tags outside the BIO scheme: per word


def _tag_counts(predictions, references) -> tuple[int, int, int]:
    """(true positives, predicted, gold) words over every tag but "O"."""
    tp = predicted = gold = 0
    for pred, ref in zip(predictions, references, strict=True):
        for p, g in zip(pred, ref, strict=True):
            predicted += p != "O"
            gold += g != "O"
            tp += p == g and g != "O"
    return tp, predicted, gold


@metric
def tag_precision(predictions, references) -> float:
    """Per-word precision over every tag but "O" (micro-averaged)."""
    tp, predicted, _ = _tag_counts(predictions, references)
    return tp / predicted if predicted else 0.0


@metric
def tag_recall(predictions, references) -> float:
    """Per-word recall over every tag but "O" (micro-averaged)."""
    tp, _, gold = _tag_counts(predictions, references)
    return tp / gold if gold else 0.0


@metric
def tag_f1(predictions, references) -> float:
    """Per-word F1 over every tag but "O" (micro-averaged): sklearn's f1_score(average="micro")
    with labels = every tag but "O", on the flattened words."""
    tp, predicted, gold = _tag_counts(predictions, references)
    return 2 * tp / (predicted + gold) if predicted + gold else 0.0
