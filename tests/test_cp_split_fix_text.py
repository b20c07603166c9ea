"""The ring context-parallel split's error offers the sequence lengths around the one given that
split into 2 x cp chunks, each once: 8 tokens at cp 16 (32 chunks) offered "(32 or 32)" (the
multiple below, 0, fell back to the one above). Found by session 71's simulate review."""
from __future__ import annotations

import pytest

from hardware_specs.errors import InputError
from simulator.validate_config import check_sequence_split


@pytest.mark.parametrize("seq_len, cp, offered", [
    (8, 16, "(32)"),             # below one chunk set: 32 only (0 tokens is no sequence)
    (10, 2, "(8 or 12)"),        # 4 chunks: the multiples of 4 either side of 10
    (8191, 2, "(8188 or 8192)"),
])
def test_the_fix_offers_each_neighbouring_length_once(seq_len, cp, offered):
    with pytest.raises(InputError) as err:
        check_sequence_split(seq_len, cp, 1, False, "ring")
    assert err.value.field == "cp"
    assert err.value.fix.endswith(f"a sequence length that is a multiple of {2 * cp} {offered}"), err.value.fix
