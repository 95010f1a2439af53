#!/usr/bin/env python3
"""A plugin that misbehaves on purpose, for ebb's tests: the pcloud example plugin, with one
fault chosen by its arguments (`unruly.py NAME FAULT`):

  crash   exits without an answer on every third call (after its hello) of each of its processes;
  hang    never answers a create;
  flood   answers a create with 100 MB on one line;
  garbage answers a create with a line that is not JSON.
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../examples/plugins/pcloud"))
import pcloud  # noqa: E402

NAME, FAULT = sys.argv[1], sys.argv[2]


def answer(request):
    method = request["method"]
    if method == "hello":
        return {"call": request["call"], "result": {"protocol": 1, "name": NAME, "version": "0.0.1"}}
    if method == "create" and FAULT == "hang":
        print("unruly: hanging on purpose", file=sys.stderr, flush=True)
        while True:
            pcloud.time.sleep(3600)
    if method == "create" and FAULT == "flood":
        chunk = "x" * (1 << 20)
        for _ in range(100):
            sys.stdout.write(chunk)
        sys.stdout.write("\n")
        sys.stdout.flush()
        return None
    if method == "create" and FAULT == "garbage":
        sys.stdout.write("this is not an answer\n")
        sys.stdout.flush()
        return None
    try:
        return {"call": request["call"], "result": pcloud.METHODS[method](request)}
    except pcloud.Refusal as e:
        return {"call": request["call"], "error": {"message": str(e), "retryable": e.retryable}}


def main():
    calls = 0
    for line in sys.stdin:
        request = json.loads(line)
        if request["method"] != "hello":
            calls += 1
        if FAULT == "crash" and calls == 3:
            print("unruly: crashing on purpose", file=sys.stderr, flush=True)
            os._exit(3)
        reply = answer(request)
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
