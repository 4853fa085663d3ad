"""The ops console in a real headless browser (Debian's chromium, driven by Selenium
through /usr/bin/chromedriver) against a real system: the example fleet on the session's
NATS and Valkey, the services of ``tests/integration/harness.py``, and ``clearance
console`` as its own process. Each view is loaded and read as an operator would; live
numbers must move after an event; each playground action is run and its answer read.

Every view is photographed into the test's directory, and into ``docs/console/`` when
``CLEARANCE_CONSOLE_SCREENSHOTS`` names that directory (``python3 dev.py screenshots``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import nats
import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from clearance_runtime.process import servers
from tests.conftest import Servers
from tests.integration.harness import System, cluster

ROOT = Path(__file__).resolve().parents[2]
#: The walkthrough's dry-run sample: the production guardrails without the payments filter.
SAMPLE = ROOT / "docs" / "walkthrough" / "guardrails-without-payments.yaml"
CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM = Path("/usr/bin/chromium")
CLEARANCE = str(Path(sys.executable).parent / "clearance")
T = TypeVar("T")
#: What the page shows for a number it does not have (an en dash).
NO_VALUE = "\u2013"


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    if not (CHROMEDRIVER.exists() and CHROMIUM.exists()):
        pytest.fail("the console's browser tests need Debian's chromium and chromium-driver "
                    "(/usr/bin/chromium, /usr/bin/chromedriver): `python3 dev.py test` "
                    "installs them when run as root, else run "
                    "`sudo apt-get install -y chromium chromium-driver`")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


async def off_loop(call: Callable[..., T], *args: Any) -> T:
    """Selenium blocks; the services run on this test's event loop, so every browser
    call runs in a thread."""
    return await asyncio.to_thread(call, *args)


async def until(read: Callable[[], T], accept: Callable[[T], bool], *, within: float = 10.0,
                what: str = "") -> T:
    deadline = time.monotonic() + within
    while True:
        try:
            value = await off_loop(read)
            if accept(value):
                return value
        except WebDriverException:
            value = None  # type: ignore[assignment]  (not rendered yet)
        if time.monotonic() > deadline:
            raise AssertionError(f"{what or 'condition'} not met; last read {value!r}")
        await asyncio.sleep(0.1)


def text(driver: WebDriver, css: str) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def texts(driver: WebDriver, css: str) -> list[str]:
    return [str(e.text) for e in driver.find_elements(By.CSS_SELECTOR, css)]


def attributes(driver: WebDriver, css: str, name: str) -> list[str]:
    return [str(e.get_attribute(name)) for e in driver.find_elements(By.CSS_SELECTOR, css)]


def number(value: str) -> int:
    return int(value.replace(",", "")) if value.strip().lstrip("-").replace(",", "").isdigit() \
        else -1


class Page:
    def __init__(self, driver: WebDriver, base: str, shots: list[Path]) -> None:
        self.driver, self.base, self.shots = driver, base, shots

    async def open(self, view: str) -> None:
        await off_loop(self.driver.get, f"{self.base}#{view}")

    async def shoot(self, name: str) -> None:
        for directory in self.shots:
            await off_loop(self.driver.save_screenshot, str(directory / f"{name}.png"))

    async def ask(self, view: str, fields: dict[str, str]) -> None:
        """Fill the playground form of ``view`` and submit; wait for the answer."""
        await self.open(view)

        def fill() -> None:
            form = self.driver.find_element(By.ID, f"{view}-form")
            for name, value in fields.items():
                field = form.find_element(By.NAME, name)
                field.clear()
                field.send_keys(value)
            form.find_element(By.TAG_NAME, "button").click()

        await off_loop(fill)
        await until(lambda: self.driver.find_element(By.ID, f"{view}-result")
                    .get_attribute("data-state"), lambda s: s == "done", what=f"{view} answer")


async def listening(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 15
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            assert process.poll() is None, "clearance console exited"
            assert time.monotonic() < deadline, "clearance console is not listening"
            await asyncio.sleep(0.1)


def invalid_policy() -> dict[str, Any]:
    """Invalid twice over; the unknown field is what its status names first."""
    return {"apiVersion": "clusterpulse.io/v1alpha1", "kind": "MonitorAccessPolicy",
            "metadata": {"name": "broken", "namespace": "clusterpulse"},
            "spec": {"identity": {"priority": -1, "subjects": {"grups": ["sre"]}},
                     "access": {"effect": "Allow"}, "scope": {"clusters": {"default": "all"}}}}


async def test_console_views_and_playground(browser: WebDriver, clean_servers: Servers,
                                            tmp_path: Path) -> None:
    manifests = tmp_path / "examples"
    shutil.copytree(ROOT / "examples", manifests)
    port = servers.free_port()
    env = {**os.environ, "CLEARANCE_NATS_URL": clean_servers.nats_url,
           "CLEARANCE_REDIS_URL": clean_servers.redis_url,
           "CLEARANCE_MANIFESTS": str(manifests), "CLEARANCE_MANIFEST_POLL": "0.05"}
    console = subprocess.Popen(  # noqa: ASYNC220  (started, not waited for, here)
        [CLEARANCE, "console", "--port", str(port)], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shots = [tmp_path]
    if os.environ.get("CLEARANCE_CONSOLE_SCREENSHOTS"):
        shots.append(Path(os.environ["CLEARANCE_CONSOLE_SCREENSHOTS"]))
        shots[-1].mkdir(parents=True, exist_ok=True)
    # The harness writes manifests and asks questions; the services run as `clearance run
    # all`, a process of their own like the console (stopped by a signal, as in production).
    system = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    system.nc = await nats.connect(clean_servers.nats_url)
    services: subprocess.Popen[bytes] | None = None
    page = Page(browser, f"http://127.0.0.1:{port}/", shots)
    try:
        await listening(port, console)
        await page.open("live")
        # The stream is open; nothing answers the status yet (the services start below),
        # and the page says so rather than "live".
        await until(lambda: text(browser, "#conn"), lambda t: t == "no status yet",
                    within=15, what="the page's live stream, before the services")
        # After the console: it hears every status as the examples load.
        services = subprocess.Popen(  # noqa: ASYNC220  (started, not waited for, here)
            [CLEARANCE, "run", "all"], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        revision = await system.settle(timeout=30)
        await live_numbers_move(page, system, revision)
        await policies_by_state(page, system)
        await playground(page, system)
    finally:
        for process in (console, services):
            if process is not None:
                process.terminate()
        for process in (console, services):
            if process is not None:
                await off_loop(process.wait, 10)
        await system.close()


async def live_numbers_move(page: Page, system: System, revision: int) -> None:
    driver = page.driver
    await until(lambda: text(driver, "#revision"), lambda t: number(t) == revision,
                within=15, what="revision shown")
    await until(lambda: texts(driver, "#services td.health"),
                lambda h: h == ["healthy"] * 4, what="four healthy services")
    await until(lambda: text(driver, "#conn"), lambda t: t == "live",
                what="the page live once the status is answered")
    await until(lambda: texts(driver, "#services td.revision"),
                lambda r: r == [str(revision)] * 4, what="every service at the revision")
    assert await off_loop(text, driver, "#cache-hit-rate") == NO_VALUE  # idle: the probe is not
    for _ in range(20):  # traffic: one miss, then hits
        await system.check("alice", "prod-us-east", groups=["platform-team"])
    await until(lambda: text(driver, "#cache-hit-rate"), lambda t: t.endswith("%"),
                what="a hit rate over the checks")
    clusters_seen = number(await off_loop(
        text, driver, '#flows tr[data-flow="events.managedcluster"] .total'))
    assert clusters_seen == 5  # the example fleet's ManagedClusters
    invalidations = number(await off_loop(text, driver, "#inval-total"))
    await until(lambda: text(driver, "#latency-p50"), lambda t: t != NO_VALUE,
                what="decision latency")
    await page.shoot("live")
    system.write("new-cluster.yaml", cluster("qa-west", environment="qa"))
    await until(lambda: number(text(
        driver, '#flows tr[data-flow="events.managedcluster"] .total')),
        lambda n: n == clusters_seen + 1, what="the new cluster's event counted")
    await until(lambda: number(text(driver, "#inval-total")), lambda n: n > invalidations,
                what="its invalidation counted")
    await until(lambda: number(text(driver, "#revision")), lambda n: n > revision,
                what="revision moved")
    await until(lambda: text(driver, "#inval-last"), lambda t: "all" in t,
                what="a cluster change invalidates all")


async def policies_by_state(page: Page, system: System) -> None:
    driver = page.driver
    system.write("broken.yaml", invalid_policy())
    await page.open("policies")
    row = 'tr[data-policy="MonitorAccessPolicy/clusterpulse/broken"]'
    await until(lambda: attributes(driver, row, "data-state"), lambda s: s == ["Invalid"],
                within=15, what="the broken policy shown invalid")
    assert 'spec.identity.subjects.grups: unknown field (did you mean "groups"?)' in \
        await off_loop(text, driver, row)
    active = await until(lambda: attributes(driver, '#policies tr[data-state="Active"]',
                                            "data-policy"),
                         lambda rows: len(rows) == 9, what="nine active policies")
    assert "AccessPolicy/shop/shop-intent" in active
    reason = await off_loop(text, driver, 'tr[data-policy="AccessPolicy/shop/shop-intent"]')
    assert "PartiallyEnforced" in reason
    assert await off_loop(text, driver, "#state-Invalid b") == "1"
    await page.shoot("policies")


async def playground(page: Page, system: System) -> None:
    await who_can_see(page, system)
    await user_view(page)
    driver = page.driver
    await page.ask("explain", {"username": "dave", "cluster": "prod-us-east"})
    assert (await off_loop(text, driver, "#explain-decision")).startswith("deny")
    trace = await off_loop(texts, driver, "#explain-trace tbody tr")
    assert "decided" in trace[0] and "clusterpulse/contractors-no-production" in trace[0]
    await page.shoot("explain")

    await page.ask("effective", {"target": "namespace/prod-us-east/shop"})
    rules = await off_loop(attributes, driver, "#effective-rules tbody tr", "data-rule")
    assert rules == ["shop-developers", "sre", "suspended"]
    sre = await off_loop(text, driver, '#effective-rules tr[data-rule="sre"]')
    assert "platform/production-guardrails" in sre and "overrides" in sre
    await page.shoot("effective")

    await page.ask("simulate", {})  # the form's example: production-guardrails narrowed
    summary = await off_loop(text, driver, "#simulate-summary")
    assert "would change 4 targets" in summary
    moved = await off_loop(attributes, driver, "#simulate-status tbody tr", "data-policy")
    assert "platform/production-guardrails" in moved
    await dry_run_of_the_sample(page)
    await off_loop(driver.execute_script,
                   "document.querySelector('#simulate-summary').scrollIntoView()")
    await page.shoot("simulate")


async def dry_run_of_the_sample(page: Page) -> None:
    """docs/guide/inherited.md's sample that drops the payments filter: the page says who would gain
    what where — group sre every namespace, payments included, on both production
    clusters — and that nothing else moves."""
    driver = page.driver
    await page.ask("simulate", {"policy": SAMPLE.read_text()})
    rows = "#simulate-access tbody tr"
    found = list(zip(*[await off_loop(attributes, driver, rows, name) for name in (
        "data-target", "data-subject", "data-resource", "data-move")], strict=True))
    gains = [(target, resource) for target, subject, resource, move in found
             if subject == "group:sre" and move == "gains"]
    assert gains == [("cluster/prod-eu-west", "namespaces"),
                     ("cluster/prod-us-east", "namespaces")], found
    assert {move for _, subject, resource, move in found
            if resource != "namespaces"} == {"none"}  # "no change", not a false gain
    for target, _ in gains:
        row = await off_loop(text, driver, f'{rows}[data-target="{target}"]'
                             '[data-subject="group:sre"][data-resource="namespaces"]')
        assert "namespaces payments no longer hidden" in row
        assert "partial" in row and "allow" in row
    assert "4 of 10 answers would move" in await off_loop(
        text, driver, "#simulate-access-summary")


def principal_of(row: str) -> dict[str, Any]:
    """The principal a "Who can see" row stands for (``kind:name``): a group as a member
    of it alone, under a username nothing names."""
    kind, _, name = row.partition(":")
    return {"username": "browser-stranger", "groups": [name]} if kind == "group" \
        else {"username": name}


async def who_can_see(page: Page, system: System) -> None:
    driver = page.driver
    await page.ask("who", {"cluster": "prod-us-east"})
    table = "#who-table tbody tr"
    seen = dict(zip(await off_loop(attributes, driver, table, "data-principal"),
                    await off_loop(attributes, driver, table, "data-decision"), strict=True))
    # Complete: allowed and denied, by user, group and service account, and everyone else.
    assert seen["user:alice"] == seen["group:platform-team"] == "allow"
    assert seen["user:olivia"] == seen["group:sre"] == "allow"  # an AccessPolicy rule's
    assert seen["user:dave"] == seen["group:contractors"] == "deny"
    assert seen["user:bob"] == seen["group:developers"] == "deny"
    assert seen["user:mallory"] == seen["group:suspended"] == "deny"
    assert seen["serviceaccount:system:serviceaccount:monitoring:prometheus-bridge"] == "allow"
    assert seen["others:*"] == "deny"
    # Correct: each row is what a check answers for that principal.
    named = {row: decision for row, decision in seen.items() if row != "others:*"}
    checks = await asyncio.gather(*(system.request("clearance.v1.check", {
        "principal": principal_of(row), "action": "view",
        "resource": {"type": "cluster", "name": "prod-us-east"}}) for row in named))
    assert {row: check["decision"] for row, check in zip(named, checks, strict=True)} == named
    policy = await off_loop(text, driver, '#who-table tr[data-principal="user:dave"]')
    assert "clusterpulse/contractors-no-production" in policy
    allowed = sum(1 for decision in named.values() if decision != "deny")
    assert (await off_loop(text, driver, "#who-summary")).startswith(
        f"{allowed} of {len(named)} subjects named for prod-us-east can see it")
    await page.shoot("who-can-see")

    await page.ask("who", {"cluster": "prod-us-east", "type": "pods", "namespace": "shop"})
    shop = await off_loop(text, driver, '#who-table tr[data-principal="user:bob"]')
    assert "partial" in shop and "shop/shop-intent" in shop
    assert "pods in prod-us-east/shop" in await off_loop(text, driver, "#who-summary")

    await page.ask("who", {"cluster": "nowhere"})
    refused = await off_loop(text, driver, "#who-result")
    assert refused.startswith("not_found:") and "'nowhere'" in refused
    assert await off_loop(driver.find_elements, By.ID, "who-table") == []


async def user_view(page: Page) -> None:
    driver = page.driver
    await page.ask("user", {"username": "bob"})
    row = '#user-clusters tr[data-cluster="{}"]'
    sees = {c: await off_loop(attributes, driver, row.format(c), "data-sees")
            for c in ("dev-sandbox", "staging-us-east", "prod-us-east", "prod-eu-west")}
    # prod-us-east: denied as a whole, but its shop namespace shows bob's pods.
    assert sees == {"dev-sandbox": ["allow"], "staging-us-east": ["allow"],
                    "prod-us-east": ["partial"], "prod-eu-west": ["deny"]}
    assert await off_loop(text, driver, row.format("prod-us-east") + " .whole") == "deny"
    shop = await off_loop(text, driver,
                          row.format("prod-us-east") + ' [data-namespace="shop"]')
    assert "pods" in shop and "partial" in shop and "*-debug" in shop
    pods = await off_loop(text, driver,
                          row.format("staging-us-east") + ' .types [data-type="pods"]')
    assert "partial" in pods and "*-debug" in pods  # the pods filter shown
    assert (await off_loop(text, driver, "#user-summary")).startswith(
        "bob sees something in 3 of 6 clusters (2 as a whole)")  # qa-west added above
    assert await off_loop(text, driver, "#user-types") == "pvc"
    await page.shoot("user-view")


async def test_with_a_token_the_page_logs_in_from_the_url_fragment(
        browser: WebDriver, real_servers: Servers) -> None:
    """``CLEARANCE_CONSOLE_TOKEN`` set: the page sends a browser without the session to
    /login; /login#token=... logs in (the fragment never leaves the browser) and lands on
    the live page, which then streams."""
    port = servers.free_port()
    token = "browser-test-token-0123456789abcdef"
    env = {**os.environ, "CLEARANCE_NATS_URL": real_servers.nats_url,
           "CLEARANCE_CONSOLE_TOKEN": token}
    console = subprocess.Popen(  # noqa: ASYNC220  (started, not waited for, here)
        [CLEARANCE, "console", "--port", str(port)], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        await listening(port, console)
        await off_loop(browser.delete_all_cookies)
        await off_loop(browser.get, base + "/#live")
        await until(lambda: browser.current_url, lambda u: u.startswith(base + "/login"),
                    what="sent to the login page")
        await off_loop(browser.get, f"{base}/login#token=wrong")
        await until(lambda: text(browser, "#login-result"), lambda t: "wrong token" in t,
                    what="a wrong token refused")
        await off_loop(browser.get, f"{base}/login#token={token}")
        await until(lambda: browser.current_url, lambda u: u == base + "/",
                    what="logged in and on the page")
        # Streaming with the session cookie (no Clearance service runs here to answer).
        await until(lambda: text(browser, "#conn"), lambda t: t == "no status yet",
                    what="the live stream with the session cookie")
        assert token not in str(await off_loop(browser.get_cookies))
    finally:
        console.terminate()
        await off_loop(console.wait, 10)
        await off_loop(browser.delete_all_cookies)
