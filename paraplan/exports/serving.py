"""A priced serving deployment as the launch script of the engine it was priced for.

``emit_serving(context, deployment, metrics)``: the ``ServingLaunch`` of the deployment
(``serving_common.launch_of``) written by the module of the stack's framework (``vllm_serve``,
``sglang_serve``, ``trtllm_serve``), after that module's ``refusal`` (a layout the engine cannot
run as priced raises ``InputError`` naming the field) and a check of every flag against the
engine's parser table (``serving_flags``).
"""
from __future__ import annotations

from typing import Mapping

from hardware_specs.errors import InputError
from paraplan.exports import sglang_serve, trtllm_serve, vllm_serve
from paraplan.exports.serving_common import ServingLaunch, launch_of, render_script
from paraplan.exports.serving_flags import PROGRAMS, check_command, trtllm_yaml_problems

ENGINES = {"vllm": vllm_serve, "sglang": sglang_serve, "trtllm": trtllm_serve}


def engine_module(framework: str):
    """The export module of a serving framework."""
    key = str(framework).strip().lower()
    if key not in ENGINES:
        raise InputError("--emit", f"no launch export for the {framework!r} serving stack",
                         "plan with -b vllm, sglang or trtllm")
    return ENGINES[key]


def refusal(launch: ServingLaunch) -> InputError | None:
    """Why the launch's engine cannot run it as priced, or None."""
    return engine_module(launch.framework).refusal(launch)


def mode_refusal(framework: str, mode: str) -> InputError | None:
    """Why ``framework`` cannot run any launch of serving ``mode``, or None: an engine module's
    ``mode_refusal`` where it has one (vLLM: no disaggregated router), which its ``refusal``
    returns for every launch of that mode."""
    hook = getattr(engine_module(framework), "mode_refusal", None)
    return None if hook is None else hook(mode)


def engine_commands(launch: ServingLaunch) -> list[list[str]]:
    """Every engine command of the launch (one per worker and host it starts from), from the
    engine's program on (an MPI launcher's words before it dropped)."""
    mod = engine_module(launch.framework)
    program = PROGRAMS[launch.framework][0]
    out = []
    for w in launch.workers:
        for node in range(w.hosts):
            argv = mod.worker_command(launch, w, node)
            if argv:
                out.append(argv[argv.index(program):])
    return out


def check_launch(launch: ServingLaunch) -> InputError | None:
    """Why the launch's commands would not be what was priced or would be refused (a setting
    the engine lacks, a flag its parser refuses), or None."""
    try:
        _check(launch)
    except InputError as err:
        return err
    return None


def emit_launch(launch: ServingLaunch, title: str = "") -> str:
    """The launch script, after the engine's refusal and a check of every command (and
    TensorRT-LLM options file) against the engine's interface table."""
    mod = engine_module(launch.framework)
    err = mod.refusal(launch)
    if err is not None:
        raise err
    _check(launch)
    return render_script(launch, mod, title or "written by paraplan serve")


def _check(launch: ServingLaunch) -> None:
    mod = engine_module(launch.framework)
    for argv in engine_commands(launch):
        check_command(launch.framework, argv)
    for name, body in mod.shared_files(launch).items():
        text = body[0] if isinstance(body, tuple) else body
        if launch.framework == "trtllm" and name != "paraplan_disagg.yaml":
            problems = trtllm_yaml_problems(text)
            if problems:
                raise InputError("--emit", f"the TensorRT-LLM options file {name} would be refused: {problems[0]}",
                                 "report this: the export and tools/serving_flags.py's table disagree")


def emit_serving(context, deployment, metrics: Mapping[str, float], title: str = "") -> str:
    """The bash script that starts ``deployment`` as priced in ``context`` (see the module doc)."""
    return emit_launch(launch_of(context, deployment, metrics), title)
