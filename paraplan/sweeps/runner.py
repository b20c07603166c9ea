"""Run a sweep: chunk the points, evaluate the chunks in this process or on Dask, keep each
finished chunk in a file named by its hash, and join them into one table.

Chunks: the points, in point order, are cut after each point whose own values hash to one of
``2 / chunk_points`` of the hash range, and wherever a chunk reaches ``chunk_points`` points
(content-defined chunking, as rsync and backup tools cut files). Where a chunk ends depends on
the points near it, not on how many come before, so a value inserted into any axis (an inner
``config`` one too) leaves the other chunks as they were; contiguous slices of ``chunk_points``
shifted every later boundary, and the points' indices were part of the key, so every chunk
after the first new point was evaluated again. A chunk holds at most ``chunk_points`` points
(about half that on average).

Resuming: each chunk is written to ``<out_dir>/chunks/<hash>.parquet``, the hash of everything
that decides its rows: its points' own values in order (not their indices: a chunk found again
after an insertion is renumbered when read), the search, the config of a best search, what each
model, cluster / system and stack / backend the chunk names loads to (so an edited model,
cluster, GPU or stack file, or a new efficiency fit, is evaluated again, in a serving sweep as in
a training one), a digest of the code and data that compute the numbers (``code_digest``: the
source and data files of ``hardware_specs``, ``model_specs``, ``cost_models``, ``simulator``,
``planners`` and ``paraplan``, read once per process; an editable install's version stays
0.1.0 whatever its code does, so an edited formula would otherwise return the old numbers), the
paraplan version and ``CHUNK_FORMAT``. A rerun, after a crash or with more points added, finds
the files of the chunks already done and evaluates only the others.
Dask (``distributed``) runs the chunks: a ``LocalCluster`` of this machine's cores by default,
or a running cluster at ``scheduler``; the driver alone reads and writes files, so workers need
no shared disk.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import logging
import os
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from hardware_specs.errors import InputError
from paraplan.sweeps.evaluate import evaluate_points
from paraplan.sweeps.spec import SweepSpec, check_names

#: bump when the rows a chunk holds change meaning (columns, units), so old files are not reused
CHUNK_FORMAT = 3


#: the packages whose code and data files compute a sweep's rows (``code_digest``)
CODE_PACKAGES = ("hardware_specs", "model_specs", "cost_models", "simulator", "planners", "paraplan")
#: the files of those packages read into the digest (code and the catalogs, fits and tables it loads)
_CODE_SUFFIXES = (".py", ".yaml", ".yml", ".json", ".csv")


def _point_text(point: dict) -> str:
    return json.dumps(point, sort_keys=True, default=str)


def _cuts_after(point: dict, chunk_points: int) -> bool:
    """Whether a chunk ends after ``point`` by its own values: true for 2 in ``chunk_points`` points."""
    digest = hashlib.blake2b(_point_text(point).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % chunk_points < 2


def chunks(spec: SweepSpec) -> list[list[tuple[int, dict]]]:
    """The points as (index, point) lists of at most ``spec.chunk_points``, in point order, cut
    where the points' own values say (see the module docstring)."""
    out, current = [], []
    for i, point in enumerate(spec.points()):
        current.append((i, point))
        if len(current) == spec.chunk_points or _cuts_after(point, spec.chunk_points):
            out.append(current)
            current = []
    if current:
        out.append(current)
    return out


@functools.lru_cache(maxsize=None)
def code_digest() -> str:
    """The sha256 of the source and data files of ``CODE_PACKAGES`` (relative path and bytes, in
    path order): what the chunk key holds of the code, computed once per process."""
    h = hashlib.sha256()
    for package in CODE_PACKAGES:
        found = importlib.util.find_spec(package)
        roots = list(found.submodule_search_locations or []) if found is not None else []
        for root in map(Path, roots):
            for path in sorted(root.rglob("*")):
                if path.suffix in _CODE_SUFFIXES and "__pycache__" not in path.parts and path.is_file():
                    h.update(f"{package}/{path.relative_to(root).as_posix()}\0".encode())
                    h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("paraplan")
    except Exception:  # noqa: BLE001 - a source tree that was never installed
        return "source"


def _loaded(load, name: str) -> str:
    """What ``load(name)`` reads, as text: the spec's full repr (every field the file and the files
    it names set), or the error that loading gives."""
    try:
        return repr(load(name))
    except InputError as exc:
        return f"error: {exc}"


def _cluster_inputs(name: str) -> str:
    """A cluster as it loads (its GPU's spec inside it) and the efficiency model it is scored with."""
    from hardware_specs.catalog import efficiency_for_cluster, load_cluster
    try:
        cluster = load_cluster(name)
        return repr(cluster) + repr(efficiency_for_cluster(cluster))
    except InputError as exc:
        return f"error: {exc}"


def _backend_inputs(name: str) -> str:
    """A serving backend as ``ServingContext.build`` resolves it: a stack name or file, else a
    framework's newest serving stack."""
    from hardware_specs.catalog import load_stack
    from hardware_specs.catalog import serving_stack_for
    try:
        return repr(load_stack(name))
    except InputError:
        return _loaded(lambda n: serving_stack_for(n, None), name)


def _input_loaders() -> dict[str, tuple]:
    """Per sweep kind: (axis of a point, how what it names loads, as text)."""
    from hardware_specs.catalog import load_stack
    from model_specs.catalog import load_model
    model, stack = (lambda n: _loaded(load_model, n)), (lambda n: _loaded(load_stack, n))
    return {"training": (("model", model), ("cluster", _cluster_inputs), ("stack", stack)),
            "serving": (("model", model), ("system", _cluster_inputs), ("backend", _backend_inputs))}


def input_digests(kind: str, points) -> dict[str, str]:
    """Per model, cluster / system and stack / backend the points name: the hash of what it loads
    to. The names alone are paths a user edits in place (num_layers 32 -> 64 reused the 32-layer
    rows, in a training and in a serving sweep)."""
    out, points = {}, list(points)
    for axis, load in _input_loaders().get(kind, _input_loaders()["training"]):
        for name in sorted({str(p[axis]) for p in points if axis in p}):
            out[f"{axis}:{name}"] = hashlib.sha256(load(name).encode()).hexdigest()
    return out


def chunk_inputs(chunk: list[tuple[int, dict]], kind: str = "training") -> dict[str, str]:
    """``input_digests`` of the names one chunk's points hold."""
    return input_digests(kind, [p for _, p in chunk])


def chunk_key(spec: SweepSpec, chunk: list[tuple[int, dict]], digests: dict[str, str] | None = None) -> str:
    """The hash naming a chunk's file (see the module docstring). ``digests``: ``input_digests``
    of the whole spec, to load each name once per run rather than once per chunk."""
    if digests is None:
        inputs = chunk_inputs(chunk, spec.kind)
    else:
        names = set(chunk_inputs_names(spec.kind, chunk))
        inputs = {k: v for k, v in digests.items() if k in names}
    payload = {"format": CHUNK_FORMAT, "version": _version(), "code": code_digest(), "kind": spec.kind,
               "search": spec.search,
               "config": {k: list(v) for k, v in spec.config.items()} if spec.search == "best" else None,
               "dtypes": list(spec.dtypes), "points": [p for _, p in chunk], "inputs": inputs}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:32]


def chunk_inputs_names(kind: str, chunk: list[tuple[int, dict]]) -> list[str]:
    """The ``input_digests`` keys one chunk's points name."""
    axes = [axis for axis, _ in _input_loaders().get(kind, _input_loaders()["training"])]
    return sorted({f"{axis}:{p[axis]}" for _, p in chunk for axis in axes if axis in p})


def evaluate_chunk(kind: str, search: str, config: dict, dtypes: tuple, chunk: list) -> pd.DataFrame:
    """One chunk's rows (the function a Dask worker runs)."""
    if kind == "serving":
        from paraplan.sweeps.serving_evaluate import evaluate_serving_points
        return evaluate_serving_points(chunk)
    return evaluate_points(chunk, kind, search, spec_config=config, dtypes=dtypes)


def _client(scheduler: str | None, workers: int | None, chunks: int | None = None):
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError as exc:
        raise InputError("dask", f"dask.distributed is not installed ({exc})",
                         "pip install 'dask[distributed]'") from None
    if scheduler:
        return _connect(Client, scheduler), None
    cores = os.cpu_count() or 1
    if workers is not None and workers > MAX_WORKERS_PER_CORE * cores:
        # a process per worker: 1,024 of them on 2 cores did not start within a minute
        raise InputError("--workers", f"{workers} worker processes on this {cores}-core machine",
                         f"give at most {MAX_WORKERS_PER_CORE * cores} (the default is one a core), or --scheduler")
    # Dask's own logging (a nanny's 'still alive, killing' at shutdown, heartbeat tracebacks)
    # would reach the user's stderr: only its critical records do
    n_workers = workers or cores
    if chunks:
        n_workers = min(n_workers, chunks)       # a worker without a chunk would only start and stop
    cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                           dashboard_address=None, silence_logs=logging.CRITICAL)
    return Client(cluster), cluster


#: local worker processes a core may run (more only contend for it)
MAX_WORKERS_PER_CORE = 4


#: seconds a --scheduler has to answer Dask's handshake (its TCP connect has 10 of them)
SCHEDULER_ANSWER_S = 30.0


def _connect(client_class, scheduler: str):
    """A client of the Dask scheduler at ``scheduler``, or an input error when none answers there.

    Anything else listening at the address is not a scheduler: a service that answers with its own
    protocol made Dask read a garbage frame length (a MemoryError of 3 EiB), and one that accepts
    the connection and stays silent held the handshake for ever (the connect timeout ends at
    TCP's). So every failure of the connection is the address's, and the client is made in a
    daemon thread given ``SCHEDULER_ANSWER_S`` to finish."""
    import threading
    outcome: dict = {}

    def connect():
        try:
            outcome["client"] = client_class(scheduler, timeout="10s")
        except BaseException as exc:  # noqa: BLE001 - whatever the address did, it is not a scheduler
            outcome["error"] = exc
    thread = threading.Thread(target=connect, name="paraplan-dask-connect", daemon=True)
    thread.start()
    thread.join(SCHEDULER_ANSWER_S)
    fix = "start one (dask scheduler) at that address, or drop --scheduler for a local cluster"
    if "client" in outcome:
        return outcome["client"]
    if "error" in outcome:
        exc = outcome["error"]
        raise InputError("--scheduler", f"no Dask scheduler answered at {scheduler} ({type(exc).__name__}: "
                         f"{str(exc)[:200]})", fix) from None
    raise InputError("--scheduler", f"no Dask scheduler answered at {scheduler} within {SCHEDULER_ANSWER_S:g} s "
                     "(something accepted the connection and stayed silent)", fix)


#: the statuses a finished chunk's rows may hold, per kind
_STATUSES = {"training": {"ok", "invalid", "infeasible", "does not fit"}, "serving": {"ok", "invalid", "infeasible", "unlaunchable"}}
#: per kind: (the point's own columns a finished chunk must repeat, each row's value equal to its
#: point's: (column, key in the point); the numbers an "ok" row must hold finite and positive)
_CHUNK_CHECKS = {
    "training": ((("model", "model"), ("cluster", "cluster"), ("gpus", "gpus"), ("stack", "stack"),
                  ("global_batch", "global_batch"), ("global_batch_tokens", "global_batch_tokens")),
                 ("step_time_s",)),
    "serving": ((("model", "model"), ("system", "system"), ("gpus", "gpus"), ("backend", "backend"), ("isl", "isl"),
                 ("osl", "osl"), ("ttft_slo_ms", "ttft_ms"), ("tpot_slo_ms", "tpot_ms"), ("precision", "precision"),
                 ("modes", "modes")),
                ("tokens_per_s_per_gpu", "ttft_ms", "tpot_ms")),
}


def _read_chunk(path: Path, chunk: list[tuple[int, dict]], kind: str = "training") -> pd.DataFrame | None:
    """A finished chunk's rows, or None when its file cannot be read or does not hold this
    chunk's points and their results (damaged by hand, or truncated by a full disk: a column
    missing or of the wrong kind, a row's point value not its point's, a status no evaluation
    writes, an "ok" row without its numbers): the chunk is then evaluated again, like a missing one."""
    try:
        return _checked_chunk(pd.read_parquet(path), chunk, kind)
    except Exception:  # noqa: BLE001 - whatever a damaged file holds, it is evaluated again
        return None


def _checked_chunk(df: pd.DataFrame, chunk: list[tuple[int, dict]], kind: str) -> pd.DataFrame | None:
    if "status" not in df or "point" not in df or not pd.api.types.is_integer_dtype(df["point"]):
        return None
    # the file holds the chunk's points in order, numbered where they were when it was written
    # (a value inserted into an axis since renumbers them): its rows take this run's numbers
    if len(df) != len(chunk) or df["point"].duplicated().any():
        return None
    df = df.sort_values("point", kind="stable", ignore_index=True)
    df["point"] = np.asarray([i for i, _ in chunk], dtype=df["point"].dtype)
    if not df["status"].map(lambda v: isinstance(v, str) and v in _STATUSES.get(kind, set())).all():
        return None
    keys, numbers = _CHUNK_CHECKS.get(kind, _CHUNK_CHECKS["training"])
    rows = df
    points = [p for _, p in chunk]
    for column, key in keys:
        stated = [p.get(key) for p in points]
        if all(v is None for v in stated):
            continue
        if column not in rows or [str(v) for v in rows[column]] != [str(v) for v in stated]:
            return None
    ok = rows[rows["status"] == "ok"]
    for number in numbers:
        if number not in rows:
            return None
        values = pd.to_numeric(ok[number], errors="coerce").astype(float)
        if not (np.isfinite(values) & (values > 0)).all():
            return None
    if kind == "serving":
        from paraplan.sweeps.serving_evaluate import SERVING_COLUMNS
        if list(df.columns) != list(SERVING_COLUMNS):
            return None
    return df


def _remove_empty(created: list[Path]) -> None:
    """Remove the folders this run made (innermost first) while still empty: nothing half-way."""
    for path in created:
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()


def run_sweep(spec: SweepSpec, out_dir: str | Path | None = None, *, client=None, scheduler: str | None = None,
              local: bool = False, workers: int | None = None,
              progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """Evaluate every point of ``spec``; one row per point, in point order.

    Args:
        out_dir: folder for the chunk files (resumable); None keeps nothing on disk.
        client: a ``dask.distributed.Client`` to run on (the caller's, left open).
        scheduler: address of a running Dask scheduler (``tcp://host:8786``).
        local: evaluate in this process, no Dask (what ``paraplan.api.sweep_grid`` does).
        workers: processes of the default ``LocalCluster`` (default: this machine's cores).
        progress: called as ``progress(points_done, points_total)`` after each chunk.
    """
    check_names(spec)
    parts = chunks(spec)
    total = sum(len(c) for c in parts)
    folder = None if out_dir is None else Path(out_dir) / "chunks"
    if folder is not None and folder.is_symlink():    # its chunk files would land wherever it points
        raise InputError("--out", f"{folder} is a symbolic link", "remove the link; the sweep makes its own folder")
    if folder is not None and folder.exists() and not folder.is_dir():
        raise InputError("--out", f"{folder} is a file, where the sweep keeps its chunks",
                         "remove it, or give another --out folder")
    created = [] if folder is None else [p for p in (folder, *folder.parents) if not p.exists()]
    if folder is not None:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:      # /proc/x, /sys/x: named as the option, not as a bare path error
            _remove_empty(created)
            raise InputError("--out", f"cannot create the folder {folder}: {exc.strerror or exc}",
                             "give a folder in a place you can write, e.g. --out sweep-out/") from None
    digests = input_digests(spec.kind, [p for c in parts for _, p in c])
    keys = [chunk_key(spec, c, digests) for c in parts]
    results: dict[int, pd.DataFrame] = {}
    todo = []
    for i, key in enumerate(keys):
        path = None if folder is None else folder / f"{key}.parquet"
        cached = _read_chunk(path, parts[i], spec.kind) if path is not None and path.is_file() else None
        if cached is not None:
            results[i] = cached
        else:
            todo.append(i)
    done = sum(len(parts[i]) for i in results)
    if progress is not None:
        progress(done, total)
    config = {k: list(v) for k, v in spec.config.items()}
    args = (spec.kind, spec.search, config, tuple(spec.dtypes))

    def finish(i: int, df: pd.DataFrame) -> None:
        nonlocal done
        if folder is not None:       # written whole, then renamed: a killed run leaves no half file
            _write_whole(lambda p: df.to_parquet(p, index=False), folder / f"{keys[i]}.parquet")
        results[i] = df
        done += len(parts[i])
        if progress is not None:
            progress(done, total)

    if todo and local:
        for i in todo:
            finish(i, evaluate_chunk(*args, parts[i]))
    elif todo:
        own = client is None
        cluster = None
        if own:
            try:
                client, cluster = _client(scheduler, workers, len(todo))
            except InputError:
                _remove_empty(created)
                raise
        try:
            from dask.distributed import as_completed
            futures = {client.submit(evaluate_chunk, *args, parts[i], key=f"paraplan-sweep-{keys[i]}", pure=False): i
                       for i in todo}
            for future in as_completed(futures):
                finish(futures[future], future.result())
        finally:
            if own:
                client.close()
                if cluster is not None:
                    cluster.close()
    frames = [results[i] for i in range(len(parts))]
    return normalise(pd.concat(frames, ignore_index=True) if frames else pd.DataFrame())


def normalise(df: pd.DataFrame) -> pd.DataFrame:
    """Column types a Parquet round trip keeps (so a resumed sweep equals a fresh one)."""
    for col in ("gpus", "point", "seq_len", "global_batch_tokens", "isl", "osl", "gpus_used", "concurrency",
                "batch", "workers", "prefill_batch", "prefill_workers", "decode_workers", "candidates_evaluated",
                "adp", "moe_tp", "moe_ep"):
        if col in df:
            df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
    for col in ("reason", "stack", "recompute", "schedule", "dtype", "gpu", "mode", "layout", "prefill_layout",
                "decode_layout", "dense_format", "expert_format", "backend", "precision", "modes", "engine_refuses",
                "engine_refused_best"):
        if col in df:
            df[col] = df[col].astype("string")
    for col in ("ttft_slo_ms", "tpot_slo_ms", "ttft_ms", "ttft_p90_ms", "tpot_ms", "tokens_per_s_per_gpu",
                "tokens_per_s_per_user", "engine_refused_tokens_per_s_per_gpu") + (("tokens_per_s",) if "system" in df else ()):
        if col in df:
            df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
    for col in ("fits", "sequence_parallel", "efficiency_fitted", "pipeline_exact"):
        if col in df:
            df[col] = df[col].astype("boolean")
    for col in ("n_gpus", "dp", "tp", "pp", "cp", "ep", "vpp", "micro_batch", "global_batch", "zero_stage"):
        if col in df:
            df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
    return df.sort_values("point", kind="stable", ignore_index=True) if "point" in df else df


def check_results_targets(out_dir: str | Path, stem: str = "results") -> None:
    """Refuse a folder or a symbolic link where ``write_results`` writes (checked before a sweep
    runs, so a long run does not end in an error)."""
    for suffix in (".parquet", ".csv"):
        target = Path(out_dir) / f"{stem}{suffix}"
        if target.is_symlink() or target.is_dir():
            raise InputError("--out", f"cannot write {target}: it is a "
                             f"{'symbolic link' if target.is_symlink() else 'directory'}",
                             "remove what is in its way, or give another --out folder")


def write_results(df: pd.DataFrame, out_dir: str | Path, stem: str = "results") -> list[Path]:
    """``<out_dir>/<stem>.parquet`` and ``.csv``: both written whole into hidden files before
    either is renamed into place, so a failure while writing (a full disk) leaves neither; a
    folder or a symbolic link in the way of one is refused before anything is written. (The two
    renames in one folder are not one atomic step.)"""
    folder = Path(out_dir)
    writers = ((folder / f"{stem}.parquet", lambda p: df.to_parquet(p, index=False)),
               (folder / f"{stem}.csv", lambda p: df.to_csv(p, index=False)))
    check_results_targets(folder, stem)
    done: list[Path] = []
    try:
        for target, write in writers:
            _write_whole(write, target.parent / f".{target.name}.pending")
            done.append(target)
    except InputError:
        for target in done:
            (target.parent / f".{target.name}.pending").unlink(missing_ok=True)
        raise
    for target in done:
        (target.parent / f".{target.name}.pending").replace(target)
    return done


def _write_whole(write, target: Path) -> None:
    """``write(path)`` into a hidden file beside ``target``, then renamed onto it; a failure (the
    target a folder, the disk full) removes the hidden file and names ``target``."""
    tmp = target.parent / f".{target.name}.tmp"
    try:
        write(tmp)
        tmp.replace(target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        why = "is a directory" if target.is_dir() else (exc.strerror or str(exc))
        raise InputError("--out", f"cannot write {target}: {why}",
                         "remove what is in its way, or give another --out folder") from None

