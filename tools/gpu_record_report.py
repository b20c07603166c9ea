"""Print a recorded GPU measurement beside the cost models, as markdown tables.

``python tools/gpu_record_report.py tests/data/gpu_h200 --cluster hgx-h200``: the GEMM grid's
measured / predicted ratios by dtype, each measured training step against ``simulate``, and
each profiled step's device time per kernel category against the cost models
(``paraplan.measure.gpu_record``). The tables in docs/accuracy_training.md ("One H200 at hand")
are this script's output.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hardware_specs.catalog import efficiency_for_cluster, load_cluster  # noqa: E402
from paraplan.measure.gpu_record import category_table, gemm_table, load_record, step_table  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    parser.add_argument("--cluster", default="hgx-h200", help="catalog system of the GPU measured")
    args = parser.parse_args()
    record, cluster = load_record(args.folder), load_cluster(args.cluster)
    overhead = efficiency_for_cluster(cluster).kernel_overhead_s

    print("| GEMMs | count | measured / predicted: median | p10 | p90 | within 10% |\n|---|---|---|---|---|---|")
    g = gemm_table(record, cluster)
    for (dtype, large), x in g.groupby([g["dtype"], g["flops"] >= 2e11]):
        r = x["ratio"]
        print(f"| {dtype}, {'>=' if large else '<'} 0.2 TFLOP | {len(x)} | {r.median():.3f} | {r.quantile(.1):.3f} | "
              f"{r.quantile(.9):.3f} | {(r.sub(1).abs() <= 0.1).mean():.0%} |")

    print("\n| run | measured step | predicted | error |\n|---|---|---|---|")
    s = step_table(record, cluster)
    for _, r in s.iterrows():
        print(f"| {r['name']} | {1e3 * r['measured_step_s']:.1f} ms | {1e3 * r['predicted_step_s']:.1f} ms | "
              f"{100 * r['rel_error']:+.1f}% |")
    print(f"| mean absolute | | | {100 * s['rel_error'].abs().mean():.1f}% |")

    c = category_table(record, cluster)
    if not c.empty:
        print("\n| run | category | measured device time | launches | predicted | of which per-kernel overhead | "
              "kernels priced |\n|---|---|---|---|---|---|---|")
        for _, r in c.iterrows():
            pred = r["predicted_s"]
            text = "" if pred != pred else f"{1e3 * pred:.1f} ms"
            ovh = "" if pred != pred else f"{1e3 * r['predicted_kernels'] * overhead:.1f} ms"
            kernels = "" if pred != pred else f"{r['predicted_kernels']:.0f}"
            print(f"| {r['run']} | {r['category']} | {1e3 * r['measured_s']:.1f} ms | {r['measured_launches']} | "
                  f"{text} | {ovh} | {kernels} |")
    if not record.launch.empty:
        print("\n| launch mode | us per kernel |\n|---|---|")
        for _, r in record.launch.iterrows():
            print(f"| {r['mode']} | {1e6 * r['seconds_per_kernel']:.2f} |")


if __name__ == "__main__":
    main()
