"""Megatron's pipeline layout string (``--pipeline-model-parallel-layout``) as pipeline positions.

The string lists the model's pipeline positions in forward order, separated by ``|``; each
position is a run of layer symbols: ``E`` the input embedding, ``t`` a transformer (decoder)
layer, ``m`` a multi-token-prediction module, ``L`` the output layer with the loss. ``x*n``
repeats a symbol, ``(...)*n`` a group (which may span ``|``), commas and blanks are cosmetic.
Examples (Megatron-Core ``PipelineParallelLayerLayout``, NVIDIA/Megatron-LM
megatron/core/transformer/pipeline_parallel_layer_layout.py):

* ``Et*3|(tt|)*29,m|L``: DeepSeek-V3's 61 layers on 32 positions (pp 16 x vpp 2): the
  embedding and three layers, 29 positions of two layers, the MTP module alone, the loss alone;
* ``E|(t|)*126,L``: Llama 3 405B as its authors describe (Llama 3 paper, arXiv 2407.21783,
  section 3.3.2: the first chunk of the first stage holds only the embedding, the last chunk
  of the last stage only the output projection and loss) on pp 16 x vpp 8.

Positions are the schedule's forward path (``simulator.stage_layout.path_cells``): for
interleaved 1F1B that is Megatron's virtual-stage order (position u on rank u mod pp); for
ZB-V the V (ranks 0..p-1, then back p-1..0); for DualPipe one model copy's p positions (the
second copy mirrors it).

This module only parses; ``LayoutSpec.check`` validates it against a model and a pipeline.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from hardware_specs.errors import InputError

FIELD = "pipeline_layout"
SYMBOLS = {"E": "embedding", "t": "decoder layer", "m": "MTP module", "L": "loss"}
#: longest expansion accepted (a typo like ``t*99999999`` must not hang or exhaust memory)
MAX_EXPANDED = 1_000_000


@dataclass(frozen=True)
class LayoutSpec:
    """A parsed layout: per forward position, its decoder layers, MTP modules, and whether it
    holds the embedding / the loss. ``text`` is the string as given."""

    text: str
    decoder: tuple[int, ...]
    mtp: tuple[int, ...]
    embedding: tuple[int, ...]
    loss: tuple[int, ...]

    @property
    def positions(self) -> int:
        return len(self.decoder)

    def layers(self) -> tuple[int, ...]:
        """Transformer layers per position (decoder layers and MTP modules' layers)."""
        return tuple(d + m for d, m in zip(self.decoder, self.mtp))

    def check(self, num_layers: int, mtp_layers: int, positions: int, what: str) -> None:
        """Raise ``InputError`` unless the layout places ``num_layers`` decoder layers and
        ``mtp_layers`` MTP modules on ``positions`` positions (``what`` names the pipeline)."""
        if self.positions != positions:
            raise InputError(FIELD, f"{self.positions} positions (stages separated by '|') but {what} has "
                             f"{positions}", f"give {positions} '|'-separated stages")
        if sum(self.decoder) != num_layers:
            raise InputError(FIELD, f"{sum(self.decoder)} decoder layers ('t') but the model has {num_layers}",
                             f"place exactly {num_layers} 't'")
        if sum(self.mtp) != mtp_layers:
            raise InputError(FIELD, f"{sum(self.mtp)} MTP modules ('m') but the model has {mtp_layers}",
                             f"place exactly {mtp_layers} 'm'" if mtp_layers else "remove the 'm'")
        if sum(self.embedding) != 1 or not self.embedding[0]:
            raise InputError(FIELD, "the embedding 'E' must appear once, on the first position",
                             "start the layout with E")
        if sum(self.loss) != 1 or not self.loss[-1]:
            raise InputError(FIELD, "the loss 'L' must appear once, on the last position", "end the layout with L")
        last_decoder = max((i for i, d in enumerate(self.decoder) if d), default=-1)
        first_mtp = min((i for i, m in enumerate(self.mtp) if m), default=len(self.mtp))
        if first_mtp < last_decoder:
            raise InputError(FIELD, "MTP modules ('m') must come after every decoder layer ('t')")


def _expand(text: str) -> str:
    """``text`` with every ``(...)*n`` and ``x*n`` unrolled, commas and blanks dropped."""
    out: list[str] = []
    stack: list[list[str]] = [out]
    i, n = 0, len(text)

    def repeat_count(j: int) -> tuple[int, int]:
        if j < n and text[j] == "*":
            k = j + 1
            while k < n and text[k].isdigit():
                k += 1
            if k == j + 1:
                raise InputError(FIELD, f"'*' at character {j + 1} is not followed by a count",
                                 "write x*3 or (tt|)*29")
            return int(text[j + 1:k]), k
        return 1, j

    while i < n:
        c = text[i]
        if c in " ,\t":
            i += 1
        elif c == "(":
            stack.append([])
            i += 1
        elif c == ")":
            if len(stack) == 1:
                raise InputError(FIELD, f"unmatched ')' at character {i + 1}", "balance the parentheses")
            group = "".join(stack.pop())
            count, i = repeat_count(i + 1)
            if len(group) * count > MAX_EXPANDED:
                raise InputError(FIELD, "the layout expands to too many symbols", "check the repeat counts")
            stack[-1].append(group * count)
        elif c in SYMBOLS or c == "|":
            count, i = repeat_count(i + 1)
            if count > MAX_EXPANDED:
                raise InputError(FIELD, "the layout expands to too many symbols", "check the repeat counts")
            stack[-1].append(c * count)
        else:
            raise InputError(FIELD, f"unknown symbol {c!r} at character {i + 1}",
                             "use E (embedding), t (layer), m (MTP), L (loss), | (next stage), (...)*n")
        if sum(len(s) for s in stack[-1]) > MAX_EXPANDED:
            raise InputError(FIELD, "the layout expands to too many symbols", "check the repeat counts")
    if len(stack) != 1:
        raise InputError(FIELD, "unmatched '('", "balance the parentheses")
    return "".join(out)


@lru_cache(maxsize=256)
def parse_layout(text: str) -> LayoutSpec:
    """Parse a Megatron layout string (see the module docstring); syntax errors raise
    ``InputError`` naming ``pipeline_layout``."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(FIELD, "empty layout", "e.g. 'Et*3|(tt|)*29,m|L'")
    stages = _expand(text).split("|")
    return LayoutSpec(text=text, decoder=tuple(s.count("t") for s in stages), mtp=tuple(s.count("m") for s in stages),
                      embedding=tuple(s.count("E") for s in stages), loss=tuple(s.count("L") for s in stages))
