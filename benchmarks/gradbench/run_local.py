"""Run a GradBench eval against the zyg tool without docker or the ``gradbench`` CLI:
a small stand-in for ``gradbench run`` that starts the eval and the tool as two
processes and forwards each message and response between them, logging every line
(``{"elapsed": ..., "message"|"response": ...}``, as the CLI's ``--output`` does).

    python benchmarks/gradbench/run_local.py --gradbench DIR [--eval-python PY]
        [--target cpu|python] [--tool zyg|manual] [--log FILE] EVAL [-- EVAL ARGS...]

DIR is a checkout of GradBench (its ``python/gradbench`` package is put on the eval's
``PYTHONPATH``, and the evals validate against ``tools/manual/bin/<eval>``, GradBench's
hand-written C++ tool, built with ``make -C tools/manual bin/<eval>``). PY is a Python
with what the evals import (numpy, scipy, pydantic, dataclasses-json).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run(gradbench: str, eval_name: str, eval_args: list[str], *, eval_python: str,
        target: str = "cpu", log=None, tool_python: str = sys.executable,
        quiet: bool = False, tool_name: str = "zyg") -> list[dict]:
    """Run one eval against the tool; return the evaluations (message, response,
    analysis) in order."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(gradbench, "python", "gradbench")
    ev = subprocess.Popen([eval_python, "-m", f"gradbench.evals.{eval_name}.run", *eval_args],
                          cwd=gradbench, env=env, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True)
    tenv = dict(os.environ)
    tenv["PYTHONPATH"] = ROOT + os.pathsep + tenv.get("PYTHONPATH", "")
    if tool_name == "zyg":
        cmd, cwd = [tool_python, os.path.join(HERE, "zyg_tool.py"), "--target", target], ROOT
    else:   # one of GradBench's C++ tools (e.g. manual), through its own gradbench.cpp driver
        cmd, cwd, tenv = [eval_python, "-m", "gradbench.cpp", tool_name], gradbench, env
    tool = subprocess.Popen(cmd, cwd=cwd, env=tenv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    t0 = time.perf_counter_ns()
    evaluations: dict[int, dict] = {}
    order: list[dict] = []

    def record(key, obj):
        if log is not None:
            log.write(json.dumps({"elapsed": {"nanoseconds": time.perf_counter_ns() - t0},
                                  key: obj}) + "\n")
            log.flush()

    try:
        for line in ev.stdout:
            if not line.strip():
                continue
            message = json.loads(line)
            record("message", message)
            if message.get("kind") == "end":
                break
            tool.stdin.write(line if line.endswith("\n") else line + "\n")
            tool.stdin.flush()
            rline = tool.stdout.readline()
            if not rline:
                raise RuntimeError("the tool exited without a response")
            response = json.loads(rline)
            record("response", response)
            kind = message.get("kind")
            if kind == "define" and not response.get("success"):
                print(f"define {message['module']}: {response.get('error')}", file=sys.stderr)
            if kind == "evaluate":
                entry = {"message": message, "response": response, "analysis": None}
                evaluations[message["id"]] = entry
                order.append(entry)
                if not response.get("success"):
                    print(f"{eval_name} {message['function']} {message.get('description')}: "
                          f"failed\n{response.get('error')}", file=sys.stderr)
            elif kind == "analysis":
                evaluations[message["of"]]["analysis"] = message
                entry = evaluations[message["of"]]
                if not quiet:
                    times = [t["nanoseconds"] for t in entry["response"].get("timings", [])
                             if t["name"] == "evaluate"]
                    med = statistics.median(times) / 1e6 if times else float("nan")
                    print(f"{eval_name:8s} {entry['message']['function']:10s} "
                          f"{str(entry['message'].get('description')):22s} "
                          f"valid={message['valid']!s:5s} median {med:10.3f} ms "
                          f"({len(times)} runs)", file=sys.stderr)
                    if not message["valid"]:
                        print(message.get("error"), file=sys.stderr)
            ev.stdin.write(json.dumps(response) + "\n")
            ev.stdin.flush()
    except BrokenPipeError:
        pass
    finally:
        for p in (ev, tool):
            try:
                p.stdin.close()
            except BrokenPipeError:
                pass
        ev.wait(timeout=60)
        tool.wait(timeout=60)
    return order


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gradbench", required=True, help="a GradBench checkout")
    parser.add_argument("--eval-python", default=sys.executable)
    parser.add_argument("--target", choices=("cpu", "python"), default="cpu")
    parser.add_argument("--log", help="write the session (JSON lines) here")
    parser.add_argument("--tool", default="zyg",
                        help="zyg (default) or a C++ tool of the GradBench checkout, e.g. manual "
                             "(built there by make, as GradBench's own driver does)")
    parser.add_argument("eval")
    parser.add_argument("eval_args", nargs=argparse.REMAINDER)
    a = parser.parse_args()
    eval_args = a.eval_args[1:] if a.eval_args[:1] == ["--"] else a.eval_args
    log = open(a.log, "w") if a.log else None
    order = run(a.gradbench, a.eval, eval_args, eval_python=a.eval_python,
                target=a.target, log=log, tool_name=a.tool)
    bad = [e for e in order if not e["response"].get("success")
           or (e["analysis"] is not None and not e["analysis"]["valid"])]
    print(f"{a.eval}: {len(order)} evaluations, {len(bad)} failed or invalid", file=sys.stderr)
    sys.exit(1 if bad or not order else 0)


if __name__ == "__main__":
    main()
