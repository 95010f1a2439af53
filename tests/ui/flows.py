"""The web UI's flows, driven in a real browser (Debian's chromium, headless, through
Playwright) against a real ebb server that tests/api/ui.rs started and filled.

Usage: flows.py FLOW, with the server in the environment:
  EBB_URL        the server's base URL
  EBB_TOKEN      an instance-admin token
  EBB_SHOTS      where screenshots go
  EBB_...        what each flow needs besides (see each flow)

A flow raises (and the process exits non-zero, printing why) as soon as something a user
would see is not there. Each waits on what the page shows, never on a fixed sleep.
"""

import json
import os
import re
import sys
import urllib.request

from playwright.sync_api import expect, sync_playwright

URL = os.environ["EBB_URL"]
TOKEN = os.environ["EBB_TOKEN"]
SHOTS = os.environ.get("EBB_SHOTS", "target/ui-screenshots")
# Long enough for a run on a loaded machine, short enough to fail a hung test.
LIMIT = 60_000


def api(method, path, token=TOKEN, body=None):
    """Calls the REST API; returns (status, JSON)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(URL + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + token)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def shot(page, name):
    os.makedirs(SHOTS, exist_ok=True)
    page.screenshot(path=os.path.join(SHOTS, name + ".png"), full_page=True)


def sign_in(page, token=TOKEN):
    page.goto(URL + "/")
    expect(page).to_have_url(URL + "/ui/login?next=/ui")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()


def never_reloads(page):
    """Marks the document; `reloaded(page)` is true once another document replaced it."""
    page.evaluate("window.__ebbMark = 1")
    return lambda: page.evaluate("window.__ebbMark !== 1")


def flow_sign_in(page):
    """A wrong token is refused on the page; the right one opens the overview; signing out
    ends the session (the cookie is HttpOnly: no script can read it)."""
    page.goto(URL + "/")
    expect(page).to_have_url(URL + "/ui/login?next=/ui")
    page.get_by_label("Token").fill("ebb_" + "0" * 64)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("not valid")
    page.get_by_label("Token").fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    assert page.evaluate("document.cookie") == "", "the session cookie is HttpOnly"
    cookie = [c for c in page.context.cookies() if c["name"] == "ebb_session"][0]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict", cookie
    # A page asked for before signing in is where sign-in leads.
    page.get_by_role("button", name="Sign out").click()
    page.goto(URL + "/ui/templates")
    expect(page).to_have_url(URL + "/ui/login?next=/ui/templates")
    page.get_by_label("Token").fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Cluster templates")).to_be_visible()


def flow_profile_form(page):
    """A sim profile made through the widget form: a refused value is shown at its field,
    and the fixed switch and the values reach the profile. Needs EBB_STATE_DIR."""
    sign_in(page)
    page.get_by_role("link", name="Profiles", exact=True).click()
    page.get_by_role("link", name="New profile").click()
    page.get_by_label("Scope").select_option("default")
    page.locator("input[name=provisioner][value=sim]").check()
    page.get_by_role("button", name="Next").click()
    expect(page.get_by_role("heading", name="New sim profile")).to_be_visible()
    # Every group of the widget is drawn, required marks and defaults included.
    for legend in ["Cluster", "Services", "Latency", "Fault injection", "Retries"]:
        expect(page.locator("legend", has_text=legend)).to_be_visible()
    expect(page.get_by_label("Retry budget")).to_have_value("5m")
    page.get_by_label("Name", exact=True).fill("ui-sim")
    page.get_by_label("Label").fill("Made in the UI")
    page.get_by_label("Keep after a failed run").fill("2h")
    page.get_by_label("Nodes", exact=True).fill("0")
    page.get_by_label("State directory").fill(os.environ["EBB_STATE_DIR"])
    page.locator("input[name='fixed.stateDir']").check()
    page.get_by_role("button", name="Save profile").click()
    # Refused: the error is next to the Nodes field, and what was typed is kept.
    nodes = page.locator("[data-property=nodes]")
    expect(nodes.get_by_role("alert")).to_be_visible()
    expect(nodes).to_have_class("field invalid")
    expect(page.get_by_label("Nodes", exact=True)).to_have_attribute("aria-invalid", "true")
    expect(page.get_by_label("State directory")).to_have_value(os.environ["EBB_STATE_DIR"])
    expect(page.get_by_label("Keep after a failed run")).to_have_value("2h")
    shot(page, "profile-form-error")
    page.get_by_label("Nodes", exact=True).fill("2")
    page.get_by_role("button", name="Save profile").click()
    expect(page.get_by_role("heading", name="USER:ui-sim")).to_be_visible()
    expect(page.get_by_text("ENABLED").first).to_be_visible()
    status, profile = api("GET", "/v3/namespaces/default/profiles/ui-sim")
    assert status == 200, profile
    props = {p["name"]: p for p in profile["provisioner"]["properties"]}
    assert props["nodes"]["value"] == "2", props
    assert props["stateDir"]["isEditable"] is False, props
    assert props["nodes"]["isEditable"] is True, props
    assert profile["keepalive"]["failed"] == 7200, profile
    assert profile["label"] == "Made in the UI", profile


def flow_plugin_profile(page):
    """A profile of a plugin provisioner made through the form its widget draws: the plugin
    (pcloud) is listed on the Plugins page; its own check of a property (a relative root) is
    shown at the field. Needs EBB_CLOUD_DIR."""
    sign_in(page)
    page.get_by_role("link", name="Plugins", exact=True).click()
    expect(page.get_by_role("heading", name="Plugins")).to_be_visible()
    row = page.locator("tr", has_text="pcloud")
    expect(row).to_contain_text("1.0.0")
    expect(row).to_contain_text("loaded")
    shot(page, "plugins")
    page.get_by_role("link", name="Profiles", exact=True).click()
    page.get_by_role("link", name="New profile").click()
    page.get_by_label("Scope").select_option("default")
    expect(page.locator("label", has_text="Process cloud (plugin)")).to_contain_text("plugin 1.0.0")
    page.locator("input[name=provisioner][value=pcloud]").check()
    page.get_by_role("button", name="Next").click()
    expect(page.get_by_role("heading", name="New pcloud profile")).to_be_visible()
    for legend in ["Cluster", "Cloud", "Services", "Retries"]:
        expect(page.locator("legend", has_text=legend)).to_be_visible()
    page.get_by_label("Name", exact=True).fill("ui-pcloud")
    page.get_by_label("Nodes", exact=True).fill("2")
    page.get_by_label("Boot delay").fill("1s")
    page.get_by_label("Root").fill("relative/dir")
    page.get_by_role("button", name="Save profile").click()
    root = page.locator("[data-property=root]")
    expect(root.get_by_role("alert")).to_contain_text("absolute path")
    page.get_by_label("Root").fill(os.environ["EBB_CLOUD_DIR"])
    page.get_by_role("button", name="Save profile").click()
    expect(page.get_by_role("heading", name="USER:ui-pcloud")).to_be_visible()
    status, profile = api("GET", "/v3/namespaces/default/profiles/ui-pcloud")
    assert status == 200, profile
    props = {p["name"]: p["value"] for p in profile["provisioner"]["properties"]}
    assert props == {"nodes": "2", "bootDelay": "1s", "root": os.environ["EBB_CLOUD_DIR"],
                     "retryBudget": "5m"}, props


def flow_toggle(page):
    """Disable and enable a profile from the list; a refusal (409) shows its reason."""
    sign_in(page)
    page.goto(URL + "/ui/profiles?namespace=default")
    row = page.locator("tr", has=page.get_by_role("link", name="toggled", exact=True))
    row.get_by_role("button", name="Disable toggled").click()
    expect(row.get_by_text("DISABLED")).to_be_visible()
    assert api("GET", "/v3/namespaces/default/profiles/toggled/status")[1] == "DISABLED"
    row.get_by_role("button", name="Enable toggled").click()
    expect(row.get_by_text("ENABLED")).to_be_visible()
    assert api("GET", "/v3/namespaces/default/profiles/toggled/status")[1] == "ENABLED"
    # SYSTEM:native cannot be disabled: the 409's reason is shown.
    native = page.locator("tr", has=page.get_by_role("link", name="native", exact=True))
    native.get_by_role("button", name="Disable native").click()
    expect(page.locator("#notice").get_by_role("alert")).to_contain_text("native")
    shot(page, "profiles")
    # A built-in profile's page offers no edit.
    native.get_by_role("link", name="native", exact=True).click()
    expect(page.get_by_text("Ships with ebb")).to_be_visible()
    assert page.get_by_role("link", name="Edit").count() == 0


def flow_run_live(page):
    """Start a run from its program's page (with the profile previewed first) and watch it
    reach COMPLETED without reloading: status, events and output arrive by themselves."""
    sign_in(page)
    page.goto(URL + "/ui/ns/default/apps/live/p")
    page.get_by_label("Profile").select_option("USER:quick")
    page.get_by_label("Property overrides").fill("nodes=2")
    page.get_by_role("button", name="Preview the profile").click()
    preview = page.locator("#preview")
    expect(preview).to_contain_text("This run would use USER:quick")
    expect(preview.locator("tr", has_text="nodes")).to_contain_text("runtime arguments")
    page.get_by_role("button", name="Start", exact=True).click()
    expect(page.get_by_role("heading", name="Run ", exact=False).first).to_be_visible()
    expect(page).to_have_url(__import__("re").compile(r".*/runs/[0-9a-f-]{36}$"))
    reloaded = never_reloads(page)
    status = page.locator("#status")
    expect(status.get_by_text("RUNNING", exact=True)).to_be_visible(timeout=LIMIT)
    os.makedirs(os.path.dirname(os.environ["EBB_GO"]), exist_ok=True)
    open(os.environ["EBB_GO"], "w").close()
    expect(status.get_by_text("COMPLETED", exact=True)).to_be_visible(timeout=LIMIT)
    expect(status.get_by_text("DEPROVISIONED", exact=True)).to_be_visible(timeout=LIMIT)
    expect(page.locator("#events")).to_contain_text("DEPROVISIONED", timeout=LIMIT)
    expect(page.locator("#output")).to_contain_text("finished the work", timeout=LIMIT)
    assert not reloaded(), "the page was reloaded"
    shot(page, "run")


def flow_waiting(page):
    """A failed run's cluster kept WAITING: extended by an hour, then deprovisioned, from
    the run's page. Needs EBB_RUN (the run's UI path) and EBB_API (its API path)."""
    sign_in(page)
    page.goto(URL + os.environ["EBB_RUN"])
    status = page.locator("#status")
    expect(status.get_by_text("WAITING", exact=True)).to_be_visible(timeout=LIMIT)
    expect(status.get_by_text("FAILED", exact=True)).to_be_visible()
    before = api("GET", os.environ["EBB_API"])[1]["cluster"]["expiresAt"]
    expect(status.locator("time.deadline")).to_contain_text("in ")
    status.get_by_role("button", name="+1h").click()
    expect(page.locator("#notice")).to_contain_text("kept until")
    after = api("GET", os.environ["EBB_API"])[1]["cluster"]["expiresAt"]
    assert after == before + 3600, (before, after)
    # The deadline shown follows: more than an hour away now.
    expect(status.locator("time.deadline")).to_have_attribute("data-deadline", str(after))
    shot(page, "run-waiting")
    # The overview counts the kept cluster and lists the failure with its kind.
    page.get_by_role("link", name="Overview").click()
    failures = page.locator("section", has=page.get_by_role("heading", name="Recent failures"))
    expect(failures).to_contain_text("program")
    expect(page.locator(".card", has_text="clusters now")).to_contain_text("1")
    shot(page, "overview")
    page.goto(URL + os.environ["EBB_RUN"])
    page.once("dialog", lambda d: d.accept())
    status.get_by_role("button", name="Deprovision now").click()
    expect(status.get_by_text("DEPROVISIONED", exact=True)).to_be_visible(timeout=LIMIT)
    run = api("GET", os.environ["EBB_API"])[1]
    assert run["cluster"]["status"] == "DEPROVISIONED", run


def flow_timeline(page):
    """The operations of a template cluster as a timeline per node, with the plan of its
    template drawn as a DAG. Needs EBB_RUN."""
    sign_in(page)
    page.goto(URL + os.environ["EBB_RUN"])
    ops = page.locator("#operations")
    create = ops.locator("section.operation", has_text="create")
    expect(create.locator(".gantt")).to_be_visible(timeout=LIMIT)
    lanes = create.locator(".gantt .lane .node")
    expect(lanes).to_have_text(["master", "worker-1", "worker-2"])
    assert create.locator(".bar.ok").count() >= 9, "a bar per task attempt"
    # The retried attempts are marked.
    expect(create.locator(".bar.retry").first).to_be_attached()
    expect(create.locator(".bar.failed").first).to_be_attached()
    # The table alternative says the same.
    create.get_by_text("as a table").click()
    expect(create.locator("table")).to_contain_text("install")
    shot(page, "timeline")
    page.goto(URL + "/ui/system/templates/echo-services")
    page.get_by_label("Nodes", exact=True).fill("3")
    page.get_by_role("button", name="Plan").click()
    dag = page.locator("svg.dag")
    expect(dag).to_be_visible()
    assert dag.locator("rect").count() >= 9
    expect(page.locator("#plan")).to_contain_text("stages")
    shot(page, "plan")


def flow_viewer(page):
    """A viewer sees runs and profiles, and no button that would change them; the actions
    are refused to it anyway. Needs EBB_VIEWER (a viewer token of default) and EBB_RUN."""
    sign_in(page, os.environ["EBB_VIEWER"])
    page.goto(URL + os.environ["EBB_RUN"])
    expect(page.locator("#status")).to_contain_text("Program")
    assert page.locator("#status button").count() == 0, "no command buttons"
    page.goto(URL + "/ui/profiles?namespace=default")
    expect(page.get_by_role("heading", name="Profiles")).to_be_visible()
    assert page.locator("main button").count() == 0, "no status switches"
    assert page.get_by_role("link", name="New profile").count() == 0
    page.goto(URL + "/ui/ns/default/apps/live/p")
    assert page.get_by_role("button", name="Start", exact=True).count() == 0
    # Even sent by hand, from the page itself, a command is refused.
    code = page.evaluate(
        """async (path) => (await fetch(path + '/stop', {method: 'POST',
               headers: {'HX-Request': 'true'}})).status""",
        os.environ["EBB_RUN"],
    )
    assert code == 403, code
    shot(page, "viewer")


def flow_first_steps(page):
    """What a new user does first, from the UI alone: a namespace, a secure key (whose value
    is never shown again), an app deployed and started, a janitor dry run."""
    sign_in(page)
    page.get_by_role("link", name="Namespaces").click()
    page.get_by_label("New namespace").fill("team-a")
    page.get_by_label("Description").fill("The first team")
    page.get_by_role("button", name="Create").click()
    expect(page.get_by_role("link", name="team-a")).to_be_visible()
    page.get_by_role("link", name="Secure keys").click()
    page.get_by_label("Name", exact=True).fill("db-pass")
    page.get_by_label("Value").fill("s3cret-value")
    page.get_by_role("button", name="Save key").click()
    expect(page.get_by_text("db-pass", exact=True)).to_be_visible()
    assert "s3cret-value" not in page.content(), "a secure key's value is never shown"
    # A refused definition says what is wrong, and deploys nothing.
    page.get_by_role("link", name="Apps").click()
    page.get_by_label("Name", exact=True).fill("hello")
    page.get_by_label("Definition").fill('{"programs": [{"type": "workflows", "name": "hi", "command": "not a list"}]}')
    page.get_by_role("button", name="Deploy").click()
    expect(page.locator("#notice").get_by_role("alert")).to_contain_text("command")
    page.get_by_label("Definition").fill(
        '{"programs": [{"type": "workflows", "name": "hi", "command": ["sh", "-c", "echo hi there"]}]}'
    )
    page.get_by_role("button", name="Deploy").click()
    expect(page.get_by_role("heading", name="hello / hi")).to_be_visible()
    page.get_by_role("button", name="Start", exact=True).click()
    status = page.locator("#status")
    expect(status.get_by_text("COMPLETED", exact=True)).to_be_visible(timeout=LIMIT)
    expect(page.locator("#output")).to_contain_text("hi there", timeout=LIMIT)
    page.get_by_role("link", name="Janitor").click()
    page.get_by_role("button", name="Dry run (lists, deletes nothing)").click()
    expect(page.locator("#sweep")).to_contain_text("nothing was deleted", timeout=LIMIT)
    shot(page, "janitor")


def flow_schedules(page):
    """A schedule made from its program's page: its cron previewed (next five times), made
    suspended, enabled with its switch, fired; its run's page says which schedule started it."""
    sign_in(page)
    page.goto(URL + "/ui/ns/default/apps/timed/p")
    expect(page.get_by_text("None: runs start only when asked.")).to_be_visible()
    page.get_by_text("New schedule").click()
    page.get_by_label("Name").fill("every5s")
    # The time zone starts as the browser's own.
    expect(page.get_by_label("Time zone")).not_to_have_value("")
    page.get_by_label("Time zone").fill("UTC")
    page.get_by_label("Cron expression").fill("0 0 31 2 *")
    expect(page.locator("#cron-preview").get_by_role("alert")).to_contain_text("never fires")
    page.get_by_label("Cron expression").fill("*/5 * * * * *")
    expect(page.locator("#cron-preview li")).to_have_count(5)
    page.get_by_label("Properties").fill("day=monday")
    page.get_by_role("button", name="Create").click()
    row = page.locator("tr#schedule-every5s")
    expect(row.get_by_text("SUSPENDED")).to_be_visible()
    assert api("GET", "/v3/namespaces/default/apps/timed/schedules/every5s/status")[1] == {"status": "SUSPENDED"}
    row.get_by_role("button", name="Enable every5s").click()
    expect(row.get_by_text("SCHEDULED")).to_be_visible()
    expect(row.locator("time")).to_have_count(3)
    shot(page, "schedules")
    # It fires: the newest run of the program says what started it.
    for _ in range(LIMIT // 250):
        status, runs = api("GET", "/v3/namespaces/default/apps/timed/workflows/p/runs")
        if status == 200 and runs:
            break
        page.wait_for_timeout(250)
    else:
        raise AssertionError("the schedule never fired")
    page.goto(URL + "/ui/ns/default/apps/timed/p/runs/" + runs[0]["runid"])
    expect(page.locator("p", has_text="Started by schedule default/timed/every5s")).to_be_visible()
    page.goto(URL + "/ui/ns/default/apps/timed/p")
    page.locator("tr#schedule-every5s").get_by_role("button", name="Disable every5s").click()
    expect(page.locator("tr#schedule-every5s").get_by_text("SUSPENDED")).to_be_visible()


def flow_usage(page):
    """The Usage page: a chart of the runs' cost by day, stacked by program, drawn; the range
    picker redraws it in place; by month with the namespace's budget as a line. Needs
    EBB_SERIES (comma-separated namespaces whose runs ran today)."""
    sign_in(page)
    reloaded = never_reloads(page)
    page.get_by_role("link", name="Usage").click()
    expect(page.get_by_role("heading", name="Usage")).to_be_visible()
    reloaded = never_reloads(page)
    chart = page.locator("figure.chart")
    expect(chart.locator("svg")).to_be_visible()
    expect(chart.locator("[role=img]")).to_have_attribute("aria-label", re.compile("Cost by day"))
    assert chart.locator("svg rect").count() > 2, "no bars drawn"
    table = page.locator("table.figures")
    for series in os.environ["EBB_SERIES"].split(","):
        expect(table.get_by_role("columnheader", name=series, exact=True)).to_be_visible()
    shot(page, "usage")
    # By month, in one namespace: the budget is the red line, and the caption says so.
    page.locator("#u-ns").select_option("default")
    page.locator("#u-period").select_option("month")
    expect(chart.locator("figcaption")).to_contain_text("budget", timeout=LIMIT)
    expect(chart.locator("[role=img]")).to_have_attribute("aria-label", re.compile("by month"))
    # A range with nothing in it: the chart says so, without a reload.
    page.locator("#u-from").fill("2001-01-01")
    page.locator("#u-to").fill("2001-02-01")
    page.locator("#u-to").dispatch_event("change")
    expect(page.locator("#usage")).to_contain_text("Nothing was used in this range", timeout=LIMIT)
    assert not reloaded(), "the page was reloaded"
    expect(page).to_have_url(re.compile("from=2001-01-01"))


FLOWS = {name[5:]: f for name, f in globals().items() if name.startswith("flow_")}


def main():
    flow = FLOWS[sys.argv[1]]
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=os.environ.get("EBB_CHROMIUM", "/usr/bin/chromium"),
            # Root in a container has no user namespaces for chromium's sandbox.
            args=["--no-sandbox"] if os.geteuid() == 0 else [],
        )
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.set_default_timeout(15_000)
        page = context.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        # The pages' own scripts and styles pass their Content-Security-Policy.
        page.on(
            "console",
            lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None,
        )
        try:
            flow(page)
        except Exception:
            shot(page, "failed-" + sys.argv[1])
            raise
        finally:
            browser.close()
        assert not errors, "script errors on the page: %s" % errors
    print("flow %s passed" % sys.argv[1])


if __name__ == "__main__":
    main()
