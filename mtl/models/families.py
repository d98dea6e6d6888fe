"""Encoder adapters: what differs between model families, chosen from the model's config.

A family is the set of transformers model types that pool, pad, pack and export alike. Its
adapter (an `EncoderAdapter`) says:
- `head_shape()`: how the family's own transformers heads compute (the token a sentence head
  pools: first, or last non-pad for decoders; the dense layer's activation, bias and LayerNorm
  after it), so that mtl's heads take that form and export exactly (`HeadShape`);
- `pretrained_dense`: the module of the family's `AutoModelForSequenceClassification` whose
  trained weights (when the checkpoint has them) start every head's dense layer (BERT: the
  encoder's pooler; RoBERTa, ELECTRA: `classifier.dense`; DeBERTa: `pooler.dense`; DistilBERT:
  `pre_classifier`; ModernBERT: `head.dense`; decoders: none);
- `token_type_ids`: whether the encoder reads them (RoBERTa, DistilBERT, ModernBERT and decoders
  do not: they are dropped);
- packing: `causal` (decoders: a token sees only earlier tokens of its own row) and
  `packed_inputs` (ModernBERT: its sliding-window layers get their own block mask);
- `export_targets(auto_class, out)`: the modules of the family's `AutoModelFor...` a head's
  dense layer, LayerNorm and output layer are copied onto.

`adapter_for(config)` picks the adapter of `config.model_type`: the family that lists it
(`model_types`, the types tested end to end), else the family transformers' own classes imply
(`family_from_transformers`: a causal LM with no masked-LM class is a decoder); `model.family`
overrides it with a family name (`FAMILIES`) or the import path of an `EncoderAdapter` subclass
of your own. An overridden or implied family is written into the encoder's config
(`mtl_family`, the built-in family a user's adapter derives from), so an export folder is read
back with the same heads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import transformers
from transformers.modeling_layers import GenericForTokenClassification
from transformers.models.auto import modeling_auto

from mtl.errors import MtlError, import_target

SC = "AutoModelForSequenceClassification"
MC = "AutoModelForMultipleChoice"
TC = "AutoModelForTokenClassification"
QA = "AutoModelForQuestionAnswering"


@dataclass(frozen=True)
class HeadShape:
    """The form of a family's transformers heads that mtl's heads take.

    `position`: the token a sentence head pools ("first", or "last": the last non-pad token).
    `activation`: after the sentence heads' dense layer (a transformers activation name), None
    for no dense layer. `dense_bias`: whether that layer has a bias. `norm_eps`: a LayerNorm
    after the activation (with `norm_bias`), None for none. `token_dense`: token heads (tagging,
    QA) run the same dense -> activation -> LayerNorm first. `out_bias`: whether the sentence
    heads' output layer has a bias."""

    position: str = "first"
    activation: str | None = "tanh"
    dense_bias: bool = True
    norm_eps: float | None = None
    norm_bias: bool = True
    token_dense: bool = False
    out_bias: bool = True


@dataclass(frozen=True)
class ExportTargets:
    """Module paths in a transformers model (from the model itself; `base_model.` from its
    encoder) that a head's output layer, dense layer and LayerNorm are copied onto."""

    out: str
    dense: str | None = None
    norm: str | None = None


class EncoderAdapter:
    """BERT (and any encoder no family names): first-token pooling through BERT's pooler
    (`tanh(dense(.))`), token type ids, packing with per-row position ids and a block-diagonal
    mask, export onto `BertFor...`'s `pooler.dense` and `classifier` / `qa_outputs`."""

    family: ClassVar[str] = "bert"
    model_types: ClassVar[tuple[str, ...]] = ("bert",)
    token_type_ids: ClassVar[bool] = True
    causal: ClassVar[bool] = False
    pretrained_dense: ClassVar[str | None] = "base_model.pooler.dense"
    #: {auto class: dense module path} where the family's own model differs from BERT's
    dense_by_class: ClassVar[dict[str, str | None]] = {}
    #: {auto class: output module path} where the family's own model differs from the type's
    out_by_class: ClassVar[dict[str, str]] = {}

    def __init__(self, config: Any = None):
        self.config = config

    def head_shape(self) -> HeadShape:
        return HeadShape()

    def export_targets(self, auto_class: str, out: str) -> ExportTargets:
        """Where a head goes in the family's `auto_class` model (`out`: the task type's name
        for the output layer, BERT's)."""
        dense = self.dense_by_class.get(auto_class, "base_model.pooler.dense")
        norm = None
        if self.head_shape().norm_eps is not None and dense is not None:
            norm = dense.rsplit(".", 1)[0] + ".norm"
        return ExportTargets(self.out_by_class.get(auto_class, out), dense, norm)

    def encoder_inputs(self, batch: dict) -> dict:
        """The batch's columns the encoder reads."""
        names = ("input_ids", "attention_mask") + (("token_type_ids",) * self.token_type_ids)
        return {k: batch[k] for k in names if k in batch}

    def packed_inputs(self, packed: dict) -> dict:
        """The packed call's inputs (bool 4-D `attention_mask`), adjusted for the family."""
        return packed


class RobertaAdapter(EncoderAdapter):
    """RoBERTa and XLM-R: no token type ids; positions count from the pad id + 1; sequence
    classification onto `classifier.dense` / `classifier.out_proj` (multiple choice: the
    encoder's pooler, as BERT)."""

    family = "roberta"
    model_types = ("roberta", "xlm-roberta", "camembert")
    token_type_ids = False
    pretrained_dense = "classifier.dense"
    dense_by_class = {SC: "classifier.dense"}
    out_by_class = {SC: "classifier.out_proj"}


class ElectraAdapter(EncoderAdapter):
    """ELECTRA: the heads' dense layer is followed by GELU (`classifier.dense` for sequence
    classification, `sequence_summary.summary` for multiple choice)."""

    family = "electra"
    model_types = ("electra",)
    pretrained_dense = "classifier.dense"
    dense_by_class = {SC: "classifier.dense", MC: "sequence_summary.summary"}
    out_by_class = {SC: "classifier.out_proj"}

    def head_shape(self) -> HeadShape:
        return HeadShape(activation="gelu")


class DistilBertAdapter(EncoderAdapter):
    """DistilBERT: no token type ids; `pre_classifier` then ReLU."""

    family = "distilbert"
    model_types = ("distilbert",)
    token_type_ids = False
    pretrained_dense = "pre_classifier"
    dense_by_class = {SC: "pre_classifier", MC: "pre_classifier"}

    def head_shape(self) -> HeadShape:
        return HeadShape(activation="relu")


class DebertaAdapter(EncoderAdapter):
    """DeBERTa(-v2, -v3): the context pooler (`pooler.dense`, then `pooler_hidden_act`)."""

    family = "deberta-v2"
    model_types = ("deberta-v2", "deberta")
    pretrained_dense = "pooler.dense"
    dense_by_class = {SC: "pooler.dense", MC: "pooler.dense"}

    def head_shape(self) -> HeadShape:
        return HeadShape(activation=getattr(self.config, "pooler_hidden_act", "gelu"))


class ModernBertAdapter(EncoderAdapter):
    """ModernBERT: no token type ids; every head (token heads too) runs `head.dense` ->
    `classifier_activation` -> `head.norm` first; packed calls give its sliding-window layers
    the block mask cut to the local window."""

    family = "modernbert"
    model_types = ("modernbert",)
    token_type_ids = False
    pretrained_dense = "head.dense"
    dense_by_class = {SC: "head.dense", MC: "head.dense", TC: "head.dense", QA: "head.dense"}
    out_by_class = {QA: "classifier"}

    def head_shape(self) -> HeadShape:
        c = self.config
        return HeadShape(
            activation=getattr(c, "classifier_activation", "gelu"),
            dense_bias=bool(getattr(c, "classifier_bias", False)),
            norm_eps=float(getattr(c, "norm_eps", 1e-5)),
            norm_bias=bool(getattr(c, "norm_bias", False)),
            token_dense=True,
        )

    def packed_inputs(self, packed: dict) -> dict:
        mask = packed.pop("attention_mask")
        positions = packed["position_ids"]
        distance = (positions[:, None, :, None] - positions[:, None, None, :]).abs()
        window = mask & (distance <= getattr(self.config, "local_attention", 128) // 2)
        packed["attention_mask"] = {"full_attention": mask, "sliding_attention": window}
        return packed


class DecoderAdapter(EncoderAdapter):
    """Decoder LLMs (GPT-2, Qwen2, Llama, Mistral, ...): a sentence head scores the last non-pad
    token (left or right padding) with no dense layer and an output layer without bias (`score`,
    as `<Model>ForSequenceClassification`); no token type ids; packed rows get a causal mask.
    Token classification exports onto `score` (transformers' generic class, Llama's) or
    `classifier` (a class of the model's own: GPT-2, GPT-NeoX, BLOOM, Falcon, ...)."""

    family = "decoder"
    model_types = ("gpt2", "qwen2", "qwen3", "llama", "mistral", "gemma", "gemma2", "phi3", "olmo2")
    token_type_ids = False
    causal = True
    pretrained_dense = None
    out_by_class = {SC: "score", TC: "score"}

    def head_shape(self) -> HeadShape:
        return HeadShape(position="last", activation=None, out_bias=False)

    def export_targets(self, auto_class: str, out: str) -> ExportTargets:
        targets = super().export_targets(auto_class, out)
        if auto_class == TC and not _generic_token_classifier(self.config):
            return ExportTargets("classifier", targets.dense, targets.norm)
        return targets


def _generic_token_classifier(config: Any) -> bool:
    """Whether transformers' token classifier for `config`'s model type is its generic one
    (`GenericForTokenClassification`, output layer `score`); true where none is known."""
    names = modeling_auto.MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES
    found = getattr(transformers, names.get(getattr(config, "model_type", None), ""), None)
    return not isinstance(found, type) or issubclass(found, GenericForTokenClassification)


ADAPTERS: tuple[type[EncoderAdapter], ...] = (
    EncoderAdapter,
    RobertaAdapter,
    ElectraAdapter,
    DistilBertAdapter,
    DebertaAdapter,
    ModernBertAdapter,
    DecoderAdapter,
)
FAMILIES = {adapter.family: adapter for adapter in ADAPTERS}


def family_from_transformers(model_type: str | None, config: Any = None) -> tuple[str, str]:
    """(the family transformers' own classes imply for `model_type`, why), for a model type no
    family lists: "decoder" for a causal LM with no masked-LM class (GPT-NeoX, OPT, Falcon,
    BLOOM, Phi, ...); for a model type transformers does not know (remote code), "decoder" when
    the config names a causal-LM architecture and no masked-LM one, or `is_decoder`; else
    "bert" (an encoder, or a model type with no LM class)."""
    causal = modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    masked = modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES
    if model_type in causal or model_type in modeling_auto.MODEL_MAPPING_NAMES:
        if model_type in causal and model_type not in masked:
            return "decoder", "transformers has a causal LM and no masked LM for it"
        if model_type in masked:
            return "bert", "transformers has a masked LM for it"
        return "bert", "transformers has no causal LM for it"
    architectures = list(getattr(config, "architectures", None) or [])
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in architectures) and not any(
        a.endswith("ForMaskedLM") for a in architectures
    ):
        return "decoder", f"its config names a causal LM ({', '.join(architectures)})"
    if getattr(config, "is_decoder", False):
        return "decoder", "its config says is_decoder"
    return "bert", "transformers does not know it and its config names no causal LM"


def listed_family(model_type: str | None) -> type[EncoderAdapter] | None:
    """The built-in adapter whose `model_types` list `model_type`, or None."""
    return next((a for a in ADAPTERS if model_type in a.model_types), None)


def family_note(config: Any) -> str | None:
    """The one line naming the family a model type no family lists was given (None for a
    listed one, or a config that records its family), and how to choose another."""
    model_type = getattr(config, "model_type", None)
    if getattr(config, "mtl_family", None) or listed_family(model_type):
        return None
    family, why = family_from_transformers(model_type, config)
    return (
        f"mtl: model type {model_type!r} has no family of its own; it trains as family "
        f"{family} ({why}); set model.family= to choose another ({', '.join(FAMILIES)})"
    )


def adapter_class(
    family: str | None, model_type: str | None, config: Any = None
) -> type[EncoderAdapter]:
    """The adapter of `family` (a name in `FAMILIES` or `package.module.Class`), else of
    `model_type`: the family that lists it, else the one transformers implies
    (`family_from_transformers`, with `config` for a model type transformers does not know)."""
    if family:
        if family in FAMILIES:
            return FAMILIES[family]
        if "." not in family:
            raise MtlError(
                f"model.family={family!r} is not a family; choose from {', '.join(FAMILIES)} "
                "or give package.module.Class of an EncoderAdapter subclass"
            )
        return import_target(family, "model.family", EncoderAdapter)
    listed = listed_family(model_type)
    return listed or FAMILIES[family_from_transformers(model_type, config)[0]]


def adapter_for(config: Any, family: str | None = None) -> EncoderAdapter:
    """The adapter of an encoder's config: `family`, else the family the config records
    (`mtl_family`), else its `model_type`'s (`adapter_class`)."""
    family = family or getattr(config, "mtl_family", None)
    return adapter_class(family, getattr(config, "model_type", None), config)(config)


def last_token(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The hidden state of each row's last non-pad token (left or right padding)."""
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    last = (positions * (attention_mask != 0)).argmax(-1)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
