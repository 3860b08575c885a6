"""The dashboard in a real headless browser (Debian's chromium and chromedriver, Selenium).

Real ``silo run`` processes and a real ``silo dashboard`` process: the page loads, lists the
silos, and shows a killed silo turn Dead without being reloaded. Set
``SILO_DASHBOARD_SCREENSHOT=docs/dashboard.png`` to refresh the screenshot in the docs.
Skipped, with the reason, when chromium or chromedriver cannot be found (the test command
installs them: ``scripts/ensure-system-packages.sh``).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from membership_tables import SiloStatus
from testbed.cluster_harness import ROOT, Cluster, death_bound, sqlite_cluster
from testbed.services.process import ServerProcess, wait_until

pytestmark = pytest.mark.slow

URL_RE = re.compile(r"dashboard of cluster \S+ \(.*\) at (http://\S+)")
CHROMIUM = next((path for path in map(shutil.which, ("chromium", "chromium-browser")) if path), None)
CHROMEDRIVER = shutil.which("chromedriver")
if CHROMIUM is None or CHROMEDRIVER is None:
    pytest.skip(
        "needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver, or "
        "run scripts/ensure-system-packages.sh as root)",
        allow_module_level=True,
    )

from selenium import webdriver  # noqa: E402 - only once the browser exists
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with sqlite_cluster(tmp_path, "dashboard") as made:
        yield made


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[webdriver.Chrome]:
    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager must never download a browser or driver
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1250"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


def start_dashboard(cluster: Cluster) -> tuple[ServerProcess, str]:
    log = cluster.workdir / "dashboard.log"
    argv = [sys.executable, "-m", "silo", "dashboard", "--table", cluster.table_uri, "--cluster", cluster.cluster_id]
    argv += ["--port", "0", "--preset", "local", "--interval", "250ms"]
    process = ServerProcess(argv, log, env={"PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"})
    wait_until(lambda: URL_RE.search(log.read_text()) is not None, 30, "the dashboard's URL", log)
    match = URL_RE.search(log.read_text())
    assert match is not None
    return process, match.group(1)


STATUSES_SCRIPT = """
return Object.fromEntries(Array.from(document.querySelectorAll('#silos tbody tr'),
    (row) => [row.dataset.address, row.querySelector('.status').textContent]));
"""


def statuses(browser: webdriver.Chrome) -> dict[str, str]:
    """Address -> status shown, read in one script: the page re-renders its rows on every update."""
    shown: dict[str, str] = browser.execute_script(STATUSES_SCRIPT)
    return shown


def text(browser: webdriver.Chrome, element_id: str) -> str:
    shown: str = browser.execute_script(f"return document.getElementById('{element_id}').textContent;")
    return shown


def test_the_page_lists_the_silos_and_shows_a_killed_one_turn_dead_without_reloading(
    cluster: Cluster, browser: webdriver.Chrome, tmp_path: Path
) -> None:
    cluster.table.initialize()  # the dashboard opens the table read-only: it never creates it
    dashboard, url = start_dashboard(cluster)
    try:
        browser.get(url)
        silos = cluster.start_active(4)
        addresses = [str(silo.address) for silo in silos]
        wait = WebDriverWait(browser, 30, poll_frequency=0.2)
        wait.until(lambda driver: statuses(driver) == dict.fromkeys(addresses, "ACTIVE"))
        assert text(browser, "cluster") == cluster.cluster_id
        drawn = browser.execute_script("return document.querySelectorAll('#ring circle[data-address]').length;")
        assert drawn == 4
        assert browser.execute_script("return document.querySelectorAll('#ring line').length;") > 0, "who probes whom"
        browser.execute_script("window.loadedOnce = 'still the same page';")

        victim = silos[2]
        victim.kill()
        cluster.wait_statuses([victim], SiloStatus.DEAD, death_bound(cluster.options))
        WebDriverWait(browser, 30, poll_frequency=0.2).until(
            lambda driver: statuses(driver).get(addresses[2]) == "DEAD"
        )
        assert browser.execute_script("return window.loadedOnce;") == "still the same page", "the page was reloaded"
        assert [status for address, status in statuses(browser).items() if address != addresses[2]] == ["ACTIVE"] * 3
        timeline = text(browser, "timeline")
        assert timeline.count("joined") == 4
        assert "declared dead" in timeline
        assert addresses[2] in timeline
        assert text(browser, "connection") == "live"
        assert "read_all" in text(browser, "latency-figures")

        browser.save_screenshot(str(tmp_path / "dashboard.png"))
        if target := os.environ.get("SILO_DASHBOARD_SCREENSHOT"):
            shutil.copyfile(tmp_path / "dashboard.png", ROOT / target)
    finally:
        dashboard.stop()
