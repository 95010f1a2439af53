#!/usr/bin/env python3
"""pcloud: a process cloud, as an ebb provisioner plugin (plugin protocol 1).

Each machine is a process of its own (this file, run as `pcloud.py machine DIR DELAY`) with a
home directory; it boots (writes DIR/ready) after the profile's bootDelay. The cloud's records
live in a SQLite database under the root directory: machine ids, the idempotency token of each
create, tags, and a capacity. ebb keeps no state in the plugin: every answer is read from the
database and the machines' processes.

ebb writes one JSON request per line on stdin and reads one answer per line on stdout; this
plugin logs to stderr only. Only the standard library is used.
"""

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import uuid

NAME = "pcloud"
PROTOCOL = 1


class Refusal(Exception):
    """A call the cloud refuses: retryable or not, and the property at fault, if any."""

    def __init__(self, message, retryable=False, prop=None):
        super().__init__(message)
        self.retryable = retryable
        self.prop = prop


def log(*parts):
    print("pcloud:", *parts, file=sys.stderr, flush=True)


# ---- the cloud's records ---------------------------------------------------------------------


def root_of(context):
    props = context.get("properties", {})
    root = props.get("root") or os.path.join(context["workDir"], "machines")
    if not os.path.isabs(root):
        raise Refusal("must be an absolute path", prop="root")
    os.makedirs(root, mode=0o700, exist_ok=True)
    return root


def journal(root, *words):
    """Appends a line to the cloud's journal (calls.log): what was made and removed, for audit."""
    with open(os.path.join(root, "calls.log"), "a") as f:
        f.write(" ".join(words) + "\n")


def database(root):
    db = sqlite3.connect(os.path.join(root, "cloud.db"), timeout=30, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(
        """CREATE TABLE IF NOT EXISTS machines (
             id TEXT PRIMARY KEY,
             token TEXT UNIQUE NOT NULL,
             run TEXT NOT NULL,
             node TEXT NOT NULL,
             tags TEXT NOT NULL,
             dir TEXT NOT NULL,
             delay REAL NOT NULL,
             pid INTEGER,
             created REAL NOT NULL)"""
    )
    return db


def seconds(text):
    """A duration as ebb's properties give it: 30, 250ms, 2s, 5m."""
    text = (text or "0").strip()
    for suffix, scale in (("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600)):
        if text.endswith(suffix) and text[: -len(suffix)].strip().replace(".", "", 1).isdigit():
            return float(text[: -len(suffix)]) * scale
    try:
        return float(text)
    except ValueError:
        raise Refusal(f"must be a duration like 2s, got '{text}'", prop="bootDelay")


def alive(row):
    """Whether the machine's process runs (and is this machine's, not a reused pid)."""
    pid = row["pid"]
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return row["id"].encode() in f.read()
    except OSError:
        return False


def boot(row):
    """Starts the machine's process, in a session of its own: it outlives this plugin."""
    home = os.path.join(row["dir"], "home")
    os.makedirs(home, mode=0o700, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "machine", row["dir"], str(row["delay"]), row["id"]],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    return proc.pid


def resource(row):
    ready = os.path.exists(os.path.join(row["dir"], "ready"))
    return {
        "id": row["id"],
        "state": "running" if ready else "pending",
        "tags": json.loads(row["tags"]),
        "address": "127.0.0.1",
        "facts": {
            "hostname": row["id"],
            "workDir": os.path.join(row["dir"], "home"),
            "pid": str(row["pid"] or ""),
        },
    }


def rows(db, where="", args=()):
    db.row_factory = sqlite3.Row
    return db.execute(f"SELECT * FROM machines {where} ORDER BY created", args).fetchall()


def live(db, row):
    """The machine of `row` as ebb sees it, or None when it is gone. A machine whose process
    died after booting is gone (its record is removed); one not booted yet is booted. The
    decision is taken on the record as it stands inside a write transaction, so a machine
    being removed by another call is never booted again."""
    if alive(row):
        return resource(row)
    db.row_factory = sqlite3.Row
    db.execute("BEGIN IMMEDIATE")
    try:
        current = db.execute("SELECT * FROM machines WHERE id = ?", (row["id"],)).fetchone()
        if current is None or alive(current):
            db.execute("COMMIT")
            return resource(current) if current else None
        if os.path.exists(os.path.join(current["dir"], "ready")):
            db.execute("DELETE FROM machines WHERE id = ?", (current["id"],))
            db.execute("COMMIT")
            log("machine", current["id"], "is gone; removing its record")
            shutil.rmtree(current["dir"], ignore_errors=True)
            journal(os.path.dirname(current["dir"]), "delete", current["id"])
            return None
        pid = boot(current)
        db.execute("UPDATE machines SET pid = ? WHERE id = ?", (pid, current["id"]))
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return resource(dict(current, pid=pid))


def remove(db, row):
    """Removes the machine of `row`: its record first (in a write transaction, so no other
    call boots it again), then its process and its disk. A machine already removed is left."""
    db.row_factory = sqlite3.Row
    db.execute("BEGIN IMMEDIATE")
    try:
        current = db.execute("SELECT * FROM machines WHERE id = ?", (row["id"],)).fetchone()
        db.execute("DELETE FROM machines WHERE id = ?", (row["id"],))
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    if current is None:
        return
    if alive(current):
        try:
            os.killpg(current["pid"], signal.SIGTERM)
        except OSError:
            pass
        for _ in range(50):
            if not alive(current):
                break
            time.sleep(0.02)
        else:
            try:
                os.killpg(current["pid"], signal.SIGKILL)
            except OSError:
                pass
    shutil.rmtree(current["dir"], ignore_errors=True)
    journal(os.path.dirname(current["dir"]), "delete", current["id"])


# ---- the protocol's methods -------------------------------------------------------------------


def hello(_request):
    return {"protocol": PROTOCOL, "name": NAME, "version": "1.0.0"}


def validate(request):
    props = request["context"]["properties"]
    root_of(request["context"])
    seconds(props.get("bootDelay"))
    return None


def create(request):
    context, key = request["context"], request["key"]
    props = context["properties"]
    root = root_of(context)
    db = database(root)
    db.execute("BEGIN IMMEDIATE")
    try:
        found = rows(db, "WHERE token = ?", (request["token"],))
        if found:
            db.execute("COMMIT")
            return live(db, found[0])
        capacity = int(props.get("capacity", "1000"))
        (count,) = db.execute("SELECT COUNT(*) FROM machines").fetchone()
        if count >= capacity:
            raise Refusal(f"the cloud is out of capacity ({count} of {capacity} machines run)")
        mid = "m-" + uuid.uuid4().hex[:12]
        row = {
            "id": mid,
            "token": request["token"],
            "run": key["run"],
            "node": key["node"],
            "tags": json.dumps(request["tags"], sort_keys=True),
            "dir": os.path.join(root, mid),
            "delay": seconds(props.get("bootDelay")),
            "pid": None,
            "created": time.time(),
        }
        db.execute(
            "INSERT INTO machines VALUES (:id, :token, :run, :node, :tags, :dir, :delay, :pid, :created)",
            row,
        )
        journal(root, "create", mid, request["token"])
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    log("created", mid, "for", key["run"], key["node"])
    return live(db, row)


def find(request):
    db = database(root_of(request["context"]))
    key = request["key"]
    for row in reversed(rows(db, "WHERE run = ? AND node = ?", (key["run"], key["node"]))):
        found = live(db, row)
        if found:
            return found
    return None


def describe(request):
    db = database(root_of(request["context"]))
    found = rows(db, "WHERE id = ?", (request["id"],))
    return live(db, found[0]) if found else None


def delete(request):
    db = database(root_of(request["context"]))
    for row in rows(db, "WHERE id = ?", (request["id"],)):
        remove(db, row)
        log("deleted", row["id"])
    return None


def list_(request):
    db = database(root_of(request["context"]))
    out = []
    for row in rows(db):
        found = live(db, row)
        if found and "ebb:run" in found["tags"]:
            out.append(found)
    return out


def lookup(request):
    """Every live machine of one cluster: one query, however many nodes ask."""
    db = database(root_of(request["context"]))
    out = []
    for row in rows(db, "WHERE run = ?", (request["run"],)):
        found = live(db, row)
        if found:
            out.append(found)
    return out


METHODS = {
    "hello": hello,
    "validate": validate,
    "create": create,
    "find": find,
    "describe": describe,
    "delete": delete,
    "list": list_,
    "lookup": lookup,
}


def serve():
    for line in sys.stdin:
        request = json.loads(line)
        answer = {"call": request["call"]}
        try:
            answer["result"] = METHODS[request["method"]](request)
        except Refusal as e:
            answer["error"] = {"message": str(e), "retryable": e.retryable}
            if e.prop:
                answer["error"]["property"] = e.prop
        except sqlite3.OperationalError as e:
            answer["error"] = {"message": f"the cloud's database is busy: {e}", "retryable": True}
        except KeyError as e:
            answer["error"] = {"message": f"unknown method or missing field {e}", "retryable": False}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


# ---- a machine --------------------------------------------------------------------------------


def machine(directory, delay, _mid):
    """A machine's process: boots after `delay` seconds, then runs until it is stopped, or
    until its directory (its disk) is gone."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    time.sleep(float(delay))
    with open(os.path.join(directory, "ready.tmp"), "w") as f:
        f.write(str(os.getpid()))
    os.replace(os.path.join(directory, "ready.tmp"), os.path.join(directory, "ready"))
    while os.path.isdir(directory):
        time.sleep(1)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "machine":
        machine(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        serve()
