"""``--global-batch-tokens`` takes a token count with a decimal or binary suffix, and a count that
is not a whole number of sequences is refused with a fix that names both readings."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from paraplan.cli import main
from paraplan.commands.token_count import parse_token_count
from planners.plan import whole_sequences_fix


@pytest.mark.parametrize("text, tokens", [
    ("4194304", 4_194_304), ("4Mi", 4 * 2**20), ("4M", 4_000_000), ("512k", 512_000), ("512K", 512_000),
    ("16Ki", 16 * 1024), ("1Gi", 2**30), ("2G", 2_000_000_000), (" 8 ", 8),
])
def test_suffixes_scale_by_powers_of_ten_or_of_two(text, tokens):
    assert parse_token_count(text) == tokens


@pytest.mark.parametrize("text", ["4x", "1e3", "1.5M", "-4M", "", "M", "4mi", "4 Mi", "0x10", "nan"])
def test_anything_else_is_not_a_token_count(text):
    assert parse_token_count(text) is None


def test_a_round_decimal_count_is_offered_its_binary_reading_when_that_is_whole():
    # 4,000,000 / 8192 = 488.28: nearest 488 x 8192 = 3,997,696; 4Mi = 4,194,304 = 512 x 8192
    assert whole_sequences_fix(4_000_000, 8192) == ("use e.g. 3997696 = 488 x 8192, "
                                                     "or 4Mi = 4194304 = 512 x 8192")
    # 1,000 tokens of 8192-token sequences: at least one sequence; 1Ki = 1024 is not whole either
    assert whole_sequences_fix(1000, 8192) == "use e.g. 8192 = 1 x 8192"
    # not a round decimal count: only the nearest whole number of sequences
    assert whole_sequences_fix(4_194_000, 4096) == "use e.g. 4194304 = 1024 x 4096"


def test_the_cli_reads_4mi_as_512_sequences_and_refuses_4x_on_one_line():
    runner = CliRunner()
    args = ["simulate", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "8", "--tp", "8"]
    result = runner.invoke(main, args + ["--global-batch-tokens", "4Mi", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["config"]["global_batch"] == 4 * 2**20 // 8192 == 512
    bad = runner.invoke(main, args + ["--global-batch-tokens", "4x"])
    assert bad.exit_code == 2
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --global-batch-tokens:")
    round_decimal = runner.invoke(main, args + ["--global-batch-tokens", "4M"])
    assert round_decimal.exit_code == 2 and "4Mi = 4194304 = 512 x 8192" in round_decimal.stderr
