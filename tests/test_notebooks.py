"""The what-if notebooks: every ``notebooks/*.py`` (a jupytext percent script) executes end to
end in a fresh kernel, fast, and its paired ``.ipynb`` holds the same cells and the same text
outputs (printed text, tables, conclusions; not figures) as that fresh run.

A new notebook needs no edit here: drop ``notebooks/<name>.py``, run
``python tools/notebooks.py notebooks/<name>.py`` to write the executed ``.ipynb``, commit both.
Runs in the default test session (the test extra brings jupytext, nbclient, nbformat and
ipykernel). The kernel is this interpreter with this tree first on its path.
"""
from __future__ import annotations

import importlib.util
import json
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import nbformat
import pytest
from conftest import cores_for_this_worker

REPO = Path(__file__).resolve().parents[1]
MAX_WALL_S = 60.0          # each notebook, kernel start included
#: notebooks executed at once: each runs in its own kernel process, one core each (CI has 2);
#: under pytest-xdist each worker executes its own notebooks, one at a time
PARALLEL_KERNELS = cores_for_this_worker()


def _tool():
    spec = importlib.util.spec_from_file_location("notebook_tool", REPO / "tools" / "notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TOOL = _tool()
SOURCES = TOOL.sources()


def _prior_names() -> set[str]:
    """Cluster and GPU names whose efficiency model is an unfitted prior (``fitted: false``)."""
    from hardware_specs.catalog import efficiency_for_cluster, list_clusters, load_cluster
    names = set()
    for name in list_clusters():
        cluster = load_cluster(name)
        if not efficiency_for_cluster(cluster).is_fitted:
            names |= {name, cluster.gpu.name}
    return names


PRIOR_NAMES = _prior_names()


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory, monkeypatch_module):
    """A kernelspec that runs this interpreter (not whatever ``python`` is first on PATH)."""
    root = tmp_path_factory.mktemp("jupyter")
    spec_dir = root / "kernels" / "paraplan-test"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "paraplan test", "language": "python"}))
    monkeypatch_module.setenv("JUPYTER_PATH", str(root))
    monkeypatch_module.setenv("PYTHONPATH", str(REPO))
    monkeypatch_module.setenv("MPLBACKEND", "Agg")
    return "paraplan-test"


def test_there_are_notebooks_and_each_py_has_an_ipynb_and_back():
    assert len(SOURCES) >= 4
    pairs = {p.stem for p in SOURCES}
    saved = {p.stem for p in (REPO / "notebooks").glob("*.ipynb")}
    assert saved == pairs, "each notebooks/<name>.py needs its executed <name>.ipynb (python tools/notebooks.py)"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_saved_ipynb_has_the_cells_of_its_py_and_their_outputs(source):
    nb = TOOL.load(source)
    saved = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    assert TOOL.cells(saved) == TOOL.cells(nb), \
        f"{source.with_suffix('.ipynb').name} is stale: python tools/notebooks.py {source.relative_to(REPO)}"
    code = [c for c in saved.cells if c.cell_type == "code"]
    assert code and all(c.get("execution_count") for c in code), "saved without running every cell"
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]


#: output lines that differ between two runs of the same code: a printed wall time or rate, each
#: named here (not a blanket normalisation). ``api.plan``'s summary (llama3_70b_on_256_h100):
#: "89,268 evaluated (92,411/s), 35,605 fit in 76.0 GiB; search 1.09 s"
VOLATILE_LINES: tuple[re.Pattern, ...] = (re.compile(r"evaluated \([\d,]+/s\), .*; search [\d.]+ s$"),)


def text_outputs(nb) -> list[list[str]]:
    """Per code cell, its text outputs in order: printed streams, ``text/markdown`` (the
    conclusions) and ``text/plain`` (tables, values). Outputs that carry an image are left out
    (a figure's text is only its size); lines matching ``VOLATILE_LINES`` are dropped."""
    def keep(text: str) -> str:
        return "\n".join(line for line in text.splitlines() if not any(p.search(line) for p in VOLATILE_LINES))
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        parts = []                           # (kind, text), consecutive prints of one stream joined:
        for out in cell.get("outputs", []):  # the kernel splits a stream where its flushes happen to fall
            if out.output_type == "stream":
                if parts and parts[-1][0] == out.name:
                    parts[-1] = (out.name, parts[-1][1] + out.text)
                else:
                    parts.append((out.name, out.text))
            elif "data" in out and "image/png" not in out.data:
                mime = "text/markdown" if "text/markdown" in out.data else "text/plain"
                if mime in out.data:
                    parts.append((mime, out.data[mime]))
        cells.append([f"{kind}: " + keep(text) for kind, text in parts])
    return cells


def _execute_timed(source: Path, kernel_name: str):
    """(executed notebook, wall seconds, the exception it raised or None)."""
    nb = TOOL.load(source)
    t0 = time.perf_counter()
    try:
        TOOL.execute(nb, timeout_s=MAX_WALL_S, kernel_name=kernel_name)   # raises at the first failing cell
    except Exception as exc:                 # reported by the notebook's own test below
        return nb, time.perf_counter() - t0, exc
    return nb, time.perf_counter() - t0, None


def _saved_run_s(source: Path) -> float:
    """Seconds the saved ``.ipynb``'s run took, first cell to last (nbclient's cell timing
    metadata); 0 when it has none."""
    try:
        saved = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
        stamps = [c.metadata["execution"] for c in saved.cells if c.cell_type == "code"]
        start = datetime.fromisoformat(stamps[0]["iopub.status.busy"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(stamps[-1]["iopub.status.idle"].replace("Z", "+00:00"))
    except (OSError, KeyError, IndexError, ValueError):
        return 0.0
    return max((end - start).total_seconds(), 0.0)


@pytest.fixture(scope="module")
def executed(kernel_name):
    """stem -> (executed notebook, wall seconds, exception or None), executed on first use.

    With more than one core for this test process, every notebook is executed at the first use,
    ``PARALLEL_KERNELS`` fresh kernels at a time (the kernels are separate processes, so this
    uses the machine's cores without sharing state), the longest saved runs first so the kernels
    finish close together. With one core (a pytest-xdist worker), each notebook runs when its
    test asks, so the workers share the notebooks out between them."""
    results: dict = {}

    def get(stem: str):
        if stem not in results:
            if PARALLEL_KERNELS > 1:
                longest_first = sorted(SOURCES, key=_saved_run_s, reverse=True)
                with ThreadPoolExecutor(max_workers=PARALLEL_KERNELS) as pool:
                    futures = {s.stem: pool.submit(_execute_timed, s, kernel_name) for s in longest_first}
                    results.update({name: f.result() for name, f in futures.items()})
            else:
                results[stem] = _execute_timed(next(s for s in SOURCES if s.stem == stem), kernel_name)
        return results[stem]
    return get


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_notebook_executes_without_errors_in_under_a_minute(source, executed):
    nb, wall, error = executed(source.stem)
    if error is not None:
        raise error
    assert wall < MAX_WALL_S, f"{source.name} took {wall:.0f} s"
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), f"{source.name} shows no figure"
    conclusions = [o["data"]["text/markdown"] for o in outputs if "text/markdown" in o.get("data", {})]
    assert conclusions, f"{source.name} renders no conclusions"
    for text in conclusions:     # every value in the prose was computed
        assert not re.search(r"\bnan\b|\binf\b", text.lower()), text
        named = [n for n in PRIOR_NAMES if re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text, re.IGNORECASE)]
        assert not named or "prior" in text.lower(), \
            f"{source.name} concludes about {named} (an unfitted efficiency model) without saying so: {text[:300]}"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_saved_ipynb_shows_the_text_outputs_of_a_fresh_run(source, executed):
    """The committed ``.ipynb`` is what readers see without running it: its printed text, tables
    and conclusions must be this tree's (one saved before a model change kept the old numbers
    and conclusions while its cells still matched the ``.py``). Same execution as above."""
    nb, _wall, error = executed(source.stem)
    if error is not None:
        pytest.skip(f"{source.name} failed to execute (reported by its execution test)")
    saved = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    fresh, old = text_outputs(nb), text_outputs(saved)
    fix = f"run python tools/notebooks.py {source.relative_to(REPO)} and commit the .ipynb"
    assert len(fresh) == len(old), f"{source.with_suffix('.ipynb').name} is stale ({fix})"
    for i, (now, then) in enumerate(zip(fresh, old)):
        if now != then:
            import difflib
            diff = "\n".join(difflib.unified_diff("\n".join(then).splitlines(), "\n".join(now).splitlines(),
                                                 "saved", "fresh run", lineterm="", n=1))
            pytest.fail(f"{source.with_suffix('.ipynb').name}: code cell {i}'s text outputs are stale ({fix}):\n"
                        f"{diff[:3000]}", pytrace=False)


def test_moe_ep_placement_shows_every_ep_degree_and_says_which_do_not_fit(executed):
    """Every EP degree of the study is in its table: one with no plan that fits is listed as
    'does not fit' with what its smallest plan needs (the planner's own refusal), not left out;
    and the memory conclusion says so (it once claimed larger EP buys no memory)."""
    from hardware_specs.errors import InputError
    from paraplan import api
    nb, _wall, error = executed("moe_ep_placement")
    if error is not None:
        raise error
    texts = [t for cell in text_outputs(nb) for t in cell]
    table = next(t for t in texts if t.startswith("text/plain: ") and "network" in t and "ep_comm_exposed_s" in t)
    eps = [int(line.split()[3]) for line in table.splitlines()[1:]]   # "0  400 Gb/s  1  ..."
    assert eps == [1, 2, 4, 8, 16, 32, 64] * 2, table
    for ep in (1, 2):                       # no plan fits: the table gives what the smallest needs
        with pytest.raises(InputError) as err:
            api.plan("deepseek-v3", "dgx-h100", 256, 4 * 2**20, ep=[ep], etp=[1], max_plans=1)
        need = float(re.search(r"needs ([0-9.]+) GiB", err.value.message).group(1))
        assert need > 76.0
        assert table.count(f"does not fit (smallest plan needs {need:.1f} GiB)") == 2, table
    conclusion = texts[-1]
    assert "buys no memory" not in conclusion
    assert "with ep=1, 2 no plan fits at all" in conclusion, conclusion
