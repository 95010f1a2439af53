"""The moto EC2 server the aws-ec2 tests run against, with fault injection.

Binds 127.0.0.1 on a free port, prints "listening <port>" and serves until killed. Moto
checks AMIs and instance types here, as EC2 does. Besides the AWS APIs it answers:

  POST   /_ebb/faults     {"action": "RunInstances", "delay": 5}
                              answer that action late, after it took effect (a lost reply)
                          {"action": "RunInstances", "status": 503,
                           "code": "RequestLimitExceeded", "times": 2}
                              fail that action before it takes effect ("times" omitted: always)
                          {..., "match": {"Placement.AvailabilityZone": "us-east-1a",
                                          "InstanceMarketOptions.MarketType": "spot"}}
                              only the calls whose parameters say so (moto itself never
                              runs out of capacity: this is how a full zone is made)
  DELETE /_ebb/faults     clear every fault
  GET    /_ebb/calls      every EC2 call so far: {"action", "filters": {name: [values]},
                          "params": RunInstances' placement, subnet, market and spot options}
  GET    /_ebb/instances  every instance: id, region, state, tags, image, type, user data,
                          shutdown behaviour

RunInstances honours its ClientToken as EC2 does (moto ignores it): a second call with a token
already used answers the first call's reservation and launches nothing.
"""

import io
import json
import os
import sys
import threading
import time
import traceback
import urllib.parse

os.environ.setdefault("MOTO_ENABLE_AMI_VALIDATION", "true")
os.environ.setdefault("MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION", "true")

from moto.ec2.models import ec2_backends  # noqa: E402
from moto.moto_server.werkzeug_app import (  # noqa: E402
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server  # noqa: E402

ERROR = """<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>\
<RequestID>ebb-fault</RequestID></Response>"""


class Faults:
    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()
        self.rules = []
        self.calls = []
        self.tokens = {}

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO", "").startswith("/_ebb/"):
            return self.control(environ, start_response)
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        environ["wsgi.input"] = io.BytesIO(body)
        query = body.decode("utf-8", "replace") + "&" + environ.get("QUERY_STRING", "")
        params = urllib.parse.parse_qs(query)
        action = params.get("Action", [""])[0]
        given = {k: v[0] for k, v in params.items() if k.startswith(PARAMS)}
        with self.lock:
            self.calls.append({"action": action, "filters": filters(params), "params": given})
            rule = next((r for r in self.rules if r["action"] == action
                         and all(given.get(k) == v for k, v in r.get("match", {}).items())),
                        None)
            if rule is not None and "times" in rule:
                rule["times"] -= 1
                if rule["times"] <= 0:
                    self.rules.remove(rule)
        if rule is not None and "status" in rule:
            status = rule["status"]
            text = ERROR.format(code=rule.get("code", "InternalError"),
                                message=rule.get("message", "injected by the test"))
            start_response(f"{status} Injected", [("Content-Type", "text/xml")])
            return [text.encode()]
        token = params.get("ClientToken", [None])[0] if action == "RunInstances" else None
        with self.lock:
            earlier = self.tokens.get(token) if token else None
        if earlier is not None:
            start_response(earlier[0], earlier[1])
            return earlier[2]
        captured = {}

        def capture(status, headers, exc_info=None):
            captured["status"], captured["headers"] = status, headers

        chunks = list(self.app(environ, capture))
        if token and captured["status"].startswith("200"):
            with self.lock:
                self.tokens[token] = (captured["status"], captured["headers"], chunks)
        if rule is not None and "delay" in rule:
            time.sleep(float(rule["delay"]))
        start_response(captured["status"], captured["headers"])
        return chunks

    def control(self, environ, start_response):
        try:
            return self.answer(environ, start_response)
        except Exception:
            start_response("500 Internal Server Error", [("Content-Type", "text/plain")])
            return [traceback.format_exc().encode()]

    def answer(self, environ, start_response):
        path, method = environ["PATH_INFO"], environ["REQUEST_METHOD"]
        answer = {}
        if path == "/_ebb/faults" and method == "POST":
            length = int(environ.get("CONTENT_LENGTH") or 0)
            with self.lock:
                self.rules.append(json.loads(environ["wsgi.input"].read(length)))
        elif path == "/_ebb/faults" and method == "DELETE":
            with self.lock:
                self.rules.clear()
        elif path == "/_ebb/calls":
            with self.lock:
                answer = list(self.calls)
        elif path == "/_ebb/instances":
            answer = instances()
        else:
            start_response("404 Not Found", [("Content-Type", "application/json")])
            return [b"{}"]
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps(answer).encode()]


# The RunInstances parameters /_ebb/calls shows and faults may match.
PARAMS = ("Placement.", "SubnetId", "InstanceMarketOptions.", "ClientToken")


def filters(params):
    out = {}
    for key, values in params.items():
        parts = key.split(".")
        if len(parts) == 3 and parts[0] == "Filter" and parts[2] == "Name":
            prefix = f"Filter.{parts[1]}.Value."
            out[values[0]] = [v for k, vs in sorted(params.items())
                              if k.startswith(prefix) for v in vs]
    return out


def instances():
    out = []
    for account, regions in ec2_backends.items():
        for region, backend in regions.items():
            for reservation in backend.reservations.values():
                for i in reservation.instances:
                    user_data = i.user_data.decode() if i.user_data else None
                    out.append({
                        "id": i.id,
                        "region": region,
                        "state": i._state.name,
                        "tags": {t["key"]: t["value"] for t in i.get_tags()},
                        "imageId": i.image_id,
                        "instanceType": i.instance_type,
                        "userData": user_data,
                        "shutdownBehavior": i.instance_initiated_shutdown_behavior,
                        "zone": i._placement.zone,
                        "lifecycle": getattr(i, "lifecycle", None),
                    })
    return out


def main():
    app = Faults(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
    print(f"listening {server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
