"""The run inspector page in a real headless browser (Debian's chromium through Selenium):
it asks for the token, shows a pending run, approves it and sees it complete; what models and
tools wrote is shown as text, and none of it runs as script."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from servekit import Served

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = [
    pytest.mark.ray,
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None or DRIVER is None,
        reason="no headless browser: install Debian's chromium and chromium-driver "
        "(apt-get install chromium chromium-driver; .ci/run does)",
    ),
]
ROOT = Path(__file__).resolve().parents[2]

HOSTILE = (
    '<img src=x onerror="window.__pwned=1"> </script><script>window.__pwned=2</script>'
    ' <a href="javascript:window.__pwned=3" id="evil">click</a> <b>bold</b>'
)


@rg.tool(num_cpus=0, needs_approval=True)
def deploy(service: str) -> str:
    """Deploy a service (a person approves it)."""
    return f"deployed {service}"


@rg.tool(num_cpus=0)
def fetch_page(url: str) -> str:
    """What a page says (here: markup meant to run)."""
    return HOSTILE


def deployer(req: rg.ModelRequest) -> rg.ModelResponse:
    done = [m.text for m in req.messages if m.role == "tool"]
    if not done:
        return calls(call("deploy", {"service": "web"}, id="d1"))
    return text(f"result: {done[0]}")


def echoer(req: rg.ModelRequest) -> rg.ModelResponse:
    if not any(m.role == "tool" for m in req.messages):
        return calls(call("fetch_page", {"url": "javascript:alert(1)"}, id="f1"))
    return text(HOSTILE)


AGENTS = [
    rg.Agent("deployer", tools=[deploy], model=FunctionModel(deployer)),
    rg.Agent("hostile", tools=[fetch_page], model=FunctionModel(echoer)),
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(DRIVER)), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(check: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found = check()
        except Exception:  # (not there yet, or replaced while read)
            found = None
        if found:
            return found
        assert time.monotonic() < deadline, "the page did not get there"
        time.sleep(0.2)


def click(find: Callable[[], Any]) -> None:
    """Click what ``find`` finds, found again while the page redraws it (every 2 s)."""

    def once() -> bool:
        find().click()
        return True

    wait_for(once)


def open_page(browser: Any, served: Served) -> None:
    from selenium.webdriver.common.by import By

    browser.get(served.url + "/")
    browser.find_element(By.ID, "token").send_keys(str(served.token))
    browser.find_element(By.ID, "save-token").click()


def row(browser: Any, run_id: str) -> Any:
    from selenium.webdriver.common.by import By

    return browser.find_element(By.CSS_SELECTOR, f'#runs tbody tr[data-run-id="{run_id}"]')


def test_a_person_approves_a_pending_run_and_sees_it_complete(served: Served, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    run = served.post("/v1/runs", {"agent": "deployer", "input": "ship", "wait": True}).json()
    assert run["status"] == "awaiting_approval"
    open_page(browser, served)
    assert served.token not in browser.current_url
    wait_for(
        lambda: (
            row(browser, run["run_id"]).find_element(By.CLASS_NAME, "status").text
            == "awaiting_approval"
        )
    )
    click(lambda: row(browser, run["run_id"]))
    pending = wait_for(lambda: browser.find_element(By.ID, "pending").text)
    assert "deploy" in pending and '"service": "web"' in pending
    if os.environ.get("RAYGENTS_SCREENSHOT"):  # (how docs/serve-page.png is made)
        browser.execute_script("document.getElementById('list').scrollLeft = 0")
        browser.save_screenshot(str(ROOT / "docs" / "serve-page.png"))
    click(lambda: browser.find_element(By.CSS_SELECTOR, "#pending button.approve"))
    wait_for(lambda: browser.find_element(By.ID, "detail-status").text == "completed")
    assert browser.find_element(By.ID, "output").text == "result: deployed web"
    wait_for(
        lambda: (
            row(browser, run["run_id"]).find_element(By.CLASS_NAME, "status").text == "completed"
        )
    )
    events = wait_for(lambda: browser.find_element(By.ID, "events").text)
    assert "complete" in events
    assert served.token not in browser.current_url
    assert served.get(f"/v1/runs/{run['run_id']}").json()["status"] == "completed"


def test_what_models_and_tools_wrote_is_shown_as_text(served: Served, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    run = served.post("/v1/runs", {"agent": "hostile", "input": HOSTILE, "wait": True}).json()
    assert run["status"] == "completed"
    open_page(browser, served)
    click(lambda: row(browser, run["run_id"]))
    output = wait_for(lambda: browser.find_element(By.ID, "output"))
    wait_for(lambda: output.text == HOSTILE)
    messages = wait_for(lambda: browser.find_element(By.ID, "messages").text)
    assert messages.count("window.__pwned=2") == 3  # (the input, the tool's result, the output)
    wait_for(lambda: "final" in browser.find_element(By.ID, "history").text)
    for area in ("output", "messages", "events", "runs", "history"):
        inside = browser.find_element(By.ID, area)
        assert inside.find_elements(By.TAG_NAME, "img") == []
        assert inside.find_elements(By.TAG_NAME, "script") == []
        assert inside.find_elements(By.TAG_NAME, "a") == []
        assert inside.find_elements(By.TAG_NAME, "b") == []
    time.sleep(1.0)
    assert browser.execute_script("return window.__pwned === undefined") is True
    logs = browser.get_log("browser")
    assert not [e for e in logs if "__pwned" in e.get("message", "")], logs


def test_the_detail_shows_a_runs_history(served: Served, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    run = served.post("/v1/runs", {"agent": "deployer", "input": "ship", "wait": True}).json()
    assert run["status"] == "awaiting_approval"
    expected = served.get(f"/v1/runs/{run['run_id']}/history").json()["checkpoints"]
    assert [c["reason"] for c in expected][-1] == "interrupt"
    open_page(browser, served)
    click(lambda: row(browser, run["run_id"]))

    def shown() -> list[tuple[int, str]]:
        items = browser.find_elements(By.CSS_SELECTOR, "#history li[data-seq]")
        return [
            (int(i.get_attribute("data-seq")), i.find_element(By.CLASS_NAME, "role").text)
            for i in items
        ]

    wait_for(lambda: shown() == [(c["seq"], c["reason"]) for c in expected])
    text = browser.find_element(By.ID, "history").text
    assert "deployer" in text and "calls deploy" in text  # (the agent, the newest message)
