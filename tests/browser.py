"""Open report pages in headless Chromium (selenium + chromedriver) and say what rendered.

Used by tests/test_report.py. The browser is the Debian ``chromium`` package (or
``chromium-browser`` / ``google-chrome`` on PATH) and its driver ``chromium-driver``
(``/usr/bin/chromedriver`` or ``chromedriver`` on PATH); both paths are given to selenium,
so nothing is downloaded. :func:`find_browser` returns None when either is missing (the
test then skips with :data:`SKIP_REASON`).
"""

from __future__ import annotations

import io
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SKIP_REASON = "chromium/chromedriver not found: install Debian packages chromium chromium-driver"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
DRIVERS = ("/usr/bin/chromedriver",)
WINDOW = (1280, 1000)
OPTIONS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           f"--window-size={WINDOW[0]},{WINDOW[1]}")
PAGE_LOAD_TIMEOUT_S = 60

BLANK_STD = 0.02
"""A screenshot whose pixel values (0..1, RGB) have a standard deviation at most this is
blank: an empty page measures 0; the first screen of a run report about 0.13 to 0.16 here."""

MIN_COLOURS = 2
"""A rendered page has more than one distinct colour (a blank one has one)."""


@dataclass(frozen=True)
class Browser:
    binary: str
    driver: str


@dataclass(frozen=True)
class Rendered:
    """What the browser made of a page: title, per-img (complete, naturalWidth), the
    screenshot as an (H, W, C) float array in [0, 1], and the page height in CSS pixels
    (``document.documentElement.scrollHeight`` at the ``WINDOW`` width: how far a reader scrolls)."""

    title: str
    images: tuple[tuple[bool, int], ...]
    screenshot: np.ndarray
    height: int = 0

    @property
    def pixel_std(self) -> float:
        return float(self.screenshot[..., :3].std())

    @property
    def colours(self) -> int:
        rgb = (self.screenshot[..., :3] * 255).round().astype(np.uint32)  # (H, W, 3)
        packed = (rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]  # (H, W): one int per colour
        return len(np.unique(packed))

    @property
    def blank(self) -> bool:
        return self.pixel_std <= BLANK_STD or self.colours < MIN_COLOURS


def find_browser() -> Browser | None:
    """The Chromium binary and its chromedriver, or None when either is missing."""
    binary = next((found for name in BROWSERS if (found := shutil.which(name))), None)
    driver = next((p for p in DRIVERS if Path(p).is_file()), None) or shutil.which("chromedriver")
    return Browser(binary, driver) if binary and driver else None


class HeadlessChromium:
    """One headless Chromium for several pages (starting one costs about a second)."""

    def __init__(self, browser: Browser):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = browser.binary
        for flag in OPTIONS:
            options.add_argument(flag)
        self.driver = webdriver.Chrome(service=Service(browser.driver), options=options)
        self.driver.set_page_load_timeout(PAGE_LOAD_TIMEOUT_S)

    def render(self, html: Path) -> Rendered:
        """Load ``html`` (file URL), wait for the load event, report title, images, screenshot, height."""
        import matplotlib.image

        self.driver.get(Path(html).resolve().as_uri())
        images = self.driver.execute_script(
            "return Array.from(document.images).map(i => [i.complete, i.naturalWidth]);")
        height = int(self.driver.execute_script("return document.documentElement.scrollHeight;"))
        shot = matplotlib.image.imread(io.BytesIO(self.driver.get_screenshot_as_png()), format="png")  # (H, W, C)
        return Rendered(self.driver.title, tuple((bool(c), int(w)) for c, w in images), np.asarray(shot, float), height)

    def close(self) -> None:
        self.driver.quit()
