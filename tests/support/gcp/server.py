#!/usr/bin/env python3
"""A local stand-in for the two Google Cloud REST APIs ebb's provisioners call.

No official emulator exists for Compute Engine or Dataproc, so this answers like them where it
matters to a provisioner:
- long-running operations that finish later (a zonal Compute operation goes RUNNING then
  DONE; a Dataproc operation is `done: false` until the cluster is RUNNING);
- `requestId` idempotency (the same id answers with the same operation and makes nothing);
- 409 on a duplicate name, 404 after a delete;
- errors inside a DONE operation (`error.errors[]` for Compute, `error{code,message}` for
  Dataproc, whose failed cluster stays behind in state ERROR, as the real one does).

Test controls, under /_ebb/:
- POST /_ebb/faults  {"api": "compute"|"dataproc", "op": "insert"|"create"|"delete",
  "kind": "op_error"|"http_error"|"hold", "times": n, "status", "code", "message", "seconds"}
  (`hold`: the call takes effect, the answer comes `seconds` later);
- DELETE /_ebb/faults; GET /_ebb/calls; GET /_ebb/resources;
- POST /_ebb/config {"delay": s, "natPrefix": "127.0.1.", "natStart": 71} (external addresses
  handed out from then on, e.g. where a test's sshd listens), and {"capacity": {zone:
  {"STANDARD": n, "SPOT": n}}}: the most live instances of each provisioning model a zone
  holds (a zone or model not named has room); an insert past it ends in
  ZONE_RESOURCE_POOL_EXHAUSTED inside its operation, as Compute Engine answers;
- POST /_ebb/preempt {"zone", "name"}: Compute Engine preempts a Spot VM (with
  instanceTerminationAction DELETE it is deleted, with STOP it is TERMINATED).

Spot VMs are checked as Compute Engine checks them: `scheduling.provisioningModel` is STANDARD
or SPOT, a Spot VM may not restart automatically or migrate, and `instanceTerminationAction`
is STOP or DELETE. `GET .../aggregated/instances` lists every zone's instances at once.

Usage: server.py [--port N] [--delay SECONDS]; prints "listening on <port>" when ready.
"""

import argparse
import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

LOCK = threading.RLock()
STATE = {
    "delay": 0.5,
    "instances": {},  # (project, zone, name) -> instance
    "clusters": {},  # (project, region, name) -> cluster
    "operations": {},  # name -> operation (with private "_done_at", "_finish")
    "request_ids": {},  # (api, requestId) -> operation name
    "faults": [],
    "calls": [],
    "seq": 1000,
    "nat": ["34.70.0.", 1],  # external addresses: prefix and the next last number
    "capacity": {},  # zone -> {provisioning model -> most live instances}
}
MACHINE_TYPES = {"e2-micro", "e2-small", "e2-medium", "e2-standard-2", "e2-standard-4",
                 "n1-standard-1", "n1-standard-2", "n1-standard-4", "n2-standard-4",
                 "n2-standard-8"}


def now_rfc3339():
    return time.strftime("%Y-%m-%dT%H:%M:%S.000-00:00", time.gmtime())


def take_fault(api, op):
    for fault in STATE["faults"]:
        if fault.get("api") == api and fault.get("op") == op and fault.get("times", 1) > 0:
            fault["times"] = fault.get("times", 1) - 1
            return dict(fault)
    return None


def next_id():
    STATE["seq"] += 1
    return str(STATE["seq"]) + "4242"


def tick():
    """Moves operations and resources along: whatever is due is done."""
    t = time.time()
    for op in STATE["operations"].values():
        if not op.get("_finished") and t >= op["_done_at"]:
            op["_finished"] = True
            op["_finish"](op)


def compute_error(status, message, reason):
    return status, {"error": {"code": status, "message": message,
                              "errors": [{"message": message, "domain": "global", "reason": reason}]}}


def google_error(status, message, grpc_status):
    return status, {"error": {"code": status, "message": message, "status": grpc_status}}


def public(obj):
    return {k: v for k, v in obj.items() if not k.startswith("_")}


def label_filter(text):
    """`labels.k = "v"` terms joined by AND, as ebb sends them."""
    return {k: v for k, v in re.findall(r'labels\.([a-z0-9_-]+)\s*[=:]\s*"?([^"\s)]+)"?', text or "")}


def matches(labels, want):
    """Whether `labels` has every wanted label; a wanted value `*` only asks for the key."""
    return all(k in labels and (v == "*" or labels[k] == v) for k, v in want.items())


# ---- Compute Engine -------------------------------------------------------------------------

def compute_op(project, zone, kind, target, finish, error=None):
    name = "operation-" + uuid.uuid4().hex[:20]
    op = {
        "kind": "compute#operation", "id": next_id(), "name": name,
        "zone": f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}",
        "operationType": kind, "targetLink": target, "status": "RUNNING", "progress": 0,
        "insertTime": now_rfc3339(),
        "selfLink": f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}/operations/{name}",
        "_done_at": time.time() + STATE["delay"],
    }

    def done(o):
        o["status"] = "DONE"
        o["progress"] = 100
        o["endTime"] = now_rfc3339()
        if error:
            o["error"] = {"errors": [{"code": error[0], "message": error[1]}]}
            o["httpErrorStatusCode"] = error[2]
            o["httpErrorMessage"] = "SERVICE UNAVAILABLE" if error[2] == 503 else "FORBIDDEN"
        finish(o)

    op["_finish"] = done
    STATE["operations"][name] = op
    return op


def compute(method, project, zone, rest, query, body):
    base = f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}"
    request_id = (query.get("requestId") or [None])[0]
    m = re.fullmatch(r"instances(?:/([^/]+))?", rest)
    if m:
        name = m.group(1)
        key = (project, zone, name)
        if method == "POST" and name is None:
            fault = take_fault("compute", "insert")
            if fault and fault["kind"] == "http_error":
                return compute_error(fault.get("status", 500), fault.get("message", "boom"),
                                     fault.get("code", "backendError"))
            if request_id and ("compute", request_id) in STATE["request_ids"]:
                return 200, public(STATE["operations"][STATE["request_ids"][("compute", request_id)]])
            name = body.get("name", "")
            if not re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", name):
                return compute_error(400, f"Invalid value for field 'resource.name': '{name}'.", "invalid")
            machine = body.get("machineType", "").rsplit("/", 1)[-1]
            if machine not in MACHINE_TYPES:
                return compute_error(400, f"Invalid value for field 'resource.machineType': "
                                          f"'{body.get('machineType')}'. Machine type does not exist.", "invalid")
            bad = check_scheduling(body.get("scheduling") or {})
            if bad:
                return compute_error(400, bad, "invalid")
            key = (project, zone, name)
            if key in STATE["instances"]:
                return compute_error(409, f"The resource 'projects/{project}/zones/{zone}/instances/{name}' "
                                          "already exists", "alreadyExists")
            error = None
            if no_room(project, zone, body):
                error = ("ZONE_RESOURCE_POOL_EXHAUSTED",
                         f"The zone 'projects/{project}/zones/{zone}' does not have enough resources "
                         "available to fulfill the request. '(resource type:compute)'.", 503)
            if fault and fault["kind"] == "op_error":
                error = (fault.get("code", "ZONE_RESOURCE_POOL_EXHAUSTED"),
                         fault.get("message", f"The zone 'projects/{project}/zones/{zone}' does not have "
                                              "enough resources available to fulfill the request."),
                         fault.get("status", 503))
            n = len(STATE["instances"]) + 1
            nat = STATE["nat"][0] + str(STATE["nat"][1])
            STATE["nat"][1] += 1
            instance = dict(body)
            instance.update({
                "kind": "compute#instance", "id": next_id(), "status": "PROVISIONING",
                "zone": base, "selfLink": f"{base}/instances/{name}",
                "creationTimestamp": now_rfc3339(),
                "machineType": f"{base}/machineTypes/{machine}",
                "networkInterfaces": [{"name": "nic0", "network": "global/networks/default",
                                       "networkIP": f"10.128.0.{n}",
                                       "accessConfigs": [{"name": "External NAT", "type": "ONE_TO_ONE_NAT",
                                                          "natIP": nat}]}],
            })
            if not error:
                STATE["instances"][key] = instance

            def finish(o, key=key, error=error):
                inst = STATE["instances"].get(key)
                if inst and not error:
                    inst["status"] = "RUNNING"

            op = compute_op(project, zone, "insert", f"{base}/instances/{name}", finish, error)
            op["targetId"] = instance["id"]
            if request_id:
                STATE["request_ids"][("compute", request_id)] = op["name"]
            return hold(fault, 200, public(op))
        if method == "GET" and name is None:
            want = label_filter((query.get("filter") or [""])[0])
            items = [public(i) for (p, z, _), i in sorted(STATE["instances"].items())
                     if p == project and z == zone
                     and matches(i.get("labels", {}), want)]
            return 200, {"kind": "compute#instanceList", "items": items, "id": f"projects/{project}/zones/{zone}/instances"}
        if method == "GET":
            if key not in STATE["instances"]:
                return compute_error(404, f"The resource 'projects/{project}/zones/{zone}/instances/{name}' "
                                          "was not found", "notFound")
            return 200, public(STATE["instances"][key])
        if method == "DELETE":
            fault = take_fault("compute", "delete")
            if fault and fault["kind"] == "http_error":
                return compute_error(fault.get("status", 500), fault.get("message", "boom"),
                                     fault.get("code", "backendError"))
            if request_id and ("compute", request_id) in STATE["request_ids"]:
                return 200, public(STATE["operations"][STATE["request_ids"][("compute", request_id)]])
            if key not in STATE["instances"]:
                return compute_error(404, f"The resource 'projects/{project}/zones/{zone}/instances/{name}' "
                                          "was not found", "notFound")
            STATE["instances"][key]["status"] = "STOPPING"

            def finish(o, key=key):
                inst = STATE["instances"].pop(key, None)
                if inst:
                    inst["status"] = "TERMINATED"
                    STATE.setdefault("deleted", []).append(inst)

            op = compute_op(project, zone, "delete", f"{base}/instances/{name}", finish)
            if request_id:
                STATE["request_ids"][("compute", request_id)] = op["name"]
            return hold(fault, 200, public(op))
    m = re.fullmatch(r"operations/([^/]+)(/wait)?", rest)
    if m:
        op = STATE["operations"].get(m.group(1))
        if not op:
            return compute_error(404, f"The resource 'projects/{project}/zones/{zone}/operations/{m.group(1)}' "
                                      "was not found", "notFound")
        if m.group(2):
            deadline = time.time() + 2
            while not op.get("_finished") and time.time() < deadline:
                LOCK.release()
                time.sleep(0.05)
                LOCK.acquire()
                tick()
        return 200, public(op)
    return compute_error(404, f"no such Compute method: {method} {rest}", "notFound")


def model_of(instance):
    return (instance.get("scheduling") or {}).get("provisioningModel") or "STANDARD"


def check_scheduling(scheduling):
    """What Compute Engine refuses in `scheduling`, or None."""
    model = scheduling.get("provisioningModel")
    if model not in (None, "STANDARD", "SPOT"):
        return f"Invalid value for field 'resource.scheduling.provisioningModel': '{model}'."
    action = scheduling.get("instanceTerminationAction")
    if action not in (None, "STOP", "DELETE"):
        return f"Invalid value for field 'resource.scheduling.instanceTerminationAction': '{action}'."
    if model == "SPOT" and scheduling.get("automaticRestart") is True:
        return "Invalid value for field 'resource.scheduling.automaticRestart': 'true'. " \
               "Automatic restart must be false for Spot VMs."
    if model == "SPOT" and scheduling.get("onHostMaintenance") == "MIGRATE":
        return "Invalid value for field 'resource.scheduling.onHostMaintenance': 'MIGRATE'. " \
               "Spot VMs must terminate on host maintenance."
    if "maxRunDuration" in scheduling and action is None:
        return "Invalid value for field 'resource.scheduling.instanceTerminationAction': " \
               "it must be set with maxRunDuration."
    return None


def no_room(project, zone, body):
    """Whether `zone` holds no more instances of the body's provisioning model."""
    model = model_of(body)
    most = STATE["capacity"].get(zone, {}).get(model)
    if most is None:
        return False
    live = [i for (p, z, _), i in STATE["instances"].items()
            if p == project and z == zone and model_of(i) == model]
    return len(live) >= int(most)


def preempt(zone, name):
    """Compute Engine takes a Spot VM back; answers whether there was one to take."""
    for key, inst in list(STATE["instances"].items()):
        if key[1] == zone and key[2] == name and model_of(inst) == "SPOT":
            if (inst.get("scheduling") or {}).get("instanceTerminationAction") == "DELETE":
                inst = STATE["instances"].pop(key)
                inst["status"] = "TERMINATED"
                inst["preempted"] = True
                STATE.setdefault("deleted", []).append(inst)
            else:
                inst["status"] = "TERMINATED"
                inst["preempted"] = True
            return True
    return False


def aggregated(project, query):
    """`instances.aggregatedList`: every zone's instances the filter selects."""
    want = label_filter((query.get("filter") or [""])[0])
    items = {}
    for (p, z, _), i in sorted(STATE["instances"].items()):
        if p == project and matches(i.get("labels", {}), want):
            items.setdefault(f"zones/{z}", {"instances": []})["instances"].append(public(i))
    return 200, {"kind": "compute#instanceAggregatedList", "id": f"projects/{project}/aggregated/instances",
                 "items": items}


# ---- Dataproc -------------------------------------------------------------------------------

def dataproc_op(project, region, cluster, finish_at, finish, kind):
    name = f"projects/{project}/regions/{region}/operations/{uuid.uuid4()}"
    op = {"name": name, "done": False,
          "metadata": {"@type": "type.googleapis.com/google.cloud.dataproc.v1.ClusterOperationMetadata",
                       "clusterName": cluster["clusterName"], "clusterUuid": cluster.get("clusterUuid", ""),
                       "operationType": kind, "description": f"{kind} cluster"},
          "_done_at": finish_at, "_finish": finish}
    STATE["operations"][name] = op
    return op


def dataproc(method, project, region, rest, query, body):
    request_id = (query.get("requestId") or [None])[0]
    m = re.fullmatch(r"clusters(?:/([^/]+))?", rest)
    if m:
        name = m.group(1)
        key = (project, region, name)
        if method == "POST" and name is None:
            fault = take_fault("dataproc", "create")
            if fault and fault["kind"] == "http_error":
                return google_error(fault.get("status", 500), fault.get("message", "boom"),
                                    fault.get("code", "INTERNAL"))
            if request_id and ("dataproc", request_id) in STATE["request_ids"]:
                return 200, public(STATE["operations"][STATE["request_ids"][("dataproc", request_id)]])
            name = body.get("clusterName", "")
            if not re.fullmatch(r"[a-z]([-a-z0-9]{0,49}[a-z0-9])?", name):
                return google_error(400, f"Invalid cluster name '{name}'", "INVALID_ARGUMENT")
            key = (project, region, name)
            if key in STATE["clusters"]:
                return google_error(409, f"Already exists: Failed to create cluster: Cluster "
                                         f"projects/{project}/regions/{region}/clusters/{name}", "ALREADY_EXISTS")
            config = body.setdefault("config", {})
            for role, suffix, default in (("masterConfig", "m", 1), ("workerConfig", "w", 2)):
                group = config.setdefault(role, {})
                count = int(group.get("numInstances", default) or 0)
                group["numInstances"] = count
                if role == "masterConfig":
                    group["instanceNames"] = [f"{name}-m"] if count == 1 else [f"{name}-m-{i}" for i in range(count)]
                else:
                    group["instanceNames"] = [f"{name}-w-{i}" for i in range(count)]
                machine = group.get("machineTypeUri", "n1-standard-4").rsplit("/", 1)[-1]
                if machine not in MACHINE_TYPES:
                    return google_error(400, f"Invalid value for field 'machineTypeUri': '{machine}'",
                                        "INVALID_ARGUMENT")
            secondary = config.get("secondaryWorkerConfig")
            if secondary:
                # Protobuf's JSON takes an enum by name or by number (Google's Rust SDK sends
                # the number).
                kind = secondary.setdefault("preemptibility", "PREEMPTIBLE")
                kind = {0: "PREEMPTIBLE", 1: "NON_PREEMPTIBLE", 2: "PREEMPTIBLE", 3: "SPOT"}.get(kind, kind)
                secondary["preemptibility"] = kind
                if kind not in ("PREEMPTIBLE", "SPOT", "NON_PREEMPTIBLE"):
                    return google_error(400, f"Invalid value for field "
                                             f"'secondaryWorkerConfig.preemptibility': '{kind}'",
                                        "INVALID_ARGUMENT")
                count = int(secondary.get("numInstances", 0) or 0)
                secondary["numInstances"] = count
                secondary["instanceNames"] = [f"{name}-sw-{i}" for i in range(count)]
                secondary.setdefault("machineTypeUri", config["workerConfig"].get("machineTypeUri", ""))
            cluster = dict(body)
            cluster.update({"projectId": project, "clusterUuid": str(uuid.uuid4()),
                            "status": {"state": "CREATING", "stateStartTime": now_rfc3339()}})
            STATE["clusters"][key] = cluster
            error = None
            if fault and fault["kind"] == "op_error":
                error = {"code": fault.get("grpc", 8), "message": fault.get(
                    "message", "Insufficient 'CPUS' quota. Requested 12.0, available 8.0.")}

            def finish(o, key=key, error=error):
                c = STATE["clusters"].get(key)
                o["done"] = True
                if error:
                    o["error"] = error
                    if c:
                        c["status"] = {"state": "ERROR", "detail": error["message"], "stateStartTime": now_rfc3339()}
                elif c:
                    c["status"] = {"state": "RUNNING", "stateStartTime": now_rfc3339()}
                    o["response"] = dict(public(c), **{"@type": "type.googleapis.com/google.cloud.dataproc.v1.Cluster"})

            op = dataproc_op(project, region, cluster, time.time() + STATE["delay"], finish, "CREATE")
            if request_id:
                STATE["request_ids"][("dataproc", request_id)] = op["name"]
            return hold(fault, 200, public(op))
        if method == "GET" and name is None:
            want = label_filter((query.get("filter") or [""])[0])
            items = [public(c) for (p, r, _), c in sorted(STATE["clusters"].items())
                     if p == project and r == region
                     and matches(c.get("labels", {}), want)]
            return 200, {"clusters": items} if items else {}
        if method == "GET":
            if key not in STATE["clusters"]:
                return google_error(404, f"Not found: Cluster projects/{project}/regions/{region}/clusters/{name}",
                                    "NOT_FOUND")
            return 200, public(STATE["clusters"][key])
        if method == "DELETE":
            fault = take_fault("dataproc", "delete")
            if fault and fault["kind"] == "http_error":
                return google_error(fault.get("status", 500), fault.get("message", "boom"),
                                    fault.get("code", "INTERNAL"))
            if request_id and ("dataproc", request_id) in STATE["request_ids"]:
                return 200, public(STATE["operations"][STATE["request_ids"][("dataproc", request_id)]])
            if key not in STATE["clusters"]:
                return google_error(404, f"Not found: Cluster projects/{project}/regions/{region}/clusters/{name}",
                                    "NOT_FOUND")
            cluster = STATE["clusters"][key]
            if cluster["status"]["state"] == "CREATING":
                return google_error(400, f"Cluster {name} is in state CREATING and cannot be deleted now",
                                    "FAILED_PRECONDITION")
            cluster["status"] = {"state": "DELETING", "stateStartTime": now_rfc3339()}

            def finish(o, key=key):
                o["done"] = True
                c = STATE["clusters"].pop(key, None)
                if c:
                    STATE.setdefault("deleted_clusters", []).append(c)
                o["response"] = {"@type": "type.googleapis.com/google.protobuf.Empty"}

            op = dataproc_op(project, region, cluster, time.time() + STATE["delay"], finish, "DELETE")
            if request_id:
                STATE["request_ids"][("dataproc", request_id)] = op["name"]
            return hold(fault, 200, public(op))
    m = re.fullmatch(r"operations/([^/]+)", rest)
    if m:
        name = f"projects/{project}/regions/{region}/operations/{m.group(1)}"
        op = STATE["operations"].get(name)
        if not op:
            return google_error(404, f"Not found: {name}", "NOT_FOUND")
        return 200, public(op)
    return google_error(404, f"no such Dataproc method: {method} {rest}", "NOT_FOUND")


def hold(fault, status, body):
    if fault and fault.get("kind") == "hold":
        return status, body, float(fault.get("seconds", 60))
    return status, body


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            return None

    def _send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, method):
        url = urlparse(self.path)
        query = parse_qs(url.query)
        body = self._body()
        if body is None:
            return self._send(400, {"error": {"code": 400, "message": "body is not JSON"}})
        if url.path.startswith("/_ebb/"):
            return self._control(method, url.path, body)
        held = 0.0
        with LOCK:
            tick()
            STATE["calls"].append({"method": method, "path": url.path,
                                   "requestId": (query.get("requestId") or [None])[0],
                                   "filter": (query.get("filter") or [None])[0], "at": time.time()})
            m = re.fullmatch(r"/compute/v1/projects/([^/]+)/zones/([^/]+)/(.+)", url.path)
            d = re.fullmatch(r"/v1/projects/([^/]+)/regions/([^/]+)/(.+)", url.path)
            a = re.fullmatch(r"/compute/v1/projects/([^/]+)/aggregated/instances", url.path)
            if a and method == "GET":
                answer = aggregated(a.group(1), query)
            elif m:
                answer = compute(method, m.group(1), m.group(2), m.group(3), query, body)
            elif d:
                answer = dataproc(method, d.group(1), d.group(2), d.group(3), query, body)
            else:
                answer = google_error(404, f"no such method: {method} {url.path}", "NOT_FOUND")
            if len(answer) == 3:
                held = answer[2]
            status, reply = answer[0], answer[1]
        if held:
            time.sleep(held)
        self._send(status, reply)

    def _control(self, method, path, body):
        with LOCK:
            tick()
            if path == "/_ebb/faults" and method == "POST":
                STATE["faults"].append(body)
                return self._send(200, {})
            if path == "/_ebb/faults" and method == "DELETE":
                STATE["faults"].clear()
                return self._send(200, {})
            if path == "/_ebb/calls":
                return self._send(200, STATE["calls"])
            if path == "/_ebb/config" and method == "POST":
                STATE["delay"] = float(body.get("delay", STATE["delay"]))
                if "natPrefix" in body:
                    STATE["nat"] = [body["natPrefix"], int(body.get("natStart", 1))]
                if "capacity" in body:
                    STATE["capacity"] = body["capacity"]
                return self._send(200, {})
            if path == "/_ebb/preempt" and method == "POST":
                return self._send(200, {"preempted": preempt(body.get("zone"), body.get("name"))})
            if path == "/_ebb/resources":
                return self._send(200, {
                    "instances": [public(i) for i in STATE["instances"].values()],
                    "deletedInstances": [public(i) for i in STATE.get("deleted", [])],
                    "clusters": [public(c) for c in STATE["clusters"].values()],
                    "deletedClusters": [public(c) for c in STATE.get("deleted_clusters", [])],
                })
        return self._send(404, {"error": {"code": 404, "message": f"no control {method} {path}"}})

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def do_DELETE(self):
        self._handle("DELETE")

    def do_PATCH(self):
        self._handle("PATCH")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.5)
    args = parser.parse_args()
    STATE["delay"] = args.delay
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
