"""Each metric against its reference (scikit-learn, scipy, seqeval, the official SQuAD script).

Random inputs come from seeded numpy generators and hypothesis; the references raise or return
nan on degenerate inputs, where mtl.task_types.metrics returns 0.0, so those cases are checked
on their own.
"""

from __future__ import annotations

import collections
import re
import string
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from seqeval import metrics as seqeval
from seqeval.scheme import IOB2
from sklearn import metrics as sk

from mtl.errors import MtlError
from mtl.task_types import metrics

TOL = 1e-6
TRIALS = 200


def quiet(fn, *args, **kwargs):
    """Call a reference with its UndefinedMetric/ConstantInput warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(fn(*args, **kwargs))


def close(ours: float, reference: float) -> bool:
    return abs(ours - reference) <= TOL


# Classification


def random_classes(rng, binary=False):
    n = int(rng.integers(1, 60))
    k = 2 if binary else int(rng.integers(1, 6))
    ref = rng.integers(0, k, n)
    style = rng.integers(0, 4)
    if style == 0:  # constant predictions
        pred = np.full(n, rng.integers(0, k))
    elif style == 1:  # mostly right
        pred = np.where(rng.random(n) < 0.8, ref, rng.integers(0, k, n))
    else:
        pred = rng.integers(0, k, n)
    return pred, ref


@pytest.mark.parametrize(
    ("ours", "reference", "binary"),
    [
        (metrics.accuracy, sk.accuracy_score, False),
        (metrics.f1, sk.f1_score, True),
        (metrics.macro_f1, lambda r, p: sk.f1_score(r, p, average="macro"), False),
        (metrics.mcc, sk.matthews_corrcoef, False),
        (metrics.mcc, sk.matthews_corrcoef, True),
    ],
)
def test_classification_matches_sklearn(ours, reference, binary):
    rng = np.random.default_rng(0)
    for _ in range(TRIALS):
        pred, ref = random_classes(rng, binary)
        assert close(ours(pred, ref), quiet(reference, ref, pred)), (pred, ref)


def test_classification_hand_checked():
    pred, ref = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]
    assert metrics.accuracy(pred, ref) == pytest.approx(3 / 5)
    # class 1: tp 2, fp 1, fn 1 -> F1 2/3; class 0: tp 1, fp 1, fn 1 -> 1/2
    assert metrics.f1(pred, ref) == pytest.approx(2 / 3)
    assert metrics.macro_f1(pred, ref) == pytest.approx((2 / 3 + 1 / 2) / 2)
    # mcc = (tp*tn - fp*fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn)) = (2-1)/sqrt(3*3*2*2)
    assert metrics.mcc(pred, ref) == pytest.approx(1 / 6)
    assert metrics.macro_f1([2, 0, 2], [2, 1, 2]) == pytest.approx((0 + 0 + 1) / 3)


def test_classification_degenerate_cases():
    for fn in (metrics.accuracy, metrics.f1, metrics.macro_f1, metrics.mcc):
        assert fn([], []) == 0.0  # sklearn raises on empty input
    assert metrics.f1([0, 0], [0, 0]) == 0.0 == quiet(sk.f1_score, [0, 0], [0, 0])
    assert metrics.mcc([3, 3], [3, 3]) == 0.0 == quiet(sk.matthews_corrcoef, [3, 3], [3, 3])
    assert metrics.macro_f1([3, 3], [3, 3]) == 1.0
    assert metrics.mcc([1, 0, 1], [1, 0, 1]) == pytest.approx(1.0)
    assert metrics.mcc([0, 1, 0], [1, 0, 1]) == pytest.approx(-1.0)


def test_classification_bad_input():
    with pytest.raises(MtlError, match="macro_f1"):
        metrics.f1([0, 1, 2], [0, 1, 2])
    with pytest.raises(MtlError, match="accuracy"):
        metrics.accuracy([0, 1], [0, 1, 1])


# Multi-label


def random_indicators(rng):
    n, k = int(rng.integers(1, 30)), int(rng.integers(2, 7))  # k=1: see the test below
    ref = rng.random((n, k)) < rng.random()
    pred = np.where(rng.random((n, k)) < rng.random(), ref, rng.random((n, k)) < rng.random())
    return pred.astype(int), ref.astype(int)


@pytest.mark.parametrize(
    ("ours", "reference"),
    [
        (metrics.micro_f1, lambda r, p: sk.f1_score(r, p, average="micro")),
        (
            metrics.macro_f1_multilabel,
            lambda r, p: sk.f1_score(r, p, average="macro", zero_division=0),
        ),
        (metrics.subset_accuracy, sk.accuracy_score),
    ],
)
def test_multilabel_matches_sklearn(ours, reference):
    rng = np.random.default_rng(1)
    for _ in range(TRIALS):
        pred, ref = random_indicators(rng)
        assert close(ours(pred, ref), quiet(reference, ref, pred)), (pred, ref)


def test_multilabel_single_label_column():
    """[n, 1] is one label; sklearn reads it as binary classes 0/1 and would average over both."""
    rng = np.random.default_rng(7)
    for _ in range(50):
        ref = rng.integers(0, 2, (int(rng.integers(1, 30)), 1))
        pred = np.where(rng.random(ref.shape) < 0.7, ref, 1 - ref)
        f1_of_label = quiet(sk.f1_score, ref.ravel(), pred.ravel())
        assert close(metrics.micro_f1(pred, ref), f1_of_label)
        assert close(metrics.macro_f1_multilabel(pred, ref), f1_of_label)
        assert close(metrics.subset_accuracy(pred, ref), sk.accuracy_score(ref, pred))


def test_multilabel_hand_checked_and_degenerate():
    pred = [[1, 0, 0], [1, 1, 0]]
    ref = [[1, 0, 0], [0, 1, 0]]
    assert metrics.micro_f1(pred, ref) == pytest.approx(2 * 2 / (2 * 2 + 1))
    # columns: F1 2/3, 1, and 0 for the label never predicted nor true
    assert metrics.macro_f1_multilabel(pred, ref) == pytest.approx((2 / 3 + 1 + 0) / 3)
    assert metrics.subset_accuracy(pred, ref) == pytest.approx(1 / 2)
    zeros = np.zeros((3, 4), int)
    assert (
        metrics.micro_f1(zeros, zeros) == 0.0 == quiet(sk.f1_score, zeros, zeros, average="micro")
    )
    assert metrics.macro_f1_multilabel(zeros, zeros) == 0.0
    empty = np.zeros((0, 3), int)
    for fn in (metrics.micro_f1, metrics.macro_f1_multilabel, metrics.subset_accuracy):
        assert fn(empty, empty) == 0.0
    with pytest.raises(MtlError, match="indicator"):
        metrics.micro_f1([0, 1], [0, 1])
    with pytest.raises(MtlError, match="threshold"):
        metrics.subset_accuracy([[0.2, 0.9]], [[0, 1]])


# Regression


def random_series(rng, ties=False):
    n = int(rng.integers(2, 80))
    ref = rng.normal(size=n) * rng.uniform(0.01, 100)
    pred = ref * rng.normal() + rng.normal(size=n) * rng.uniform(0.01, 10)
    if ties:  # few distinct values, so many ties in both series
        ref, pred = np.round(ref / ref.std()), np.round(pred / pred.std())
    return pred, ref


def correlation_reference(fn, ref, pred):
    return quiet(lambda: fn(ref, pred).statistic)


def test_regression_matches_scipy_and_sklearn():
    rng = np.random.default_rng(2)
    checked = 0
    for trial in range(TRIALS):
        pred, ref = random_series(rng, ties=trial % 2 == 1)
        assert close(metrics.mse(pred, ref), sk.mean_squared_error(ref, pred))
        if np.ptp(pred) == 0 or np.ptp(ref) == 0:
            continue
        checked += 1
        assert close(metrics.pearson(pred, ref), correlation_reference(stats.pearsonr, ref, pred))
        spearman = correlation_reference(stats.spearmanr, ref, pred)
        assert close(metrics.spearman(pred, ref), spearman), (pred, ref)
    assert checked > TRIALS * 0.9


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(-3, 3)), min_size=2, max_size=30))
def test_spearman_with_ties_matches_scipy(pairs):
    pred, ref = (np.array(v, dtype=float) for v in zip(*pairs, strict=True))
    if np.ptp(pred) == 0 or np.ptp(ref) == 0:
        assert metrics.spearman(pred, ref) == 0.0
    else:
        assert close(metrics.spearman(pred, ref), correlation_reference(stats.spearmanr, ref, pred))


def test_regression_hand_checked_and_degenerate():
    # centred: [-1, 0, 1] and [-13/6, -1/6, 7/3]
    assert metrics.pearson([1, 2, 3], [2, 4, 6.5]) == pytest.approx(4.5 / np.sqrt(61 / 3))
    assert metrics.pearson([3, 2, 1], [1, 2, 3]) == pytest.approx(-1.0)
    # ranks [1, 2.5, 2.5, 4] against [1, 2, 3, 4]: monotone with one tie
    assert metrics.spearman([1, 5, 5, 9], [1, 2, 3, 4]) == pytest.approx(4.5 / np.sqrt(4.5 * 5))
    assert metrics.spearman([1, 10, 100], [3, 4, 5]) == pytest.approx(1.0)
    assert metrics.mse([1, 2], [2, 4]) == pytest.approx(2.5)
    # constant series and fewer than 2 points: scipy gives nan (or raises), we give 0.0
    constant = ([0.1, 0.1, 0.1], [1.0, 2.0, 3.0])
    assert np.isnan(correlation_reference(stats.pearsonr, *constant))
    assert np.isnan(correlation_reference(stats.spearmanr, *constant))
    for fn in (metrics.pearson, metrics.spearman):
        assert fn(*constant) == 0.0
        assert fn(constant[1], constant[0]) == 0.0
        assert fn([1.0], [2.0]) == 0.0
        assert fn([], []) == 0.0
    assert metrics.mse([], []) == 0.0
    assert metrics.pearson([[1.0], [2.0], [3.0]], [1, 2, 4]) == metrics.pearson(
        [1, 2, 3], [1, 2, 4]
    )
    with pytest.raises(MtlError, match="pearson"):
        metrics.pearson([1, 2], [1, 2, 3])


# Tagging

IOB2_TAGS = ["O", "O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG"]


def random_tagging(rng, tags):
    n_sent = int(rng.integers(1, 8))
    ref = [list(rng.choice(tags, int(rng.integers(0, 12)))) for _ in range(n_sent)]
    noise = rng.random()
    pred = [[t if rng.random() > noise else str(rng.choice(tags)) for t in s] for s in ref]
    return pred, ref


SEQEVAL_STRICT = [
    (metrics.span_f1, seqeval.f1_score),
    (metrics.span_precision, seqeval.precision_score),
    (metrics.span_recall, seqeval.recall_score),
]


@pytest.mark.parametrize(("ours", "reference"), SEQEVAL_STRICT)
def test_tagging_matches_seqeval_strict(ours, reference):
    rng = np.random.default_rng(3)
    for _ in range(TRIALS):
        pred, ref = random_tagging(rng, IOB2_TAGS)
        expected = quiet(reference, ref, pred, mode="strict", scheme=IOB2, zero_division=0)
        assert close(ours(pred, ref), expected), (pred, ref)


def test_token_accuracy_matches_seqeval():
    rng = np.random.default_rng(4)
    for _ in range(TRIALS):
        pred, ref = random_tagging(rng, IOB2_TAGS)
        if sum(map(len, ref)):
            assert close(metrics.token_accuracy(pred, ref), seqeval.accuracy_score(ref, pred))
        else:
            assert metrics.token_accuracy(pred, ref) == 0.0  # seqeval divides by zero


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.sampled_from(IOB2_TAGS), st.sampled_from(IOB2_TAGS)), max_size=10),
        min_size=1,
        max_size=5,
    )
)
def test_span_f1_matches_seqeval_property(sentences):
    ref = [[r for r, _ in s] for s in sentences]
    pred = [[p for _, p in s] for s in sentences]
    for ours, reference in SEQEVAL_STRICT:
        expected = quiet(reference, ref, pred, mode="strict", scheme=IOB2, zero_division=0)
        assert close(ours(pred, ref), expected)


def test_unprefixed_tags_read_as_io_tagging():
    """A tag without B-/I- is IO tagging: seqeval's default (conlleval) mode on I-X agrees."""
    rng = np.random.default_rng(5)
    for _ in range(TRIALS):
        pred, ref = random_tagging(rng, ["O", "O", "PER", "LOC"])
        io_ref = [[t if t == "O" else f"I-{t}" for t in s] for s in ref]
        io_pred = [[t if t == "O" else f"I-{t}" for t in s] for s in pred]
        for ours, reference in SEQEVAL_STRICT:
            expected = quiet(reference, io_ref, io_pred, zero_division=0)
            assert close(ours(pred, ref), expected), (pred, ref)


def test_tagging_hand_checked():
    ref = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["I-ORG", "O"]]
    # spans ref: PER 0-2, LOC 3, ORG; pred: PER 0-2, ORG 3 (the stray I-ORG is no span)
    assert metrics.span_precision(pred, ref) == pytest.approx(1 / 2)
    assert metrics.span_recall(pred, ref) == pytest.approx(1 / 3)
    assert metrics.span_f1(pred, ref) == pytest.approx(2 * 1 / (2 + 3))
    assert metrics.token_accuracy(pred, ref) == pytest.approx(4 / 6)
    # a span must end where the reference's does: B-PER I-PER vs B-PER
    assert metrics.span_f1([["B-PER", "O"]], [["B-PER", "I-PER"]]) == 0.0
    # IO tags: one run is one span; a type change starts a new one
    io = [["PER", "PER", "LOC", "O", "PER"]]
    assert metrics.span_f1(io, [["B-PER", "I-PER", "B-LOC", "O", "B-PER"]]) == 1.0
    assert metrics.span_recall([["PER", "O", "PER"]], [["PER", "PER", "PER"]]) == 0.0


def test_tagging_degenerate_and_bad_input():
    no_entities = [["O", "O"], ["O"]]
    for fn in (metrics.span_f1, metrics.span_precision, metrics.span_recall):
        assert fn(no_entities, no_entities) == 0.0
        assert fn([], []) == 0.0
        assert fn([[]], [[]]) == 0.0
        assert fn([["B-X", "O"]], [["O", "O"]]) == 0.0
        assert fn([["O", "O"]], [["B-X", "O"]]) == 0.0
    assert metrics.token_accuracy([], []) == 0.0
    with pytest.raises(MtlError, match="IOB2"):
        metrics.span_f1([["S-PER"]], [["O"]])
    with pytest.raises(MtlError, match="span_f1"):
        metrics.span_f1([["O", "O"]], [["O"]])
    with pytest.raises(MtlError, match="token_accuracy"):
        metrics.token_accuracy([["O"]], [["O"], ["O"]])


# Extractive QA: the official SQuAD v2.0 evaluation script's functions, as the reference.


def squad_normalize_answer(s):
    """Lower text and remove punctuation, articles and extra whitespace."""

    def remove_articles(text):
        regex = re.compile(r"\b(a|an|the)\b", re.UNICODE)
        return re.sub(regex, " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def squad_get_tokens(s):
    if not s:
        return []
    return squad_normalize_answer(s).split()


def squad_compute_exact(a_gold, a_pred):
    return int(squad_normalize_answer(a_gold) == squad_normalize_answer(a_pred))


def squad_compute_f1(a_gold, a_pred):
    gold_toks = squad_get_tokens(a_gold)
    pred_toks = squad_get_tokens(a_pred)
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    num_same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        # If either is no-answer, then F1 is 1 if they agree, 0 otherwise
        return int(gold_toks == pred_toks)
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(pred_toks)
    recall = 1.0 * num_same / len(gold_toks)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1


def squad_raw_scores(predictions, references):
    """get_raw_scores of the v2.0 script, averaged over questions (fractions, not percentages)."""
    exact, f1 = [], []
    for a_pred, answers in zip(predictions, references, strict=True):
        gold_answers = [a for a in answers if squad_normalize_answer(a)]
        if not gold_answers:
            # For unanswerable questions, only correct answer is empty string
            gold_answers = [""]
        exact.append(max(squad_compute_exact(a, a_pred) for a in gold_answers))
        f1.append(max(squad_compute_f1(a, a_pred) for a in gold_answers))
    return sum(exact) / len(exact), sum(f1) / len(f1)


WORDS = ["the", "a", "An", "Paris", "paris,", "France", "capital", "of", "1889", "Eiffel's", "."]


def random_answer(rng):
    text = " ".join(rng.choice(WORDS, int(rng.integers(0, 5))))
    return text.replace(" ", "  ") if rng.random() < 0.1 else text


def test_qa_matches_official_squad_script():
    rng = np.random.default_rng(6)
    for _ in range(TRIALS):
        n = int(rng.integers(1, 10))
        refs = [[random_answer(rng) for _ in range(rng.integers(0, 4))] for _ in range(n)]
        preds = [
            str(rng.choice(r)) if r and rng.random() < 0.3 else random_answer(rng) for r in refs
        ]
        exact, f1 = squad_raw_scores(preds, refs)
        assert close(metrics.exact_match(preds, refs), exact), (preds, refs)
        assert close(metrics.squad_f1(preds, refs), f1), (preds, refs)


def test_qa_hand_checked():
    refs = [["Paris", "the city of Paris"], ["1889"], []]
    preds = ["paris.", "in 1889", ""]
    assert metrics.exact_match(preds, refs) == pytest.approx(2 / 3)
    # 1 (exact), F1 of "in 1889" vs "1889" = 2/3, 1 (no answer, rightly)
    assert metrics.squad_f1(preds, refs) == pytest.approx((1 + 2 / 3 + 1) / 3)
    assert metrics.exact_match(["an answer"], [[]]) == 0.0
    assert metrics.squad_f1(["the"], [["Paris"]]) == 0.0  # normalises to no answer
    assert metrics.exact_match(["the"], [["An"]]) == 1.0  # gold normalises to "": unanswerable
    assert metrics.exact_match(["Paris"], ["Paris"]) == 1.0  # a str is one gold answer
    assert metrics.exact_match([], []) == 0.0 == metrics.squad_f1([], [])
    with pytest.raises(MtlError, match="squad_f1"):
        metrics.squad_f1(["a"], [["a"], ["b"]])


# Tagging outside the BIO scheme (per word)


@pytest.mark.parametrize(
    ("ours", "reference"),
    [
        (metrics.tag_f1, sk.f1_score),
        (metrics.tag_precision, sk.precision_score),
        (metrics.tag_recall, sk.recall_score),
    ],
)
def test_per_word_tag_scores_match_sklearn_micro_without_o(ours, reference):
    rng = np.random.default_rng(7)
    tags = ["O", "CODE", "NAME"]
    for _ in range(200):
        sentences = [int(rng.integers(1, 8)) for _ in range(int(rng.integers(1, 6)))]
        gold = [[tags[i] for i in rng.integers(0, 3, n)] for n in sentences]
        pred = [[tags[i] for i in rng.integers(0, 3, n)] for n in sentences]
        flat_gold = [t for row in gold for t in row]
        flat_pred = [t for row in pred for t in row]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = reference(
                flat_gold, flat_pred, labels=["CODE", "NAME"], average="micro", zero_division=0
            )
        assert close(ours(pred, gold), expected)
