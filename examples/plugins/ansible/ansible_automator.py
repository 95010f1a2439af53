#!/usr/bin/env python3
"""An Ansible automator for ebb (plugin protocol 1).

A template's service action names it, `{"type": "ansible", "playbook": "..."}`, and ebb sends
one `run` request per attempt: the action's fields, the node, the cluster. This plugin writes a
private directory for the attempt (the playbook, a one-host inventory, the extra variables, the
node's key and known hosts, all 0600 in a 0700 directory), runs `ansible-playbook` in a process
group of its own, and answers from the events its callback (`callback_plugins/ebb_events.py`)
records, never from the exit code (4 means both "unreachable" and "parse error"; "no hosts
matched" exits 0).

  - A node reached over SSH is reached with the profile's login; its host key is checked as
    ebb checks it: the profile's `sshKnownHosts`, or the key ebb pinned at first contact
    (scanned, and kept only if its fingerprint is the pinned one), or, at a first contact under
    `accept-new`, the key it shows, which is then kept.
  - A node on this host (`local`) runs the playbook with a local connection in its directory.
  - Facts: what the playbook reports with `set_stats` (scalars) become the node's facts.
  - Operator data: everything under `ebb` (the run's config, which an operator replaces with
    `configure`; the nodes and their facts, which programs on the nodes can write) is marked
    unsafe, so Ansible renders none of it as a template on this host (a lookup in it would
    run on the controller, the server's host). The template's `vars` are the template
    author's, and stay templates.

Configuration (optional), `config.json` beside this file: {"ansiblePlaybook": "/path/to/it"}
(default: `ansible-playbook` on the server's PATH).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

NAME = "ansible"
PROTOCOL = 1
HERE = os.path.dirname(os.path.abspath(__file__))


class Refusal(Exception):
    def __init__(self, message, retryable=False):
        super().__init__(message)
        self.retryable = retryable


def log(*parts):
    print("ansible automator:", *parts, file=sys.stderr, flush=True)


def playbook_command():
    path = os.path.join(HERE, "config.json")
    if os.path.exists(path):
        with open(path) as f:
            configured = json.load(f).get("ansiblePlaybook")
        if configured:
            return configured
    found = shutil.which("ansible-playbook")
    if not found:
        raise Refusal("ansible-playbook is not installed: install ansible-core, or name it as "
                      "ansiblePlaybook in the plugin's config.json")
    return found


def private(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def known_hosts(ssh, directory):
    """The known_hosts file and StrictHostKeyChecking value for the node, as ebb checks keys."""
    path = os.path.join(directory, "known_hosts")
    checking = ssh.get("hostKeyChecking", "accept-new")
    if checking == "yes":
        private(path, ssh.get("knownHosts", ""))
        return path, "yes"
    pinned = ssh.get("pinnedKey")
    if checking == "accept-new" and pinned:
        scan = subprocess.run(
            ["ssh-keyscan", "-T", "10", "-p", str(ssh["port"]), ssh["host"]],
            capture_output=True, text=True, timeout=30)
        kept = []
        for line in scan.stdout.splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            printed = subprocess.run(["ssh-keygen", "-lf", "-", "-E", "sha256"], input=line,
                                     capture_output=True, text=True, timeout=10)
            words = printed.stdout.split()
            if len(words) > 1 and words[1] == pinned:
                kept.append(line)
        if not kept:
            raise Refusal(f"the host key of {ssh['host']}:{ssh['port']} is not the one ebb "
                          f"pinned ({pinned}), or the node cannot be reached", retryable=True)
        private(path, "\n".join(kept) + "\n")
        return path, "yes"
    private(path, "")
    return path, ("no" if checking == "no" else "accept-new")


def inventory(node, directory, python):
    """A one-host inventory for the node (INI), and the host's name in it."""
    host = node["name"]
    ssh = node.get("ssh")
    if ssh is None:
        line = f"{host} ansible_connection=local ansible_python_interpreter={sys.executable}"
    else:
        key = os.path.join(directory, "key")
        private(key, ssh["privateKey"].rstrip("\n") + "\n")
        hosts_file, strict = known_hosts(ssh, directory)
        common = (f"-o UserKnownHostsFile={hosts_file} -o StrictHostKeyChecking={strict} "
                  f"-o ControlMaster=no -o BatchMode=yes")
        line = (f"{host} ansible_host={ssh['host']} ansible_port={ssh['port']} "
                f"ansible_user={ssh['user']} ansible_ssh_private_key_file={key} "
                f"ansible_python_interpreter={python} ansible_ssh_transfer_method=piped "
                f"ansible_ssh_common_args='{common}'")
    private(os.path.join(directory, "inventory.ini"), f"[ebb]\n{line}\n")
    return host


def unsafe(value):
    """`value` with every string in it marked unsafe, as Ansible reads JSON variables: text,
    never a template to render."""
    if isinstance(value, str):
        return {"__ansible_unsafe": value}
    if isinstance(value, dict):
        return {k: unsafe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unsafe(v) for v in value]
    return value


def run(request):
    action, node, cluster = request["action"], request["node"], request["cluster"]
    fields = action.get("fields", {})
    playbook = fields.get("playbook")
    if not isinstance(playbook, str) or not playbook.strip():
        raise Refusal("field 'playbook' must be a playbook (YAML text)")
    variables = fields.get("vars", {})
    if not isinstance(variables, dict):
        raise Refusal("field 'vars' must be a map of variables")
    directory = tempfile.mkdtemp(prefix="attempt-", dir=attempts_dir())
    try:
        return attempt(request, action, node, cluster, fields, playbook, variables, directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def attempt(request, action, node, cluster, fields, playbook, variables, directory):
    python = fields.get("python") or "python3"
    if not isinstance(python, str) or any(c.isspace() or c in "'\"" for c in python):
        raise Refusal("field 'python' must be an interpreter's path or name, without spaces")
    host = inventory(node, directory, python)
    private(os.path.join(directory, "playbook.yml"), playbook)
    ssh = node.get("ssh") or {}
    remote = ssh.get("remoteDir")
    if remote and not remote.startswith("/"):
        remote = "~/" + remote
    ebb = {
        "dir": node.get("workDir") or remote,
        "run": cluster.get("run"), "node": node["name"], "service": action["service"],
        "action": action["action"], "config": cluster.get("config"),
        "nodes": cluster.get("nodes", []), "address": node.get("address"),
        "workDir": node.get("workDir"), "remoteDir": remote,
    }
    # Everything in `ebb` is operator data (the run's config, which `configure` replaces; the
    # nodes and their facts, which programs on the nodes can write): marked unsafe, Ansible
    # never renders it as a template on this host. The template's own vars stay templates.
    private(os.path.join(directory, "vars.json"), json.dumps({**variables, "ebb": unsafe(ebb)}))
    events = os.path.join(directory, "events.json")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ["HOME"],
        "LANG": "C.UTF-8",
        # What ansible and a local node's modules unpack goes in the attempt's directory, removed
        # with it (a module killed at the time limit cleans nothing up itself).
        "TMPDIR": os.path.join(directory, "tmp"),
        "ANSIBLE_HOME": os.path.join(directory, "ansible"),
        "ANSIBLE_LOCAL_TEMP": os.path.join(directory, "tmp"),
        # A local node's modules run from here, not from the server user's ~/.ansible.
        "ANSIBLE_REMOTE_TEMP": (os.path.join(directory, "remote-tmp") if node.get("ssh") is None
                                else "~/.ansible/tmp"),
        "ANSIBLE_CALLBACK_PLUGINS": os.path.join(HERE, "callback_plugins"),
        "ANSIBLE_CALLBACKS_ENABLED": "ebb_events",
        "ANSIBLE_SHOW_CUSTOM_STATS": "true",
        "ANSIBLE_NOCOLOR": "true",
        "ANSIBLE_RETRY_FILES_ENABLED": "false",
        "ANSIBLE_HOST_KEY_CHECKING": "true",
        "ANSIBLE_CONFIG": os.path.join(directory, "ansible.cfg"),
        "EBB_ANSIBLE_EVENTS": events,
    }
    private(env["ANSIBLE_CONFIG"], "[defaults]\n")
    os.makedirs(env["TMPDIR"], mode=0o700, exist_ok=True)
    command = [playbook_command(), "-i", os.path.join(directory, "inventory.ini"),
               "-e", "@" + os.path.join(directory, "vars.json"), "--limit", host,
               os.path.join(directory, "playbook.yml")]
    if fields.get("become") in (True, "true"):
        command.insert(1, "--become")
    cwd = node.get("workDir") or directory
    limit = max(1, int(request.get("timeout") or 600))
    started = time.monotonic()
    spared = below()
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, text=True)
    try:
        output, _ = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        kill_tree(spared)
        output, _ = proc.communicate()
        reap()
        raise Refusal(f"ansible-playbook did not finish within {limit}s: "
                      f"{output[-1500:]}", retryable=True)
    reap()
    took = time.monotonic() - started
    log(f"{action['service']} {action['action']} on {host}: exit {proc.returncode} "
        f"in {took:.1f}s")
    return outcome(host, events, output, proc.returncode)


def become_subreaper():
    """Makes this process the reaper of whatever its children leave behind (Linux), so that
    what ansible-playbook starts stays in this process's tree even when it puts it in a
    session of its own, or its parent dies: kill_tree then finds all of it."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def processes():
    """Every live process: pid -> parent pid (zombies left out)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            out[int(entry)] = int(fields[1])
    return out


def below():
    """The processes below this one."""
    parents = processes()
    found, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier and p not in found}
        found |= frontier
    return found


def kill_tree(spared):
    """Kills every process below this one but `spared` (what earlier actions started and left
    running, a local node's daemon), round after round until none is left: a process forked
    while a round ran, or orphaned by it, is found by the next."""
    for _ in range(100):
        doomed = below() - spared
        if not doomed:
            return
        for pid in doomed:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.02)


def reap():
    """Reaps the orphans this process inherited as their subreaper, once they ended."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def outcome(host, events_path, output, code):
    """The action's outcome from the callback's events: the node's stats must be there."""
    try:
        with open(events_path) as f:
            record = json.load(f)
    except (OSError, ValueError):
        raise Refusal(f"ansible-playbook ran no play (exit {code}): {output[-1500:]}")
    stats = record.get("stats", {}).get(host)
    if stats is None:
        raise Refusal(f"no play ran on {host} (does the playbook target 'all' or 'ebb'?): "
                      f"{output[-1000:]}")
    events = [e for e in record.get("events", []) if e.get("host") == host]
    if stats.get("unreachable"):
        why = next((e.get("msg", "") for e in events if e["status"] == "unreachable"), "")
        raise Refusal(f"{host} is unreachable: {why}", retryable=True)
    if stats.get("failures"):
        failed = next((e for e in events if e["status"] == "failed"), {})
        detail = failed.get("msg") or failed.get("stderr") or failed.get("stdout") or ""
        raise Refusal(f"task '{failed.get('task', '?')}' failed on {host}: {detail}")
    facts = {}
    custom = record.get("custom", {})
    for scope in ("_run", host):
        for key, value in (custom.get(scope) or {}).items():
            if isinstance(value, (str, int, float, bool)):
                facts[str(key)] = str(value).lower() if isinstance(value, bool) else str(value)
    summary = [f"{e['status']}{' (changed)' if e.get('changed') else ''}: {e['task']}"
               for e in events]
    summary.append(f"{host}: ok={stats.get('ok', 0)} changed={stats.get('changed', 0)} "
                   f"failed=0 skipped={stats.get('skipped', 0)}")
    return {"facts": facts, "output": "\n".join(summary)}


def attempts_dir():
    """This process's directory of attempts: `$HOME/attempts/<pid>`."""
    path = os.path.join(os.environ["HOME"], "attempts", str(os.getpid()))
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def sweep():
    """Removes the attempts of processes that are gone (ebb kills a process that hangs: what
    its attempt wrote, the node's key included, must not stay on disk)."""
    root = os.path.join(os.environ["HOME"], "attempts")
    for name in os.listdir(root) if os.path.isdir(root) else []:
        if name.isdigit() and not os.path.exists(f"/proc/{name}"):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def serve():
    become_subreaper()
    sweep()
    for line in sys.stdin:
        request = json.loads(line)
        answer = {"call": request["call"]}
        try:
            if request["method"] == "hello":
                answer["result"] = {"protocol": PROTOCOL, "name": NAME, "version": "1.0.0"}
            elif request["method"] == "run":
                answer["result"] = run(request)
            else:
                raise Refusal(f"an automator does not answer {request['method']}")
        except Refusal as e:
            answer["error"] = {"message": str(e), "retryable": e.retryable}
        except (OSError, subprocess.SubprocessError) as e:
            answer["error"] = {"message": f"{type(e).__name__}: {e}", "retryable": True}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()
