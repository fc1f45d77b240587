"""A page opened in Debian's real Chromium, headless: a screenshot, and its layout read
back from the DOM after load (`--dump-dom` of a copy of the page with one measuring
script appended; the page itself carries no script). `make browser` installs Chromium
(apt-get, as root) before `make test`; without it a test that opens a page fails, with
the reason, never skips."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess

import pytest

CHROMIUM = "/usr/bin/chromium"
MEASURE_ID = "layout-measure"
# what the tests read: the folds, the answer line, every run id, the window, the document's width, every
# table, image, verdict cell and in-page link
MEASURE_SCRIPT = """
<script>
window.addEventListener("load", () => {
  const box = (element) => { const r = element.getBoundingClientRect(); return {left: r.left, right: r.right}; };
  const section = (element) => element.closest("section") ? element.closest("section").id : null;
  // the folds as the page opens (or as the address's #fragment opened one), then every one opened to measure
  const details = [...document.querySelectorAll("details")].map((fold) => ({
    open: fold.open, summary: fold.querySelector("summary").textContent, section: section(fold),
    inner: fold.querySelector("[id]") ? fold.querySelector("[id]").id : null,
    summaryHeight: Math.round(fold.querySelector("summary").getBoundingClientRect().height),
  }));
  document.querySelectorAll("details").forEach((fold) => { fold.open = true; });
  const answer = document.getElementById("answer");
  const out = {
    details: details,
    answer: answer ? {text: answer.textContent, classes: [...answer.classList],
      colour: getComputedStyle(answer).backgroundColor,
      previous: answer.previousElementSibling ? answer.previousElementSibling.tagName : null} : null,
    ids: [...document.querySelectorAll(".id")].map((id) => ({
      text: id.textContent, classes: [...id.classList], lines: id.getClientRects().length, section: section(id),
    })),
    innerWidth: window.innerWidth,
    scrollWidth: document.documentElement.scrollWidth,
    scrollHeight: document.documentElement.scrollHeight,
    tables: [...document.querySelectorAll("table")].map(box),
    images: [...document.images].map((image) => ({
      alt: image.alt, naturalWidth: image.naturalWidth, ...box(image),
      fold: image.closest("details") && image.closest("details").querySelector("[id]")
        ? image.closest("details").querySelector("[id]").id : null,
    })),
    verdicts: [...document.querySelectorAll("td.verdict")].map((cell) => ({
      classes: [...cell.classList], text: cell.textContent, colour: getComputedStyle(cell).backgroundColor,
      section: section(cell),
      href: cell.querySelector("a") ? cell.querySelector("a").getAttribute("href") : null,
    })),
    links: [...document.querySelectorAll("a[href^='#']")].map((link) => {
      const target = document.getElementById(link.getAttribute("href").slice(1));
      return {href: link.getAttribute("href"), target: target ? target.textContent : null};
    }),
    italics: document.querySelectorAll("i").length,
    text: document.body.innerText,
  };
  document.getElementById("%s").textContent = JSON.stringify(out);
});
</script>
<pre id="%s"></pre>
""" % (MEASURE_ID, MEASURE_ID)


def require_chromium() -> None:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"{CHROMIUM} is missing: `make browser` installs Debian's chromium with apt-get (as root; "
            "`make test` runs it first); where apt-get cannot, install chromium by hand"
        )


def _chromium(arguments: list, profile_dir: str) -> subprocess.CompletedProcess:
    require_chromium()
    sandbox = ["--no-sandbox"] if os.geteuid() == 0 else []  # Chromium refuses its sandbox as root
    command = [CHROMIUM, "--headless", "--disable-gpu", "--hide-scrollbars", f"--user-data-dir={profile_dir}"]
    proc = subprocess.run(command + sandbox + arguments, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def measure(page_path: str, width: int, height: int, profile_dir: str, fragment: str = "") -> dict:
    """The layout of `page_path` in a `width` x `height` window, read from the DOM after load
    (the page opened at `#fragment` when given): its folds as they opened, then, every fold
    opened, its width, tables, images, verdict cells, links, run ids and text."""
    with open(page_path, encoding="utf-8") as handle:
        page = handle.read()
    measured = page_path + ".measured.html"  # beside the page, so relative links resolve alike
    with open(measured, "w", encoding="utf-8") as handle:
        handle.write(page.replace("</body>", MEASURE_SCRIPT + "</body>"))
    address = f"file://{measured}" + (f"#{fragment}" if fragment else "")
    dom = _chromium([f"--window-size={width},{height}", "--dump-dom", address], profile_dir).stdout
    found = re.search(f'<pre id="{MEASURE_ID}">(.*?)</pre>', dom, re.S)
    assert found and found.group(1), f"the measuring script did not run; the DOM began: {dom[:500]}"
    return json.loads(html.unescape(found.group(1)))


def screenshot(page_path: str, png_path: str, width: int, height: int, profile_dir: str) -> None:
    _chromium([f"--window-size={width},{height}", f"--screenshot={png_path}", f"file://{page_path}"], profile_dir)
