"""Run every vLLM and SGLang command of the serving export matrix (``paraplan.exports.serving_matrix``)
through the engines' real parsers and their offline post-parse steps (``tools/serving_probe.py``),
and record what they answered in ``paraplan/exports/serving_exports_verified.json``.

CI cannot install the engines; ``tests/test_exports_serving.py`` checks that the current exports
are exactly the recorded command lines (so a changed export has to be verified again) and that
the parsed values mean the plan. TensorRT-LLM cannot be installed here (see
``tools/serving_flags.py``); its exports are checked against the table alone.

Usage::

    python tools/verify_serving_exports.py --python /tmp/s/venv-serve/bin/python
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from paraplan.exports.serving import engine_commands  # noqa: E402
from paraplan.exports.serving_flags import PROGRAMS, release  # noqa: E402
from paraplan.exports.serving_matrix import concrete, launches  # noqa: E402

OUT = ROOT / "paraplan" / "exports" / "serving_exports_verified.json"
PROBE = ROOT / "tools" / "serving_probe.py"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", required=True, help="an interpreter with vllm and sglang installed")
    a = ap.parse_args()
    cases = []
    for case_id, _, launch in launches():
        if launch.framework not in ("vllm", "sglang"):
            continue
        for k, argv in enumerate(engine_commands(launch)):
            args = concrete(argv)[len(PROGRAMS[launch.framework]):]
            flags = ["--dummy-model"] if launch.framework == "sglang" else []
            done = subprocess.run([a.python, str(PROBE), "parse", launch.framework, *flags], input=json.dumps(args),
                                  capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                sys.exit(f"{case_id}: the probe failed: {done.stderr[-2000:]}")
            # the engines log to stdout on import; the probe marks its answer
            answer = json.loads(done.stdout.split("@@JSON@@", 1)[-1])
            fields = {k: v for k, v in (answer.get("fields") or {}).items() if k != "compilation_config"}
            post = answer.get("post_parse") or {}
            cases.append({"id": f"{case_id}#{k}", "engine": launch.framework, "argv": args,
                          "accepted": answer["accepted"], "error": answer.get("error"), "fields": fields,
                          "post_parse": {k: post[k] for k in ("ok", "ran", "error") if k in post}})
            print(f"{case_id}#{k}: {'accepted' if answer['accepted'] else 'REFUSED ' + str(answer.get('error'))}",
                  file=sys.stderr)
    out = {"generated_by": "tools/verify_serving_exports.py", "releases": {e: release(e) for e in ("vllm", "sglang")},
           "cases": cases}
    OUT.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT} ({len(cases)} commands)", file=sys.stderr)


if __name__ == "__main__":
    main()
