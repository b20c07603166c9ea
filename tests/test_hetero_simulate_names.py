"""``simulate_heterogeneous`` takes a model and a cluster by name or file, as ``plan_heterogeneous``
does (its doc and the one-kind API's error point users at both): a name failed as an
AttributeError ('str' object has no attribute 'moe' / 'pool_names'), and any other type too."""
from __future__ import annotations

from pathlib import Path

import pytest

from hardware_specs.catalog import load_pooled_cluster
from hardware_specs.errors import InputError
from model_specs.catalog import load_model
from simulator.heterogeneous import HeteroPlan, ReplicaGroup, StagePlacement, simulate_heterogeneous

CLUSTER = str(Path(__file__).resolve().parents[1] / "examples" / "clusters" / "a100-h100.yaml")
PLAN = HeteroPlan(groups=(ReplicaGroup(stages=(StagePlacement("a100", 8, 21), StagePlacement("h100", 4, 30),
                                               StagePlacement("h100", 4, 29)), replicas=32),), global_batch=512)


def test_simulate_heterogeneous_by_name_equals_by_spec():
    by_spec = simulate_heterogeneous(load_model("llama3-70b"), load_pooled_cluster(CLUSTER), PLAN)
    by_name = simulate_heterogeneous("llama3-70b", CLUSTER, PLAN)
    assert by_name.step_time_s == by_spec.step_time_s
    assert by_name.tokens_per_s == by_spec.tokens_per_s
    # the plan's 512 sequences of 8,192 tokens in that step
    assert by_name.tokens_per_s * by_name.step_time_s == pytest.approx(512 * 8192, rel=1e-12)


@pytest.mark.parametrize("model, cluster, plan, field", [
    (5, CLUSTER, PLAN, "model"),
    ("llama3-70b", 5, PLAN, "cluster"),
    ("llama3-70b", CLUSTER, {"groups": []}, "plan"),
])
def test_simulate_heterogeneous_refuses_other_types_naming_the_field(model, cluster, plan, field):
    with pytest.raises(InputError) as err:
        simulate_heterogeneous(model, cluster, plan)
    assert err.value.field == field
