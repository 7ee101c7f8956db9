#!/usr/bin/env python3
"""Opens the explorer page in headless Chromium and checks it through the DOM.

Writes `layoutopt explore` of a bundled model (--model), then for a laid-out
Conv node of the first plan:
  1. expands all regions and clicks the node (a copy of the page with a script
     appended that dispatches real click events) and dumps the DOM;
  2. opens the page at `#node=<id>` (the link the page itself sets) and dumps
     the DOM.
Both DOMs must show the node's source spans (the layer names of its data, and
the source model's layer), its loop nest, and its schedule record (one entry
per step, the primitives in order); the first, both plans' graphs with one SVG
group per node of the page's data.

Then on a real model (--real-model: DenseNet-121 from models/zoo when it is
there, else the committed MobileNetV3-Small) it checks that the page is at most
--max-bytes, that it opens with whole graph fitted, that searching a node's name
finds, selects and centres it, that collapsing the node's outermost region draws
the region as one box (and clicking the box opens it again), and that the zoom
buttons zoom. Screenshots at two zoom levels go to --out: the fitted whole
graph (explorer_fit.png) and a node zoomed to (explorer_node.png).

Usage: python3 scripts/check_explorer.py [--bin target/release/layoutopt]
           [--model models/resnet_small/model.onnx] [--real-model MODEL]
           [--max-bytes 3145728] [--out DIR]
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


class Checks:
    """Prints each check and remembers the failed ones."""

    def __init__(self):
        self.failures = []

    def expect(self, what, cond, message):
        print(("ok    " if cond else "FAIL  ") + f"{what}: {message}")
        if not cond:
            self.failures.append(f"{what}: {message}")


def explore(binary, model, page):
    subprocess.run(
        [
            binary,
            "explore",
            str(model),
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
    return text, json.loads(raw)


def node_ids(data):
    return [f"p{k}n{i}" for k, plan in enumerate(data["plans"]) for i in range(len(plan["nodes"]))]


def node_of(data, node_id):
    k, i = map(int, re.fullmatch(r"p(\d+)n(\d+)", node_id).groups())
    return data["plans"][k]["nodes"][i]


def after_load(js):
    """A script to append to a page: runs `js` once the page has drawn itself."""
    return f"<script>window.addEventListener('load', () => setTimeout(() => {{ {js} }}, 0));</script>"


def check_details(dom_text, data, node_id, source_layer, what, checks, all_drawn):
    dom = Dom()
    dom.feed(dom_text)
    node = node_of(data, node_id)

    def expect(cond, message):
        checks.expect(what, cond, message)

    expect(dom.svgs == 2, f"two plan graphs drawn (found {dom.svgs})")
    if all_drawn:
        ids = node_ids(data)
        expect(sorted(dom.nodes) == sorted(ids), f"{len(ids)} node groups, one per node")
    expect(node_id in dom.nodes, f"node {node_id} drawn")
    expect(dom.text.get("node-name", "").strip() == node["name"], f"panel shows node '{node['name']}'")
    spans = dom.items.get("span", [])
    expect(len(spans) == len(node["spans"]) > 0, f"{len(node['spans'])} source spans listed")
    expect(any(f"layer '{source_layer}'" in s for s in spans), f"spans name the source layer '{source_layer}'")
    nest = dom.text.get("loop-nest", "")
    expect("for " in nest, "loop nest shown")
    steps = dom.items.get("step", [])
    prims = [s["primitive"] for s in data["tirs"][node["tir"]]["steps"]]
    expect(len(steps) == len(prims) > 1, f"schedule record has {len(prims)} steps")
    expect(all(p in s for p, s in zip(prims, steps, strict=False)), "each step names its primitive, in order")
    expect(any("lines changed" in s for s in steps[1:]), "steps say what changed")


def check_bundled(chrome, args, out, checks):
    page = out / "report.html"
    text, data = explore(args.bin, args.model, page)
    node_id = next(
        f"p0n{i}" for i, n in enumerate(data["plans"][0]["nodes"]) if n["op"] == "Conv (laid out)"
    )
    node = node_of(data, node_id)
    source_layer = node["spans"][0]["layer"]
    print(f"checking node {node_id} ('{node['name']}', from layer '{source_layer}')")
    # 1. Real clicks: open every region, then the node's SVG group.
    clicked = out / "report_clicked.html"
    click = after_load(
        "document.getElementById('expand-all').click();"
        f"document.querySelector('.node[data-id=\"{node_id}\"]')"
        ".dispatchEvent(new MouseEvent('click', {bubbles: true}));"
    )
    clicked.write_text(text.replace("</body>", click + "</body>"))
    check_details(dump_dom(chrome, clicked.as_uri()), data, node_id, source_layer, "click", checks, True)
    # 2. The page's own link to the node.
    link = page.as_uri() + "#node=" + node_id
    check_details(dump_dom(chrome, link), data, node_id, source_layer, "#node link", checks, False)


# Run in the real model's page: searches a node, collapses and opens its
# outermost region, zooms; writes what it saw as JSON into #check-result.
INTERACT = """
const out = {}, $ = id => document.getElementById(id);
const boxes = () => document.querySelectorAll('#plan0 .node').length;
const regionBoxes = () => document.querySelectorAll('#plan0 .region').length;
const scale = () => +/scale\\(([^)]+)\\)/.exec(document.querySelector('#plan0 .content').getAttribute('transform'))[1];
out.fitted = {nodes: boxes(), regions: regionBoxes(), scale: scale(), depth: $('collapse-depth').value};
const s = $('search');
s.value = NAME;
s.dispatchEvent(new Event('input'));
s.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter'}));
const me = document.querySelector('.node[data-id="' + ID + '"]');
const view = document.querySelector('#plan0 .view').getBoundingClientRect();
const r = me ? me.getBoundingClientRect() : null;
out.search = {
  count: $('search-count').textContent,
  drawn: !!me,
  selected: !!me && me.classList.contains('selected') && me.classList.contains('match'),
  panel: $('node-name') ? $('node-name').textContent : null,
  offset: r ? [r.left + r.width / 2 - (view.left + view.width / 2),
               r.top + r.height / 2 - (view.top + view.height / 2)] : null,
  scale: scale(),
};
const before = boxes();
const buttons = document.querySelectorAll('#region-path button');
out.collapse = {buttons: buttons.length};
if(buttons.length){
  buttons[0].click();
  const box = document.querySelector('#plan0 .region.match');
  out.collapse.nodes = [before, boxes()];
  out.collapse.box = box ? box.querySelector('title').textContent : null;
  out.collapse.hidden = !document.querySelector('.node[data-id="' + ID + '"]');
  if(box) box.dispatchEvent(new MouseEvent('click', {bubbles: true}));
  out.collapse.reopened = boxes();
}
const z = scale();
$('zoom-in').click();
out.zoom = [z, scale()];
const pre = document.createElement('pre');
pre.id = 'check-result';
pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
"""


def check_real(chrome, args, out, checks):
    model = pathlib.Path(args.real_model)
    page = out / "real.html"
    text, data = explore(args.bin, model, page)
    size = page.stat().st_size
    what = f"{model.parent.name}"
    checks.expect(what, size <= args.max_bytes, f"page is {size} bytes (at most {args.max_bytes})")
    nodes = data["plans"][0]["nodes"]
    # A convolution in a region, half-way down the graph.
    convs = [i for i, n in enumerate(nodes) if n["op"].startswith("Conv") and "region" in n]
    checks.expect(what, bool(convs), f"{len(nodes)} nodes, {len(convs)} convolutions in regions")
    if not convs:
        return
    index = convs[len(convs) // 2]
    node_id, name = f"p0n{index}", nodes[index]["name"]
    print(f"searching '{name}' ({node_id})")
    script = INTERACT.replace("NAME", json.dumps(name)).replace("ID", json.dumps(node_id))
    probe = out / "real_interact.html"
    probe.write_text(text.replace("</body>", after_load(script) + "</body>"))
    dom = Dom()
    dom.feed(dump_dom(chrome, probe.as_uri()))
    got = json.loads(dom.text.get("check-result") or "{}")
    print(f"  page: {json.dumps(got)}")
    fitted, search, collapse = got.get("fitted", {}), got.get("search", {}), got.get("collapse", {})
    checks.expect(what, fitted.get("scale", 9) <= 1, f"opens with the whole graph fitted (scale {fitted.get('scale')})")
    checks.expect(what, search.get("count", "").endswith("matches"), f"search counts matches: '{search.get('count')}'")
    checks.expect(what, search.get("selected"), "search draws, highlights and selects the node")
    checks.expect(what, search.get("panel") == name, "the panel shows the found node")
    off = search.get("offset") or [1e9, 1e9]
    checks.expect(what, max(map(abs, off)) < 2, f"the found node is centred (off by {off})")
    checks.expect(what, collapse.get("buttons", 0) > 0, "the panel names the node's regions")
    n = collapse.get("nodes", [0, 0])
    hides = n[1] < n[0] and collapse.get("hidden")
    checks.expect(what, hides, f"collapsing its region hides nodes ({n[0]} -> {n[1]} boxes)")
    checks.expect(what, bool(collapse.get("box")), f"the region is one box: '{collapse.get('box')}'")
    checks.expect(what, collapse.get("reopened", 0) > n[1], "clicking the box opens the region")
    zoom = got.get("zoom", [1, 1])
    checks.expect(what, zoom[1] > zoom[0], f"zoom in: scale {zoom[0]:.3f} -> {zoom[1]:.3f}")
    # Screenshots at two zoom levels: the whole graph, and a node zoomed to.
    fit, near = out / "explorer_fit.png", out / "explorer_node.png"
    screenshot(chrome, page.as_uri(), fit)
    screenshot(chrome, page.as_uri() + "#node=" + node_id, near)
    for shot in (fit, near):
        checks.expect(what, shot.stat().st_size > 10000, f"screenshot {shot} ({shot.stat().st_size} bytes)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=str(ROOT / "target/release/layoutopt"))
    ap.add_argument("--model", default=str(ROOT / "models/resnet_small/model.onnx"))
    densenet = ROOT / "models/zoo/DenseNet121_onnx/model.onnx"
    fallback = ROOT / "models/zoo/MobileNetV3Small_onnx/model.onnx"
    ap.add_argument("--real-model", default=str(densenet if densenet.exists() else fallback))
    ap.add_argument("--max-bytes", type=int, default=3 << 20)
    ap.add_argument("--out", default=str(ROOT / "target/explorer-check"))
    args = ap.parse_args()
    chrome = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chrome:
        print("chromium not found (apt-get install -y chromium)", file=sys.stderr)
        return 1
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    checks = Checks()
    check_bundled(chrome, args, out, checks)
    check_real(chrome, args, out, checks)
    if checks.failures:
        print(f"{len(checks.failures)} checks failed", file=sys.stderr)
        return 1
    print("all explorer checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
