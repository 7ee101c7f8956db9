#!/usr/bin/env python3
"""Opens the explorer page in headless Chromium and checks it through the DOM.

Writes `layoutopt explore` of a bundled model, then for a laid-out Conv node of
the first plan:
  1. clicks the node (a copy of the page with a script appended that
     dispatches a real click event on the node's SVG group) and dumps the DOM;
  2. opens the page at `#node=<id>` (the link the page itself sets) and dumps
     the DOM.
Both DOMs must show: both plans' graphs (one SVG group per node of the page's
data), the node's source spans (the layer names of its data, and the source
model's layer), its loop nest, and its schedule record (one entry per step,
the primitives in order). A screenshot of the clicked page is saved.

Usage: python3 scripts/check_explorer.py [--bin target/release/layoutopt]
           [--model models/resnet_small/model.onnx] [--out DIR]
Exit status 1 on any failed check.
"""

import argparse
import html.parser
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent


class Dom(html.parser.HTMLParser):
    """Collects the text of elements by id, `li` items by class, and node groups."""

    def __init__(self):
        super().__init__()
        self.stack = []  # (tag, id, class)
        self.text = {}  # id -> text
        self.items = {}  # li class -> [text]
        self.nodes = []  # data-id of every g.node
        self.svgs = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg" and "graph" in (a.get("class") or ""):
            self.svgs += 1
        if tag == "g" and "node" in (a.get("class") or "").split():
            self.nodes.append(a.get("data-id"))
        if tag == "li" and a.get("class"):
            self.items.setdefault(a["class"], []).append("")
        self.stack.append((tag, a.get("id"), a.get("class")))
        if a.get("id"):
            self.text.setdefault(a["id"], "")

    def handle_endtag(self, tag):
        while self.stack:
            if self.stack.pop()[0] == tag:
                break

    def handle_data(self, data):
        for tag, id_, cls in self.stack:
            if id_:
                self.text[id_] += data
            if tag == "li" and cls:
                self.items[cls][-1] += data


def headless(chrome, url, *flags):
    """Runs headless Chromium on `url` with a throwaway profile and the given flags."""
    profile = tempfile.mkdtemp()
    try:
        return subprocess.run(
            [
                chrome,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                f"--user-data-dir={profile}",
                "--virtual-time-budget=3000",
                *flags,
                url,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def dump_dom(chrome, url):
    r = headless(chrome, url, "--dump-dom")
    if r.returncode != 0:
        raise RuntimeError(f"chromium failed: {r.stderr[-2000:]}")
    return r.stdout


def screenshot(chrome, url, path):
    r = headless(chrome, url, "--hide-scrollbars", "--window-size=1600,1000", f"--screenshot={path}")
    if r.returncode != 0:
        raise RuntimeError(f"chromium screenshot failed: {r.stderr[-2000:]}")


def check(dom_text, data, node_id, source_layer, what, failures):
    dom = Dom()
    dom.feed(dom_text)
    node = data[node_id]

    def expect(cond, message):
        print(("ok    " if cond else "FAIL  ") + f"{what}: {message}")
        if not cond:
            failures.append(f"{what}: {message}")

    expect(dom.svgs == 2, f"two plan graphs drawn (found {dom.svgs})")
    expect(sorted(dom.nodes) == sorted(data), f"{len(data)} node groups, one per node")
    expect(dom.text.get("node-name", "").strip() == node["name"], f"panel shows node '{node['name']}'")
    spans = dom.items.get("span", [])
    expect(len(spans) == len(node["spans"]) > 0, f"{len(node['spans'])} source spans listed")
    expect(any(f"layer '{source_layer}'" in s for s in spans), f"spans name the source layer '{source_layer}'")
    nest = dom.text.get("loop-nest", "")
    expect("for " in nest, "loop nest shown")
    steps = [s for s in dom.items.get("step", [])]
    prims = [s["primitive"] for s in node["tir"]["steps"]]
    expect(len(steps) == len(prims) > 1, f"schedule record has {len(prims)} steps")
    expect(all(p in s for p, s in zip(prims, steps, strict=False)), "each step names its primitive, in order")
    expect(any("lines changed" in s for s in steps[1:]), "steps say what changed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=str(ROOT / "target/release/layoutopt"))
    ap.add_argument("--model", default=str(ROOT / "models/resnet_small/model.onnx"))
    ap.add_argument("--out", default=str(ROOT / "target/explorer-check"))
    args = ap.parse_args()
    chrome = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chrome:
        print("chromium not found (apt-get install -y chromium)", file=sys.stderr)
        return 1
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    page = out / "report.html"
    subprocess.run(
        [
            args.bin,
            "explore",
            args.model,
            "-o",
            str(page),
            "--target",
            "nchw16c",
            "--planner",
            "global",
            "--against",
            "local",
        ],
        check=True,
    )
    text = page.read_text()
    raw = re.search(r'<script id="explorer-data" type="application/json">(.*?)</script>', text, re.S).group(1)
    data = json.loads(raw)
    node_id = next(k for k, n in sorted(data.items()) if k.startswith("p0") and n["op"] == "Conv (laid out)")
    source_layer = data[node_id]["spans"][0]["layer"]
    print(f"checking node {node_id} ('{data[node_id]['name']}', from layer '{source_layer}')")

    failures = []
    # 1. A real click on the node's SVG group.
    clicked = out / "report_clicked.html"
    click = (
        f"<script>document.querySelector('.node[data-id=\"{node_id}\"]')"
        ".dispatchEvent(new MouseEvent('click', {bubbles: true}));</script>"
    )
    clicked.write_text(text.replace("</body>", click + "</body>"))
    check(dump_dom(chrome, clicked.as_uri()), data, node_id, source_layer, "click", failures)
    # 2. The page's own link to the node.
    check(dump_dom(chrome, page.as_uri() + "#node=" + node_id), data, node_id, source_layer, "#node link", failures)
    shot = out / "explorer.png"
    screenshot(chrome, clicked.as_uri(), shot)
    print(f"screenshot: {shot} ({shot.stat().st_size} bytes)")
    if failures:
        print(f"{len(failures)} checks failed", file=sys.stderr)
        return 1
    print("all explorer checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
