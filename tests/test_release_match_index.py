"""release_match_for reads the stack catalog through a memoised per-framework index: the same
answers as matching over freshly loaded stacks, and an edited or added user stack file is seen
at once (the index is keyed on each file's mtime)."""
import os
from pathlib import Path

import pytest

from hardware_specs.catalog import BUILTIN_DIR, list_stacks, load_stack, release_match_for
from hardware_specs.errors import InputError
from hardware_specs.release_match import match_release


@pytest.mark.parametrize("framework, version", [
    ("Megatron_LM", "2021"), ("nemo", "24.09.01"), ("NeMo", None), ("megatron-bridge", "26.05"),
    ("torchtitan", "0.1.0"), ("vllm", "0.12"), ("pytorch-fsdp", "2.13")])
def test_the_index_answers_as_matching_over_freshly_loaded_stacks(framework, version):
    key = lambda name: "".join(ch for ch in name.strip().lower() if ch not in " -_")   # noqa: E731
    mine = [load_stack(n) for n in sorted(list_stacks()) if key(load_stack(n).framework) == key(framework)]
    assert mine, framework
    if version is None:
        expected = [s for s in mine if s.default_when_version_unstated]
        assert release_match_for(framework, version).stack == expected[0]
        return
    expected = match_release(mine, framework.strip().lower(), version)
    got = release_match_for(framework, version)
    assert got == expected
    assert release_match_for(framework, version) == got          # a second call, from the memo


def test_an_unknown_framework_or_release_still_raises_each_time():
    for _ in range(2):
        with pytest.raises(InputError, match="framework"):
            release_match_for("no-such-framework", "1.0")
        with pytest.raises(InputError, match="needs a version"):
            release_match_for("megatron-lm", None)


def test_a_user_stack_file_added_then_edited_is_seen_at_once(tmp_path, monkeypatch):
    (tmp_path / "stacks").mkdir()
    text = (BUILTIN_DIR / "stacks" / "pytorch-ddp.yaml").read_text()
    text = text.replace("name: pytorch-ddp", "name: acme-train").replace("framework: pytorch-ddp",
                                                                            "framework: acme-train")
    monkeypatch.setenv("PARAPLAN_HARDWARE_PATH", str(tmp_path))
    with pytest.raises(InputError):
        release_match_for("acme-train", "2.13")
    path = tmp_path / "stacks" / "acme-train.yaml"
    path.write_text(text)
    os.utime(path, (1_000_000, 1_000_000))
    first = release_match_for("acme-train", "2.13")
    assert first.stack.name == "acme-train" and first.note == ""
    path.write_text(text.replace('versions: ["2.13"]', 'versions: ["3.1"]'))
    os.utime(path, (2_000_000, 2_000_000))
    again = release_match_for("acme-train", "3.1")
    assert again.stack.versions == ("3.1",) and again.note == ""
    assert "newest profiled release before it" not in again.note
    assert release_match_for("acme-train", "2.13").note != ""    # 2.13 now older than every profile
