#!/usr/bin/env python3
"""boxes: each machine is a directory. The smallest complete ebb provisioner plugin."""
import json, os, shutil, sys

def box(ctx, name):  # a machine's directory; its record is box.json in it
    root = ctx["properties"].get("root") or os.path.join(ctx["workDir"], "boxes")
    os.makedirs(root, exist_ok=True)
    return os.path.join(root, name)

def load(path):
    return json.load(open(os.path.join(path, "box.json"))) if os.path.exists(path) else None

def every(ctx):
    return [load(box(ctx, d)) for d in sorted(os.listdir(box(ctx, ""))) if "." not in d]

def create(req):  # one box per idempotency token: a create sent twice makes one
    path = box(req["context"], req["token"])
    if not os.path.exists(path):
        os.makedirs(path + ".new", exist_ok=True)
        record = {"id": req["token"], "state": "running", "tags": req["tags"],
                  "address": "127.0.0.1", "facts": {"workDir": path}}
        json.dump(record, open(os.path.join(path + ".new", "box.json"), "w"))
        os.rename(path + ".new", path)
    return load(path)

def find(req):
    run, node = req["key"]["run"], req["key"]["node"]
    return next((b for b in every(req["context"])
                 if b["tags"]["ebb:run"] == run and b["tags"]["ebb:node"] == node), None)

METHODS = {"hello": lambda r: {"protocol": 1, "name": "boxes", "version": "1.0"},
           "validate": lambda r: None, "create": create, "find": find,
           "describe": lambda r: load(box(r["context"], r["id"])),
           "delete": lambda r: shutil.rmtree(box(r["context"], r["id"]), True),
           "list": lambda r: every(r["context"])}

for line in sys.stdin:  # one request per line in, one answer per line out
    req = json.loads(line)
    try:
        answer = {"call": req["call"], "result": METHODS[req["method"]](req)}
    except Exception as e:  # ebb retries a failed call within the profile's retryBudget
        answer = {"call": req["call"], "error": {"message": repr(e), "retryable": True}}
    print(json.dumps(answer), flush=True)
