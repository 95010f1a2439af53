"""An Ansible callback that writes what happened, task by task and host by host, as JSON to
the file named by EBB_ANSIBLE_EVENTS: the ebb automator decides an action's outcome from these
events (a host's failures and unreachable counts), never from ansible-playbook's exit code."""

import json
import os

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
    name: ebb_events
    type: aggregate
    short_description: ebb's record of a playbook run, as JSON
    description: Writes every task result and the final stats to $EBB_ANSIBLE_EVENTS.
"""


def _part(result, name):
    """The host, task or result of a task result (public in ansible-core 2.19, private before)."""
    return getattr(result, name, None) or getattr(result, "_" + name)


def _tail(text, size=2000):
    text = text if isinstance(text, str) else json.dumps(text)
    return text[-size:]


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "ebb_events"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.events = []

    def _record(self, status, result):
        host = _part(result, "host").get_name()
        task = _part(result, "task").get_name()
        data = _part(result, "result")
        event = {"status": status, "host": host, "task": task,
                 "changed": bool(data.get("changed", False))}
        # A loop's failure is in its items: the first failed item says why.
        items = [i for i in data.get("results", []) if isinstance(i, dict)]
        failed = next((i for i in items if i.get("failed") or i.get("unreachable")), None)
        source = dict(data, **{k: v for k, v in (failed or {}).items() if k in ("msg", "stdout", "stderr", "rc")})
        for key in ("msg", "stdout", "stderr", "rc"):
            if key in source and source[key] not in (None, ""):
                event[key] = source[key] if key == "rc" else _tail(source[key])
        self.events.append(event)

    def v2_runner_on_ok(self, result):
        self._record("ok", result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record("ignored" if ignore_errors else "failed", result)

    def v2_runner_on_unreachable(self, result):
        self._record("unreachable", result)

    def v2_runner_on_skipped(self, result):
        self._record("skipped", result)

    def v2_playbook_on_stats(self, stats):
        hosts = {h: stats.summarize(h) for h in sorted(stats.processed.keys())}
        custom = {k: v for k, v in (getattr(stats, "custom", None) or {}).items()}
        path = os.environ.get("EBB_ANSIBLE_EVENTS")
        if path:
            with open(path, "w") as f:
                json.dump({"events": self.events, "stats": hosts, "custom": custom}, f, default=str)
