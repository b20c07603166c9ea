"""How long a wide range search takes, and how much memory it holds (issue 18: DeepSeek-V3 over
1,024-4,096 GPUs took 123 s and 13 GB; the target is < 10 s and < 2 GB).

Run: ``python benchmarks/range_search_speed.py [--json] [--workers W] [--case NAME]``. The
issue's case (gbs4096, bf16) is judged against the target: the table prints it and "met" or
"NOT MET" (wall time, and the larger of the search's and any worker's peak RSS), and the script
exits 1 when it is not met; the other cases have no target.

Each case runs in a fresh process (so peak memory is that search's own): ``wall_s`` is the
whole ``planners.plan`` call (enumeration, chunked scoring, the kept plans' table, event-level
re-ranking, stage assignment, explanation); ``cpu_s`` the CPU seconds of the process and its
scoring workers (on a shared machine, less sensitive to other processes than the wall time);
``peak_rss_gib`` the largest resident set of the search process, ``worker_peak_rss_gib`` of
any one forked worker (their pages are mostly shared with the parent). The machine's load
average at the start is printed with each case.

Cases:
  deepseek-v3-1024to4096-gbs4096: 16.8M-token batch (4096 x 4096-token sequences), bf16.
  deepseek-v3-1024to4096-gbs15360: DeepSeek-V3's own batch (15360 sequences, DeepSeek-V3
      technical report, arXiv 2412.19437, section 4.2), bf16: 26 million configurations.
  deepseek-v3-1024to4096-gbs4096-bf16+fp8: both GEMM dtypes.

Measured (2 cores, 2026-12-01; plan tables byte-identical before and after): gbs4096, before the
memory lower bound and the 64k-row scoring calls, 48.6 s wall, 80.6 CPU s, 0.88 GiB (load 1.2);
after, 36.3 s wall, 62.6 CPU s, 0.88 GiB (load 0.6). Back to back at a load average of 6.7:
254 -> 199 s wall, 104.7 -> 73.8 CPU s. bf16+fp8 (13.5 M configurations), load ~5: 256 -> 244 s
wall, 183.9 -> 123.1 CPU s, 0.88 GiB (workers 1.2 GiB). gbs15360 (26 M configurations) was not
timed again.

Then (2026-12-01, later) the largest stage's static memory as a second lower bound
(``stage_static.static_peak_bytes``) and timing only the fitting rows a chunk can keep, lowest
step-time floor first (``simulator.step_bounds``, ``planners.time_pruning``: 1.06 M of the 2.34 M
fitting rows timed, counting the kept plans' re-scoring): gbs4096 back to back with the code
before, at load averages of 2.0-4.8 (other agents on the 2 cores), 77.1 and 79.6 CPU s before,
67.2 and 70.6 after; wall 110-115 s before, 112 and 52 s after (the wall time follows the load
here); 0.90 GiB (workers 1.07 GiB). One process (``workers=1``), the two run side by side:
57.8 -> 52.5 CPU s. The rest, one process: the per-stage memory model and its memory search
(~24 s; every row that passes the bounds needs it, since the search reports how many fit),
timing the kept rows (~8 s), the exact DAG makespans of the rows that can rank (~6.5 s),
the step-time floors (~4 s), the memory bounds (~2.5 s), the space (~2.5 s). The < 10 s target
is not met.

Then (2026-12-02) the pipeline lower bound proven for every schedule (``simulator.pipeline.bound``,
issue 18; the former one exceeded the exact makespan on ZB-H1/H2, ZB-V and DualPipe rows):
gbs4096 back to back with the code before, load average 2.7: 64.6 CPU s before, 64.2 after
(wall 58.4 and 40.2 s); same best plan.

Then (2026-12-02, later; plan tables byte-identical, ``tools/plan_snapshot.py`` on this case and
on four smaller dense and MoE searches, with and without a GPU range or the memory search):
1F1B's in-flight sets by their closed form min(m, p - s) (the search simulated 362 flushes for
them), the hybrid-sharding rules once per (tp, dp*cp) pair (the space: 1.5-2.9 -> 0.4-0.5 CPU
s), rows the search leaves over the limit at their first or last stage dropped before the rest
of the per-stage model (``stage_memory.memory_parts(drop_over_bytes=...)``, in place of the
largest static stage's bound, which cost 5 CPU s; the offload search settles its rows the same
way first), the dynamic rows' keys by hash tables. Back to back with the code before (main with
the bound above), load averages 3.2-4.6: one process 47.3 and 49.4 -> 38.9 and 41.0 CPU s (wall
49.5 and 50.8 -> 40.0 and 51.1 s), 1.12 -> 1.11-1.12 GiB; two processes (the default) 62.6 ->
50.4 CPU s, 94.5 -> 75.6 s wall, 0.90 -> 0.63 GiB (workers 1.07 -> 1.05 GiB). Where one
process's CPU seconds go (timers around the phases, load ~3.8, before -> after): the per-stage
memory model 21.8 -> 18.7 s, of which its search for the fewest recomputed / offloaded layers
9.7 -> 8.6 (every row that may fit needs it: the fitting count and the kept rows' memory depend
on it, and no two rows of a chunk share their stages' inputs); the largest static stage's bound
5.1 -> 0 (the end stages, 1.4 s, are in the model's figure); timing the kept rows 7.9 -> 7.2;
the exact DAG makespans 4.6 -> 4.1; the step-time floors 3.5 -> 3.3; the kept plans' table 3.8
-> 3.2; branch and bound 1.5 -> 1.3; the memory lower bound 0.7 -> 0.6; the space 1.5 -> 0.4;
total 50.5 -> 39.9. The < 10 s target is not met: what is left is the memory search's row-by-
stage work and the step model's pipeline pass (``simulator/step_pipeline.py``) on the rows timed.

Then (2026-12-02, later; plan tables byte-identical, ``tools/plan_snapshot.py`` on its five cases
against main before and after merging it): the exact DAG makespans swept level by level over
contiguous slices (the ops renumbered by level) and memoised on the rows' op durations (the
search, its refinement rounds and the kept plans' table sweep the same flush for configurations
the pipeline cannot tell apart; ``makespan._memo_flush``), and the distinct dynamic rows keyed by
packing their whole-number columns into one integer. Back to back with main's code (main at
79383de / bb491ee), phase timers in one process, load ~2.5: all ``flush_makespan_s`` calls 6.07
-> 2.50 CPU s, the exact rows' evaluation 6.72 -> 2.96, the kept plans' table 4.05 -> 2.67, the
distinct dynamic rows 1.06 -> 0.62 (both versions on the same batches); total 49.6 -> 39.3 (the
other phases' code is unchanged and moved with the load). The benchmark itself, back to back,
load 1.1-3.9: two processes (the default) 54.3 -> 48.0 CPU s (54.6 -> 48.1 s wall, 0.60 ->
0.63 GiB, workers 1.06 GiB; an earlier pair at load 2.6-4.4: 57.7 -> 50.2 CPU s). One process
run back to back is noisier than the gain on this shared machine (main 40.8, 47.1, 40.8 CPU s
against 39.4, 47.2, 45.6), so main and this code were run side by side, twice (same load for
both): 45.4 -> 42.2 and 53.5 -> 50.0 CPU s (-7%), 1.13 GiB. Where one process's 39.3 CPU s go now: the per-stage memory
model 19.1 (its search 9.2: 1,376 bisection probes over 107 M stage places; the end-stage check
1.3; the stage cells 3, the static parts 2.4), timing the rows that can rank 7.4 (the pipeline
pass: cell durations, split counts, the flush's lower bound), the step-time floors 4.2, the
exact rows 3.0 (2.5 of it the DAG sweeps, now mostly per-level overhead at ~12 rows a call),
the kept plans' table 2.7, the bounds and the space ~1.5. The < 10 s target is not met; what
would reach it is not computing the memory search's bisection on rows that are never timed (the
fitting count does not need it: a row that fits recomputing every layer fits, an offloading row
fits iff it fits offloading all it may, up to its host memory), which needs memory lower bounds
for the pruning rules and the smallest-memory row, and counts for the floors.

Then (2026-12-02, later; measured before building that, main at d97c803, one process, load
1.3-1.5): the memory search is a smaller share than the line above supposed, and deferring it
cannot reach the target. Side by side with timers around ``fewest_that_fit``: 7.1 and 7.9 of
33.4 and 36.4 CPU s (21-22%). Under cProfile (36.2 s): ``fewest_that_fit`` 7.6, of which the
bisection's probes 3.0 (200 bisections over 17.1 M elements, stages for the recomputation
search, rows for offload; probes per round 10.36 M, 7.46 M, 0.81 M, 0.29 M, 0.11 M, 0.04 M,
0.01 M: the linear guess settles 92% of them in its two probes, the least a check of
"fits at g, not at g - 1" needs), the starting totals (nothing recomputed, all offloaded, end
stages) ~2.2, re-evaluating the chosen counts 1.2 (``pd.factorize`` in ``shared_dynamic``
1.25 over all of it). Of the fitting rows the search changed (recomputation counts or offload:
844 k of 2.54 M fitting, counting the kept plans' re-scoring), 516 k (61%) are timed, so
searching only timed rows would skip at most ~39% of ~6.5 s, ~2.5 CPU s, before the cost of
running the stage model again on the 516 k timed rows: far from the < 10 s target, which
needs the timing (12.9 s, its pipeline pass 8.3), the rest of the stage model (~9 s) and the
floors (3.6) cut as well. Tried and dropped: keeping each accepted probe's dynamic parts in
place of re-evaluating them at the chosen counts (every ``memory_parts`` output bitwise the same
on four searches, plan tables identical), side by side 7.98 and 8.11 s in ``fewest_that_fit``
against 7.1 and 7.88: the masked stores cost what they saved (Megatron's decrement form leaves
the recomputation counts above the bisection's on many stages, which still need evaluating).

Then (2026-12-02, later; issue 18 part 2; plan tables byte-identical, ``tools/plan_snapshot.py``
on its five cases, by default and with ``--one-process``, against main before the change): in
one process the chunks are scored one after another, and a chunk no longer times the rows that
the earlier chunks' kept rows show cannot be among the whole search's kept rows
(``time_pruning.excluded``: each chunk used to time at least its own 200 k fastest, since it
keeps 200 k). Rows timed, counting the kept plans' re-scoring: 1.20 M -> 0.75 M of the 2.34 M
fitting rows (by chunk 265 k, 161 k -> 114 k, 127 k -> 103 k, 72 k; the kept table 200 k).
Side by side with main's code (same load, 6.3): 36.4 -> 34.4 CPU s, 140.7 -> 138.0 s wall,
1.12 -> 1.09 GiB; again after merging main (load 3.1): 36.1 -> 34.9 CPU s, 74.0 -> 72.0 s wall,
1.12 -> 1.07 GiB. Phase timers, side by side at load ~7: timing the rows 6.9 -> 4.6 CPU s, the
pruning rounds (``skippable``, ``next_to_time``) 1.3 -> 2.0 (more, smaller rounds), the exact
DAG makespans 2.9 -> 3.4, the memory phase unchanged (20.9 and 20.6, floors 3.5 of it): in all
35.4 -> 33.6. Rounds of 12.5 k rows in place of 50 k (fewer rows timed) were slower, side by
side at load 5: 34.3 -> 40.2 CPU s (each round refines and re-checks every timed and untimed
row); not kept. With two processes the chunks run in parallel and nothing changes. The < 10 s
target is not met, and cutting the timing cannot meet it: the memory phase alone is ~20 of the
~34 CPU s. It runs on every row that passes the memory lower bound (4.8 M of 6.76 M) because the
search reports how many configurations fit and the frontier needs every fitting row's memory;
what would reach the target is computing the per-stage model (and its search) only on the rows
that are timed, from a floor and a memory lower bound that need no stage model, with the fit
count then an interval ("at least the timed rows' count, at most the rows the bound passes")
or settled by a cheaper exact check (a row fits iff it fits at its search's extreme counts,
without the bisection). Not built in this round.

Then (2026-12-02, later; issue 18 part 2; plan tables byte-identical, ``tools/plan_snapshot.py``
on its five cases, by default and with ``--one-process``, against main at 162cfa5 before and
after merging main at 06189ed): the memory search's probes memoise each (shared stage, count)'s
dynamic parts, indexed directly by ``stage * (top + 1) + count`` (``stage_activations.
shared_dynamic``: 45% of a probe's distinct pairs were evaluated by an earlier probe on
1,024-1,536 GPUs, and no probe hashes its keys), and a batch with one (first, last) layer pair
and no layout string builds its stage cells from ``_layout_cells``' memo into preallocated flat
arrays (``stage_cells._flatten``). Phase timers, one process, back to back with main: the
search's dynamic parts 4.54 and 4.58 -> 3.99 and 4.00 CPU s, ``stage_cell_batches`` 1.63 ->
0.43. The benchmark back to back with main, load 2.4-3.4: one process 44.8 -> 41.0 CPU s (45.1
-> 42.6 s wall) and, the other order, 47.9 -> 46.1 CPU s (69.5 -> 64.1 s wall), 1.08 GiB both;
two processes (the default) 55.6 -> 54.2 CPU s, 62.0 -> 52.2 s wall, 0.63 -> 0.58 GiB (workers
1.06 GiB). Measured and not built: deduplicating the search's per-stage work by (shared stage,
static bytes) pairs, as idea (a) of the issue's note would, cannot pay: 67.5 M of the 70.8 M
stage places the search sees are distinct pairs (95%; the shared stages alone are 2.6 M), since
rows that share their dynamic parts differ in ZeRO, sharding and data parallelism, which set
the static bytes. Counting the fitting rows from the search's extreme counts without the
bisection (idea (b)) is exact only if a stage's memory is monotone in its recomputed layers,
which the model does not guarantee (recomputing a layer drops its kept activations, a
``kept - input`` difference, and raises the recompute buffer), and every fitting row's exact
memory and chosen counts still feed the step-time floors and the pruning rules. Where one
process's CPU time goes now (phase timers; 49.2 CPU s at a load of ~3, 28-29 s at lighter
load, the shares steady): the per-stage memory model 43% (its search 22%: the probes' dynamic
parts, stage totals and gathers; the static parts by run 4%, the end stages 3%, the distinct
dynamic rows 2%), the step model's timing of the rows that can rank 24% (the exact refinement's
rows included; its DAG sweeps run few rows a call, per-level overhead), the step-time floors
10%, the kept plans' table 7%, the space 5%, the pruning rounds 5%. The < 10 s target is not
met: no phase holds half of the time, so reaching it needs the per-stage memory model's work
(and the timing's) cut several-fold with every result bit-identical, which no change measured
here allows.

Then (2026-12-02, later; issue 18; plan tables byte-identical, ``tools/plan_snapshot.py`` on its
five cases, by default and with ``--one-process``, against main at af0f5ca): the kept plans'
table is built from what the chunks timed and refined (``Evaluated.unrefined``; ``Scored.timed``
and ``exact_outputs`` seed ``refine_exact``'s cache) instead of running the memory and step model
again on its ~200 k rows (the model is row-wise; a test compares the two frames); collective
times are computed once per distinct (bytes, group size, stride) (``cost_models.distinct``: 80.8 M
elements, 180 k distinct, of the floors and the timing); the memory search's probes read the
three dynamic parts a stage total needs (not the host copy) from a count-major memo index whose
store grows by doubling; branch and bound looks the untimed rows up in memory order
(``time_pruning.rank_among``: ~1 M unordered binary searches cost ~10x ordered ones); the
planner's memory phase skips the per-part outputs (``memory_parts(by_part=False)``). Phase timers,
one process, side by side with main (load 3.7), main -> this: the kept plans' table 4.40 -> 0.48
CPU s, the step-time floors 9.14 -> 7.00, timing the rows 8.82 -> 6.22 (the kept table's share
gone), the memory model 23.63 -> 21.07 (its search 11.33 -> 9.96), ``skippable`` 2.21 -> 1.35;
total 56.2 -> 48.4. The benchmark, one process, side by side with main, three times (load 3.2,
2.9, 4.1): 46.4 -> 41.7, 47.5 -> 41.0 and 53.7 -> 47.4 CPU s (wall 86.2 -> 79.9, 88.2 -> 81.6 and
100.8 -> 94.1 s; other agents shared the 2 cores), peak RSS 1.07 -> 1.12-1.14 GiB (the chunks' kept rows carry their outputs); two
processes (the default), back to back, load 2.8-3.1: 59.1 -> 50.5 CPU s, 67.9 -> 56.2 s wall,
0.58 -> 0.61 GiB (workers 1.06 GiB both).

Measured and not built: skipping rows by monotonicity in dp (a row over the limit at its given
counts with a larger-dp sibling over too: larger dp only shrinks the ZeRO-sharded states and the
in-flight sets) could spare few rows: of the 4.80 M rows the lower bound passes, 2.10 M are
dropped at an end stage and 2.69 M get the whole stage model, of which 2.36 M fit in HBM and only
0.34 M (13%) are over the limit. The fitting rows need the model: the search's counts feed their
floors, their memory the branch and bound's frontier rule, and the fitting count is reported.
Constant ``ConfigBatch`` columns as broadcast views kept through ``take`` (no gather of the 54
fields' unsearched ones): 47.33 vs 47.16 CPU s side by side, not kept. Where one process's 48.4 CPU s
(load 3.7) go now: the per-stage memory model 21.1 (its search 10.0, the static parts by run 2.3,
the end stages 2.0, the distinct dynamic rows 1.0), the step-time floors 7.0, timing the rows
that can rank with their exact DAG makespans 6.2, branch and bound 1.8, the kept table 0.5. The
< 10 s target is not met.

Then (2026-12-02, later; issue 18 part 2): the redesign the paragraphs above point to, built,
measured and not kept. The per-stage memory model and its search ran only on the rows the
branch and bound picks for timing: each chunk's rows the memory lower bound passes (4.8 M) got,
without the stage model, a step-time floor good for any counts the memory search may choose
(each layer's recomputation at the cheapest its row could run it, nothing offloaded; the first
and last stages' parameters from the layout's end stages by ``stage_static``'s own formula) and
the lower bound as their memory in the pruning rules (both at most the row's own figures, so
``time_pruning``'s rules stay sound); a picked row went through the stage model first and left
the search if it did not fit, and the fit count became a proven interval (rows shown to fit;
at most the rows not shown over the limit). The plan tables stayed byte-identical
(``tools/plan_snapshot.py``, five cases, by default and with ``--one-process``; only ``fit`` and
``pruned.memory`` changed: this case "between 0.57 M and 3.55 M fit" in one process, 1.05 M and
3.05 M in two, against 2.34 M exact). It was slower. One process, side by side with main, twice
(load 3.0-4.8, then 3.5-4.1): 38.7 -> 55.1 and 37.9 -> 51.1 CPU s, 117.0 -> 142.0 and 112.9 ->
133.5 s wall, 1.13 -> 1.43 GiB. Why (cProfile with a CPU-time clock, both side by side at load
3.3-4.5, main 49.6 CPU s, the redesign 71.3): the stage model fell from 19.3 to 11.3 CPU s, but
the floor costs nearly what the model does per row (2.9 against 4.0 us; main floors only the
2.34 M fitting rows, 8.2 s, the redesign all 4.8 M, 13.7 s), the model costs more per row on
the scattered rows picked (6.3 us: they share fewer distinct stages than a whole chunk), and
~1.25 M of the ~1.8 M rows modelled did not fit (fast on paper, too large: no floor rules them
out, so they must be modelled). With the weaker floor (it falls by up to 30% on full-
recomputation rows, median unchanged) and memory (the lower bound, for the frontier rule) the
branch and bound needed 35 refinement rounds instead of 11: timing 7.0 -> 12.8 CPU s, the
refinement 8.4 -> 14.7 (the exact DAG makespans 6.4 -> 9.1), ``next_to_time`` 0.4 -> 6.7,
``skippable`` 0.8 -> 4.9. Deferring the stage model cannot pay until a floor is several times
cheaper per row than the model, and a memory bound with activations rules out the rows that do
not fit before they are floored or modelled. Also seen in ``memory_search.fewest_that_fit``: a
row's fit verdict does not depend on the bisection (a row whose extreme counts, every layer
recomputed or all it may offloaded, fit always keeps a count that fits, since the bisection
moves only to probes that fit; the final sum in ``PARTS`` order aside), so an exact count
needs only the extreme counts, but still the stage model on every row the bound passes. Where
main's time goes (its cProfile above): the stage model 39% (its search 20%), the floors 17%,
the refinement 17%, timing the rows 14%. The < 10 s target is not met.

Then (2026-12-02, seventeenth round; the memory model now also carries the gradient-buffer dtype
and FP8-only parameters, the recompute modules mlp / moe): one process on an idle machine (load
0.2), gbs4096: 27.3 s wall, 28.1 CPU s, 1.14 GiB peak, 2,343,685 of 6,763,986 configurations fit
(the same count as before: the default megatron-core stack's bf16 gradients stay fp32); best
plan n=4096 dp=2048 tp=2 ep=128 mb=1 zero=3 full bf16. The < 10 s target is not met; < 2 GB is.

Then (2026-12-02, later; the per-stage memory model, issue 18; the plan table byte-identical: the
whole kept table of this case in one process written with 17 significant digits, and
``tools/plan_snapshot.py`` on its five cases, against main at 7d63375): the rows kept after the
end-stage check read their first and last stages' static parts from the check (only the middle
runs are computed again: ``static_parts_by_run(ends=...)``); the offload search reads a row's end
stages once a probe and its other stages only where both ends fit (its peaks looked every end
stage up twice); the memo of the search's dynamic parts stores a key's parts side by side (one
gather a key); ZeRO's divisors once per shard group (``memory.zero_divisors``) and constant
columns as one value in ``static_parts``; the planner's total-only call reads the peak without
its argmax stage. The benchmark, one process (``--workers 1``), side by side with main's code
three times: 55.2 -> 52.8 CPU s (131.6 -> 128.7 s wall, load 1.9-4.1), 58.0 -> 56.9 (57.8 -> 56.6
s, load 2.4; without the offload change), 70.5 -> 67.9 (71.4 -> 69.0 s, load 1.0-1.6); peak RSS
1.12-1.17 GiB both. On review the end-stage reuse, ``zero_divisors`` and the constant-column path (a second
path through ``static_parts_by_run`` and ``model_state_bytes``) were taken out again: 2-4% of
CPU, inside this VM's run-to-run noise, did not pay for them; the offload search's single read
of the end stages and the memo's side-by-side store stay. ``memory_parts`` alone on 18 of this case's 105 planner calls (the same
batches, outputs hashed identical), four rounds side by side: 20.4 -> 18.4 CPU s (-10%); under
cProfile 5.20 -> 4.52 s before the offload change. On this VM the CPU seconds of one thread
exceed its wall time at times and move by +-20% run to run, more than most of these changes.
Where the memory model's time goes (those 18 calls): the search 50% (its memo: 20.4 M lookups,
of which 14.2 M miss yet are only 0.86 M distinct (shared stage, count) pairs, each requested by
~16 batch stages that differ in their static bytes; the lookups by origin: the recomputation
search's count-0 totals 4.3 M, its probes 4.5 M, its chosen counts 3.7 M; the offload search's
peaks 4.9 M (before the change above), its chosen counts 1.4 M), the static parts and the end
stages ~20%, the stage totals, cells and distinct rows the rest. Outside the memory model the
collective times' deduplication (``distinct.once_per_distinct``: 79.5 M elements over 2,766
calls, its radix over 10^8 for all but 11 M of them, so no direct-addressed table replaces its
hashing) costs ~7% of the search. The < 10 s target is not met: the memory model is still ~40%
of the search, and it and the other phases are sums of many vector passes over the rows and
stages, no one function over ~15% of the time.

Then (2026-12-02, later; measured, nothing built): the memo's 14.2 M misses are already evaluated
once per distinct (shared stage, count) (``shared_dynamic`` marks each missing key in its index
before evaluating: 0.86 M evaluations), so deduplicating them again saves nothing. Answering a
shared stage's ~16 batch stages by one ``searchsorted`` on their budgets (limit less static
bytes) in place of bisecting each cannot be made bit-identical: a stage fits iff
``f(((static + activations) + recompute buffer) + offload buffer) <= limit`` (``f`` the total
with the allocator's allowance, each operation rounded), and the parts trade off as layers are
recomputed (DeepSeek-V3 on 256-512 GPUs, bf16 and fp8: of 737 k adjacent evaluated counts of a
shared stage, the sum of the parts never rose with more layers recomputed, but a part rose in
282 k, the recompute buffer), so the rounded fit test need not be monotone in the count for a
given static figure, and the bisection's answer is then not the smallest fitting count a
search by budget returns. Two exact micro-changes (the recomputation probes reading the static
bytes from a copy in their own order; one gather of the memo index after filling the misses in
place of a masked store) measured within noise, one process, back to back both orders, timers
around ``fewest_that_fit``: 11.43 -> 11.16 and 13.63 -> 13.70 CPU s (51.8 -> 54.0 and 62.7 ->
63.9 s in all; load 0.2-0.9): not kept.

Then (2026-12-03; issue 18 part 2; measured, nothing built): the memory search's bisection only on
the rows that are timed, every other row's fit settled at its search's extreme counts. Not exact: of
the 2,696,078 rows that reach ``fewest_that_fit`` in one process, the extreme counts (the enumerated
ones; an offloading row's "all it may") fit 2,361,976 in HBM, the search 2,343,685: 18,291 rows fit
in HBM with the fewest layers offloaded that fit, yet the host memory those layers take (per node,
``host_fits``) is over, and the host copy grows with the layers offloaded, so their verdict needs
that count, which only the bisection gives. (The HBM verdicts agreed on every row here, the
decrement form's counts above a stage's need included, but the model does not guarantee it: the
stage parts are not monotone in the count.) Nor can it pay: which rows are timed is known only from
the branch and bound, which needs every fitting row's memory (the frontier and per-count rules) and
floor first, so the rows not yet searched would take sound stand-ins: the memory lower bound (the
memory at the search's counts is not bounded below by the memory at every layer recomputed, the
parts not being monotone), and a floor with one layer offloaded (the floor reads the recomputation
counts only as whether a row recomputes every layer, ``step_bounds``, but an offloading row's
offloaded layers one by one, each at its copies' cost); the redesign above measured such stand-ins
at 35 refinement rounds instead of 11. What the bisection costs bounds the gain even before that:
timers, one process, load 3.0-4.0, 58.8 CPU s in all (93.3 s wall): ``fewest_that_fit`` 12.8, its
``_bisect`` 5.1, the planner's ``memory_parts`` 28.0, the floors 7.6, timing the rows 7.5; cProfile
(81.4 CPU s under the profiler): ``fewest_that_fit`` 16.6, of which ``_bisect`` 7.4, re-evaluating
the chosen counts 1.1, the totals with nothing recomputed 2.1 and with all offloaded 2.4 (the
extreme check keeps these). Rows the search changes and the share of them timed (counted by hooks,
rows handed to ``_time_rows``: 266 k, 115 k, 104 k and 73 k by chunk): the recomputation search
548,046 rows over 15.5 M stage places, 214,742 rows (6.1 M places, 40%) timed; the offload search
501,256 rows over 8.7 M places, 174,254 (3.2 M places, 37%) timed. Skipping the bisection and the
re-evaluation on the other ~60% saves at most ~0.6 x (5.1 + ~0.8) ~ 3.5 of 58.8 CPU s (6%), before
the stage model runs again on the ~0.39 M searched rows picked for timing (~4-6 us a row on
scattered rows, as the redesign measured) and the extra rounds: under the 10% that would pay for a
second path through the search. The < 10 s target is not met.

Then (2026-12-03; issue 18: factoring the work by data parallelism, counted before building; main
at 3c34688, one process, hooks on the phases' inputs). For fixed tp, pp, cp, ep, vpp, micro-batch,
ZeRO, recompute, schedule and stack fields the GPU count enters only through dp. Rows against
distinct keys of every ``ConfigBatch`` field but dp: the rows the memory lower bound passes (the
per-stage model's input) 4,796,667 against 2,852,514 (1.68 rows a key); the fitting rows (the
floors') 2,343,685 against 1,495,584 (1.57); the rows timed 558,884 against 411,739 (1.36). So
even if all the work that does not depend on dp were free, the memory phase could shrink at most
1.68-fold and the floors and timing 1.57- and 1.36-fold: ~39 CPU s -> ~24 at best, above the
~20 CPU s that < 10 s on 2 cores needs. What the model already shares is shared: the dynamic parts
once per distinct dp-free row (``distinct_dynamic_rows``) and per (shared stage, count)
(``shared_dynamic``), the per-layer times once per run of the layer key. What is left depends on
dp: the static bytes (ZeRO over the dp*cp ranks: a + b/dp per stage, 88% of these rows have ZeRO
1-3) and, for 2,181,384 rows (45%), the in-flight sets min(m, p - s) with m = gbs/(dp*mb) < pp;
and the memory search's fit test is per (row, stage) on those bytes. The memory outputs (peak,
host memory, parameters, chosen counts, end-stage figures) of a key's rows agree across dp on
1.09 M rows (4.80 M rows, 3.71 M distinct (key, outputs) pairs, the rows dropped as over the limit
included), of which those known to agree before the model runs (ZeRO-0 or ZeRO within a node,
HSDP, and m >= pp) are 862,635 rows in 539,472 keys: 323,163 rows (6.7% of the memory phase,
~1.3 of its ~20 CPU s) could copy a sibling. Not built: the floors and the step time read dp in
every row (its data-parallel collectives and m), so no row's timing can be copied across GPU
counts either.

Measured there, and built: with two processes (the default) the four chunks of this case were
scored two at a time, 11.9, 12.3, 9.7 and 4.8 CPU s (2.0 M, 2.0 M, 2.0 M and 0.76 M rows), each
chunk timing at least its own 200 k fastest rows, since it did not see the others' kept rows
(``time_pruning.excluded`` worked only in one process). Now ``score_space`` scores the chunks one
after another whatever the workers, each chunk's memory phase and timing split over them
(``evaluate_space(workers=...)``), so every chunk after the first skips the rows the earlier
chunks' kept rows rule out. Plan tables identical (``tools/plan_snapshot.py``, five cases, by
default and with ``--one-process``, against main; this case's whole 200,012-row kept table
written with 17 significant digits, byte-identical). The benchmark, one run at a time
alternating with main (other agents' jobs on the 2 cores, load 2.6-4.9), four rounds: main 42.7,
39.1, 42.3, 41.5 CPU s, this 38.9, 37.3, 39.4, 39.8 (-6%); side by side once (load 3.3): 44.2 ->
40.7 CPU s; wall main 51.1, 29.8, 43.1, 48.0 s, this 47.8, 37.1, 40.3, 42.7 s (the load decides);
peak RSS 0.61 -> 1.2 GiB (the parent now holds a chunk's fitting rows, as in one process; workers
1.07 -> 1.05 GiB). On an idle machine main took 24.5 s wall, 39.0 CPU s (load 0.2; its wall bound
is one worker's two chunks, 21.6 CPU s); this one's parent runs the branch and bound's refinement
rounds alone (~9 CPU s a search), so its wall should fall to about 9 + 22/2 s, not measured here
without load. Tried and reverted: starting the next chunk's memory phase in its workers while the
parent times a chunk (more processes than cores): 39.5-43.0 CPU s against 37.3-39.8 for the above,
no wall time gained (39.3-54.3 s against 37.1-47.8), 1.4 GiB. The < 10 s target is not met, and
factoring by dp cannot meet it.

Then (2026-12-03; issue 18 part 2; plan tables byte-identical, ``tools/plan_snapshot.py`` on its
five cases, by default and with ``--one-process``, against the code before, after each change).
Two changes. (1) The next chunk's memory phase runs while this process times and refines the
current one (``vectorized.start_evaluation`` / ``Evaluation``: the memory tasks go one at a time
to a pool of workers - 1 forked processes and, once it is done timing, to this process,
``vectorized._Shared``; the chunk is timed here alone meanwhile on 2 CPUs): before, the parent's
timing and refinement (~7 of the ~34 CPU s) left one core idle. Where the wall time goes now
(phase timers, load 0.5, 18.9 s): the space 1.0 s and the first chunk's memory phase 3.8 s (both
processes), then both cores busy until the last chunk's timing (1.1 s) and the kept table (0.3 s)
run alone; CPU 19.2 s in this process and 14.8 in the workers. (2) The step-time floor
(``simulator.step_bounds``) adds ``pipeline.bound``'s start and, on the fused schedules, drain
chains before each stage (``stage_cells.StageChains``: the cells each stage's chains cross, per
layout; on one-path schedules only the last stage of each distinct count vector can hold the
largest sum): it was m x the busiest stage's work alone, a median 0.76 of the step model's lower
bound here (tenth percentile 0.37, the bubble of deep pipelines with few micro-batches), now 0.997
(0.80). Rows timed 561,300 -> 498,186 (by chunk 266,676, 116,213, 105,059, 73,352 -> 241,141,
100,055, 97,183, 59,807: the floor is compared with the kept rows' estimated times, which stay
above the lower bound by a median 8%), refinement rounds 11 -> 8; one process back to back (load
0.6-0.8): the floors 3.52 -> 3.86 CPU s, timing and refinement 7.65 -> 6.59. The benchmark,
gbs4096, alternating with the code before: on a quiet VM (load 1.1-1.5) 21.7, 21.1 -> 18.5, 18.4 s
wall, 34.5, 33.9 -> 33.8, 33.8 CPU s (after (1) alone), again after both (load 0.4-1.0) 26.4 ->
21.2 s, 38.7 -> 36.3 CPU s (the next pair, 24.9 -> 39.0 s and 37.9 -> 39.3 CPU s, ran into another
agent's job starting, load 1.4 -> 2.7); peak RSS 1.14-1.20 -> 1.25-1.31 GiB (workers 1.02-1.07 ->
1.09-1.21: the parent holds one chunk's fitting rows while the next is scored). With another
agent's job holding one core (load 1.8-2.6) the overlap has no core to use: 34.3, 34.7 -> 34.4,
35.4 s wall, 34.8, 35.7 -> 35.2, 36.0 CPU s. One process, side by side (same load, 2.6-2.9): 34.4
-> 34.1 and 32.2 -> 31.9 CPU s (62.7-66.9 s wall), 1.12-1.14 -> 1.05-1.07 GiB. Measured, not kept:
space chunks of 1 M rows (in place of 2 M) 39.4 against 35.2 CPU s and 23.8 against 19.7 s wall, 3
M rows 35.3 CPU s, 20.1 s, 1.61 GiB. Two processes cost ~4 CPU s more than one (31.8 user + 4.5
sys against 28.4 + 2.0; minor page faults 1.23 M against 0.68 M): not the results' transfer (342
MB pickled, 0.17 CPU s to pickle and unpickle) nor the forked workers' cold caches (the memory
phase's memoised layouts cost < 0.1 s to refill), but page faults and two cores sharing memory
bandwidth; glibc kept from returning memory (``MALLOC_MMAP_THRESHOLD_`` /
``MALLOC_TRIM_THRESHOLD_`` 4 GiB) cut the system time 3.5-3.9 -> 2.6-2.7 s with two processes (2.5
-> 0.9 s with one) at 1.48 GiB peak; a process-wide allocator setting, not built. The < 10 s
target is not met: the wall time is now about the space (1 s) plus half the CPU time plus ~1.4 s
alone at the end, so < 10 s on 2 cores needs ~17 CPU s, half of today's; < 2 GB is met.

Then (2026-12-03, later; issue 18; plan tables byte-identical: ``tools/plan_snapshot.py`` on its
five cases, by default and with ``--one-process``, against main at 64817e2: plans, frontiers
and stage layers the same, only this case's ``fit`` and ``pruned.memory`` differ; with the new
``--count-fitting`` the whole JSON is main's; this case's whole 200,009-row kept table hashed
identical in one and two processes). The rows of a later space chunk that the earlier chunks'
kept rows rule out skip the per-stage memory model (``memory_screen.Screen``): each bound-passing
row of chunks 1-3 gets a floor for any memory search outcome (``step_bounds.
step_time_floor_any_memory_s``: the flush with the cheapest recomputation, nothing offloaded,
no ZeRO or data-parallel traffic, no tail or optimizer step; computed once per configuration
but for its ZeRO stage and shard group, ~6 rows each) and ``time_pruning.excluded`` with its
memory lower bound against those kept rows. Measured first (hooks, one process): of the fitting
rows of chunks 1-3, 82%, 88% and 97% are excluded by the earlier chunks' kept rows with their
own floor and memory, still 70-85% with the memory lower bound and 60% of the floor; the stand-
in floor is a median 0.80-0.98 of the floor (four sampled searches, never above it). The screened
rows stay open rows of the chunk's branch and bound by their stand-ins, so a row is left out only
once shown skippable (the stand-ins are at most its own floor and memory); a prototype that left
them out unchecked (22.3 against 29.7 CPU s) could not show that: 184,649 of 537,678 screened
rows of chunk 3 failed the per-GPU-count time half (few rows of a count modelled, its best time
slow). Now they are modelled when no modelled row is left to time, most promising first
(``next_to_time``): 50,000 rows of chunk 3 (36,081 fit), after which the rest are skippable. Rows
given the per-stage model (past the memory lower bound) 4.80 M -> 2.02 M (of chunks 1-3's 3.38 M,
2,828,837 screened, 50,000 of them modelled late; chunk 0's 1.42 M all); 2,778,837 never checked, so the search reports "at least 1,022,646 fit" (the exact 2,343,685 with
``--count-fitting``). With two processes the next chunk's first tasks start before this chunk's
kept rows exist; every row is screened again by the last screen, so both give the same rows and
counts. The benchmark, alternating with main (other agents' jobs on the 2 cores, load 3.4-4.7):
43.3, 43.6 -> 36.5, 38.2 CPU s, 51.1, 53.6 -> 41.9, 45.4 s wall, peak RSS 1.25-1.27 -> 1.19-1.22
GiB (workers 1.15-1.18 -> 1.13-1.17); one process back to back (load ~2): 31.3, 32.2 -> 25.9,
25.9 CPU s, and side by side (same load, 4.3): 39.8 -> 31.4 CPU s (86.6 -> 69.5 s wall). Where
one process's CPU goes now (cProfile, load ~3, 34.2 s under the profiler, before the per-
configuration stand-in): the per-stage memory model 11.2 (17.7 before; chunk 0's 2 M rows have
no earlier kept rows to be screened by), timing and refinement 9.8, the floors 3.6, the stand-
in floors 4.1 (~1.5 after). Measured, not kept: space chunks of 1 M rows (earlier screens, weaker
ones) 32.5, 32.7 against 28.2, 27.6 CPU s. The < 10 s target is not met (~17 CPU s needed).

Then (same day; same checks: plan_snapshot's five cases by default and ``--one-process`` against
main, plans, frontiers and stage layers identical, the two modes' JSON identical to each other,
fit counts included; ``--count-fitting`` identical to main's whole JSON). The first chunk, which
no earlier chunk's kept rows screen, screens itself (``memory_screen.seed_screen``): its rows past
the memory lower bound whose stand-in floor is above the quantile that keeps three times the
rows kept (at least a quarter; placed on a fixed 64k-row sample) wait as screened rows. Measured
first (hooks): 827,413 of its 1,418,433 such rows are skippable by their stand-ins against its own
timed rows at the end, and 99% of the others are within its 585 k lowest stand-in floors. Now
818,490 are screened, 4,089 modelled late (one round). In all, the per-stage model runs on
1,203,429 rows (4,796,667 on main), 54,089 of them late; 3,593,238 are never checked ("at least
745,472 fit"). One process side by side with the commit before (load 3.9): 29.8 -> 28.6 CPU s.
Measured, not kept: the per-layer times memoised across calls per (dtype, layer key) within a
search (one process side by side, load 3.8: 28.8 -> 28.5 CPU s, inside the noise). The benchmark,
alternating with main (load 3.1, then 2.7 -> 4.1 as another agent's job started): 40.0, 42.2 ->
32.5, 37.6 CPU s; wall 37.7 -> 21.2 s in the first pair, 59.3 -> 69.7 s in the second (the load
decides); peak RSS 1.24-1.32 -> 1.17-1.23 GiB (workers 1.09-1.18 -> 1.10); a third pair after the
screened rows were put in row order (load 3.5): 41.5 -> 33.6 CPU s, 35.7 -> 29.0 s wall, 1.29 ->
1.18 GiB. One process, that code (load 2.9): 26.0 CPU s. The < 10 s target is not met on this
shared VM; < 2 GB is.

Then (2026-12-03, session 25; plan tables and the whole JSON identical, fit counts included:
``tools/plan_snapshot.py`` on its five cases, by default and with ``--one-process``). A memory
task cuts its ``ConfigBatch`` once, to the rows it models (it first cut it to the 4.85 M rows
the lower bound passes: ~0.45 CPU s), and the exact DAG sweeps gather a level's two predecessor
lists with one call, with the ops' depths found level by level from 24 stages (the 774 sweeps
and 112 level builds of a search 2.04, 2.18 -> 1.76, 1.77 CPU s alternating with main, load
3.2-3.7). gbs4096, two processes, alternating with main (load 2.8-3.7): main 39.1, 37.2, 38.9
CPU s, this 39.8, 37.1, 37.3; wall 47.2, 23.6, 26.4 against 46.4, 25.0, 33.9 s (other jobs on
the 2 cores decide it); 1.16-1.21 GiB (workers 1.05-1.15); one process (``--workers 1``),
alternating, load 4.5-5.0: main 29.8, 30.7 CPU s, this 29.8, 30.6. By phase ~0.8 of ~30 CPU s,
inside the run-to-run noise of the whole. Measured and not built, with numbers in
docs/search_speed.md: a lead chunk of the lowest floors over the whole space scored first (at
most ~10%), chunks 1-3 screening themselves by a floor quantile too (late-modelling rounds eat
the gain), the floor for any memory outcome with its row's ZeRO traffic (1.21 -> 1.05 M rows
modelled, its own cost 3.5 -> 10.5 CPU s), one sweep over the union of a call's flush DAGs
(slower). Even screened by the whole search's final kept rows, the stand-ins (that floor, the
memory lower bound) leave 674 k rows for the memory model (1.21 M today). The < 10 s target is
not met: the wall time is ~1.7 s + half the CPU time + ~2 s, so it needs ~12 CPU s, and no phase
holds more than a third of the ~30.

Then (2026-12-03, session 27; the ranked tables, GPU frontiers and memory frontiers above half the
best identical on ``tools/plan_snapshot.py``'s five cases): the search keeps the GPU frontier (a
count's fastest plan when it beats every smaller count's) instead of every count's fastest, and
the memory frontier of the plans with more than half the best tokens/s
(``time_pruning.FRONTIER_MIN_SHARE``), so a row beaten by a smaller count's best, or at most half
as fast as the best, needs neither the memory model nor timing for them. gbs4096, alternating
with the commit before (load 1.5-1.6): 18.7, 18.7 -> 16.4, 15.7 s wall, 32.2, 32.8 -> 28.6, 27.4
CPU s, 1.17-1.19 -> 1.06-1.11 GiB. Then the default ``max_plans`` 200,000 -> 50,000 (more than
any single-count search of the notebooks fits; both frontiers kept besides): 12.7 and 12.1 s wall,
21.3 and 20.9 CPU s, 0.94-0.99 GiB (load 1.1-1.2); one process 18.6 CPU s; bf16+fp8 (13.5 M
configurations) 19.7 s wall, 34.1 CPU s, 1.28 GiB. Not kept: the first chunk's seed screen at
0.10 / 0.15 of its rows in place of 0.25 (16.1 / 12.8 s wall against 12.0: the late-modelling
rounds cost more than the rows saved). The < 10 s target is not met (about 2.5 s over).

Then (2026-12-03, session 28; plan tables identical on ``tools/plan_snapshot.py``'s five cases,
by default and with ``--one-process``): with workers the next chunk's rows are built while this
chunk's memory tasks run (the worker had waited 0.41, 0.16 and 0.08 s on chunks 1-3's starts; now
0.01-0.03 s), and the branch and bound looks the screened rows up in memory order (``skippable``
+ ``held_by_row`` 1.66, 1.63 -> 1.12, 1.24 CPU s in one process). gbs4096 alternating with main,
load 0.6-1.7, nine pairs: main 10.5, 9.1, 9.6, 9.7, 9.8, 9.7, 9.8, 9.6, 10.0 s wall (16.3-18.2 CPU
s), this 9.7, 9.2, 9.4, 9.3, 9.3, 9.6, 9.6, 10.0, 9.3 s (16.4-17.7 CPU s; the first six with a
per-layer-times memo since reverted: no gain side by side, 13.7 -> 13.8 and 13.1 -> 12.9 CPU s in
one process); 0.95-1.05 GiB, workers 0.92-0.97. One process side by side (load 1.3-1.5): 14.4 ->
14.0, 13.7 -> 13.8, 13.9 -> 13.8 CPU s. Main itself ran under 10 s in 7 of the 9 (session 27 saw
12.1-12.7 s on a busier VM): < 10 s is met on a quiet VM, with ~0.3 s to spare; < 2 GB is. Not
kept (numbers in docs/search_speed.md): a packed-integer dedupe of the floor for any memory outcome
(2.45 vs 2.44 CPU s), the lower bound once per distinct row (slower, 1.72 vs 1.37), one pass less
per rule of the space (0.36 -> 0.34 s).

Then (2026-12-03, integrator, after merging the above) the default ``max_plans`` 50,000 -> 20,000:
9.2, 9.1, 9.3, 8.7 s wall, 16.0, 16.0, 16.3, 15.6 CPU s, 0.93-0.97 GiB (load 0.8-1.1); the
session's starting code (e3143a4) measured 15.0 s wall, 26.4 CPU s, 1.21 GiB in the same
conditions. Both targets are met on a quiet 2-core VM.

Then (2026-12-07, session 67; ``SpaceBase`` bitwise identical on 15 searches, plan tables identical
on ``tools/plan_snapshot.py``'s five cases): the space's rules over (base rows x combinations) per
distinct key, one full mask held at a time (21578cc5's etp axis had doubled that grid). Back to back
with main (bf252907), load 2.8-5.0: gbs4096 one process 13.3, 14.1 -> 9.0, 9.0 CPU s; two processes
16.3-20.4 -> 12.9-14.6 CPU s, 16.2-24.9 -> 11.1-18.0 s wall, 0.95 -> 0.73-0.76 GiB (workers 0.85);
gbs15360 67.7 -> 36.7 s wall, 76.3 -> 43.8 CPU s, 4.20 -> 1.43 GiB. < 10 s not confirmed on this
busy VM; < 2 GiB met.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: issue 18's target for its case (DeepSeek-V3 over 1,024-4,096 GPUs at a global batch of 4,096)
TARGET_WALL_S = 10.0
TARGET_RSS_GIB = 2.0
TARGET_CASE = "deepseek-v3-1024to4096-gbs4096"
CASES = {
    "deepseek-v3-1024to4096-gbs4096": {"global_batch": 4096, "dtypes": ["bf16"]},
    "deepseek-v3-1024to4096-gbs15360": {"global_batch": 15360, "dtypes": ["bf16"]},
    "deepseek-v3-1024to4096-gbs4096-bf16+fp8": {"global_batch": 4096, "dtypes": ["bf16", "fp8"]},
}

_CHILD = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
from planners import plan
args = json.loads(sys.argv[1])
t0, c0 = time.perf_counter(), time.process_time()
r = plan("deepseek-v3", "dgx-h100", "1024-4096", global_batch=args["global_batch"], dtypes=tuple(args["dtypes"]),
         workers=args["workers"])
wall = time.perf_counter() - t0
own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
best = r.best
print(json.dumps({{"wall_s": wall, "cpu_s": own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime,
                  "peak_rss_gib": own.ru_maxrss / 2**20, "worker_peak_rss_gib": kids.ru_maxrss / 2**20,
                  "configurations": r.evaluated, "fit": r.fitting, "fit_unchecked": r.fit_unchecked,
                  "plans_kept": len(r.plans),
                  "best": {{k: (v.item() if hasattr(v, "item") else v) for k, v in best.items()
                           if k in ("n_gpus", "dp", "tp", "pp", "cp", "ep", "micro_batch", "zero_stage", "recompute",
                                    "dtype", "tokens_per_s", "memory_gib")}}}}))
"""


def run_case(name: str, workers: int | None) -> dict:
    args = dict(CASES[name], workers=workers)
    load = os.getloadavg()[0]
    out = subprocess.run([sys.executable, "-c", _CHILD.format(root=str(ROOT)), json.dumps(args)],
                         capture_output=True, text=True, check=True)
    return judged({"name": name, "load_avg_1min": load, **json.loads(out.stdout.strip().splitlines()[-1])})


def judged(result: dict) -> dict:
    """``result`` with the target of its case (None where it has none) and whether it is met."""
    if result["name"] != TARGET_CASE:
        return {**result, "target_wall_s": None, "target_rss_gib": None, "meets_target": None}
    rss = max(result["peak_rss_gib"], result["worker_peak_rss_gib"])
    return {**result, "target_wall_s": TARGET_WALL_S, "target_rss_gib": TARGET_RSS_GIB,
            "meets_target": result["wall_s"] < TARGET_WALL_S and rss < TARGET_RSS_GIB}


def verdict(result: dict) -> str:
    """'target < 10 s and < 2 GiB: met' (or NOT MET), or '' for a case without a target."""
    if result["meets_target"] is None:
        return ""
    return (f"target < {result['target_wall_s']:g} s and < {result['target_rss_gib']:g} GiB: "
            f"{'met' if result['meets_target'] else 'NOT MET'}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--workers", type=int, default=None, help="scoring processes (default: automatic)")
    ap.add_argument("--case", choices=sorted(CASES), action="append", help="run only these cases")
    args = ap.parse_args(argv)
    results = [run_case(name, args.workers) for name in (args.case or CASES)]
    status = 1 if any(r["meets_target"] is False for r in results) else 0
    if args.json:
        print(json.dumps(results, indent=2))
        return status
    print(f"{'case':42s} {'configs':>11s} {'fit':>11s} {'wall_s':>7s} {'cpu_s':>7s} {'rss_gib':>7s} "
          f"{'worker_gib':>10s} {'load':>5s}  best")
    for r in results:
        b = r["best"]
        fit = f"{'>=' if r['fit_unchecked'] else ''}{r['fit']:,d}"
        print(f"{r['name']:42s} {r['configurations']:11,d} {fit:>11s} {r['wall_s']:7.1f} {r['cpu_s']:7.1f} "
              f"{r['peak_rss_gib']:7.2f} {r['worker_peak_rss_gib']:10.2f} {r['load_avg_1min']:5.1f}  "
              f"n={b['n_gpus']} dp={b['dp']} tp={b['tp']} pp={b['pp']} cp={b['cp']} ep={b['ep']} "
              f"mb={b['micro_batch']} zero={b['zero_stage']} {b['recompute']} {b['dtype']}: "
              f"{b['tokens_per_s']:,.0f} tok/s, {b['memory_gib']:.1f} GiB")
    for r in results:
        if verdict(r):
            print(f"{r['name']}: {r['wall_s']:.1f} s, "
                  f"{max(r['peak_rss_gib'], r['worker_peak_rss_gib']):.2f} GiB; {verdict(r)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
