// The explorer page: draws every plan's graph from the embedded data (nothing
// is fetched), with zoom, pan, search and collapsible regions.
(function(){
'use strict';
const D = JSON.parse(document.getElementById('explorer-data').textContent);
const SVG = 'http://www.w3.org/2000/svg';
const NODE_W = 170, NODE_H = 44, GAP_X = 24, GAP_Y = 34;
const panel = document.getElementById('panel');
const $ = id => document.getElementById(id);

function el(tag, attrs, text){
  const e = document.createElement(tag);
  for(const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if(text !== undefined) e.textContent = text;
  return e;
}
function svgEl(tag, attrs, parent){
  const e = document.createElementNS(SVG, tag);
  for(const k in attrs) e.setAttribute(k, attrs[k]);
  if(parent) parent.appendChild(e);
  return e;
}
function short(s, n){ return s.length <= n ? s : s.slice(0, n - 1) + '…'; }
function spanText(s){ return s.file + ": layer '" + s.layer + "' (" + s.op_type + ' #' + s.index + ')'; }
function spansText(spans){
  if(!spans.length) return '<no source layer>';
  return spans.map((s, i) => i ? "layer '" + s.layer + "' (" + s.op_type + ' #' + s.index + ')' : spanText(s)).join(' + ');
}

// Regions: depth (1 = outermost), chain of ancestors, and which are collapsed
// (shared by all plans, as regions are named by source layers).
const regionDepth = D.regions.map(() => 0);
D.regions.forEach((r, i) => { let d = 1, p = r.parent; while(p !== undefined){ d++; p = D.regions[p].parent; } regionDepth[i] = d; });
function ancestors(r){ const out = []; while(r !== undefined){ out.push(r); r = D.regions[r].parent; } return out; }
const collapsed = new Set();
function regionLabel(r){
  const name = D.regions[r].name, p = D.regions[r].parent;
  return p === undefined ? name : name.slice(D.regions[p].name.length).replace(/^[/._:]+/, '');
}

// One view per plan: its SVG, the group zoom and pan move, and the drawn layout.
const views = D.plans.map((plan, k) => {
  const host = document.querySelector('#plan' + k + ' .view');
  const svg = svgEl('svg', {'class': 'graph'}, host);
  const defs = svgEl('defs', {}, svg);
  const m = svgEl('marker', {id: 'arrow' + k, viewBox: '0 0 8 8', refX: 8, refY: 4, markerWidth: 6, markerHeight: 6, orient: 'auto'}, defs);
  svgEl('path', {d: 'M0,0 L8,4 L0,8 z', fill: 'gray'}, m);
  const g = svgEl('g', {'class': 'content'}, svg);
  return {k, plan, host, svg, g, scale: 1, tx: 0, ty: 0, width: 0, height: 0, pos: new Map(), unit: [], elems: new Map()};
});

// The box a node is drawn in: its outermost collapsed region, else itself.
function unitOf(node, i){
  let u = 'n' + i;
  for(const r of ancestors(node.region)) if(collapsed.has(r)) u = 'r' + r;
  return u;
}

// Layered layout, as before zooming existed: a box one layer below its deepest
// producer; its column the mean of its producers' columns, which keeps chains
// straight; boxes of a layer never share a column.
function layout(v){
  const nodes = v.plan.nodes;
  v.unit = nodes.map(unitOf);
  const units = [], layer = new Map(), preds = new Map(), members = new Map();
  nodes.forEach((n, i) => {
    const u = v.unit[i];
    if(!layer.has(u)){ units.push(u); layer.set(u, 0); preds.set(u, []); members.set(u, []); }
    members.get(u).push(i);
    for(const [p] of n.inputs){
      const pu = v.unit[p];
      if(pu === u) continue;
      if(!preds.get(u).includes(pu)) preds.get(u).push(pu);
      layer.set(u, Math.max(layer.get(u), layer.get(pu) + 1));
    }
  });
  const rows = [];
  units.forEach(u => { const l = layer.get(u); (rows[l] = rows[l] || []).push(u); });
  const col = new Map(), order = new Map(units.map((u, i) => [u, i]));
  for(const row of rows){
    if(!row) continue;
    const want = row.map(u => {
      const ps = preds.get(u).filter(p => col.has(p));
      return [ps.length ? ps.reduce((s, p) => s + col.get(p), 0) / ps.length : order.get(u), order.get(u), u];
    });
    want.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    let next = -Infinity;
    for(const [c, , u] of want){ const slot = Math.max(Math.round(c), next); col.set(u, slot); next = slot + 1; }
  }
  let lo = Infinity, hi = -Infinity;
  col.forEach(c => { lo = Math.min(lo, c); hi = Math.max(hi, c); });
  if(!units.length){ lo = 0; hi = 0; }
  v.pos = new Map(units.map(u => [u, {x: (col.get(u) - lo) * (NODE_W + GAP_X) + GAP_X, y: layer.get(u) * (NODE_H + GAP_Y) + GAP_Y}]));
  v.members = members;
  v.width = (hi - lo + 1) * (NODE_W + GAP_X) + GAP_X;
  v.height = rows.length * (NODE_H + GAP_Y) + GAP_Y;
}

function draw(v){
  layout(v);
  const nodes = v.plan.nodes;
  v.g.textContent = '';
  v.elems = new Map();
  const edges = svgEl('g', {'class': 'edges'}, v.g);
  const drawn = new Map();
  nodes.forEach((n, i) => {
    for(const [p, out] of n.inputs){
      const a = v.unit[p], b = v.unit[i];
      if(a === b) continue;
      const key = a + '>' + b, src = nodes[p];
      const title = src.outputs[out].name + ' (' + (src.output_layouts[out] || '') + ')';
      if(drawn.has(key)){ drawn.get(key).push(title); continue; }
      drawn.set(key, [title]);
      const s = v.pos.get(a), t = v.pos.get(b);
      const sx = s.x + NODE_W / 2, sy = s.y + NODE_H, tx = t.x + NODE_W / 2, ty = t.y;
      // An edge past other layers bows out to the right, so that it is not
      // hidden behind the boxes of a straight chain (DenseNet's concats).
      const bow = ty - sy > NODE_H + GAP_Y ? NODE_W * 0.8 : 0, c1 = sy + (ty - sy) / 3, c2 = ty - (ty - sy) / 3;
      const d = bow ? `M${sx},${sy} C${sx + bow},${c1} ${tx + bow},${c2} ${tx},${ty}` : `M${sx},${sy} C${sx},${(sy + ty) / 2} ${tx},${(sy + ty) / 2} ${tx},${ty}`;
      const path = svgEl('path', {'class': 'edge', d, 'marker-end': `url(#arrow${v.k})`}, edges);
      svgEl('title', {}, path).textContent = title;
    }
  });
  for(const [u, p] of v.pos){
    const box = svgEl('g', {transform: `translate(${p.x},${p.y})`}, v.g);
    const title = svgEl('title', {}, box);
    svgEl('rect', {width: NODE_W, height: NODE_H, rx: 6}, box);
    const line1 = svgEl('text', {x: 8, y: 17, 'class': 'op'}, box);
    const line2 = svgEl('text', {x: 8, y: 34, 'class': 'layout'}, box);
    if(u[0] === 'r'){
      const r = +u.slice(1), count = v.members.get(u).length;
      box.setAttribute('class', 'region');
      box.dataset.region = r;
      title.textContent = D.regions[r].name + ' (' + count + ' nodes, collapsed: click to open)';
      // The end of a long name tells regions apart (MobileNetV3Small_1/expanded_conv_6).
      const label = regionLabel(r);
      line1.textContent = '▸ ' + (label.length <= 22 ? label : '…' + label.slice(-21));
      line2.textContent = count + ' nodes';
    } else {
      const i = +u.slice(1), n = nodes[i];
      box.setAttribute('class', ('node ' + n.class).trim());
      box.dataset.id = 'p' + v.k + 'n' + i;
      title.textContent = n.name + ' — ' + spansText(n.spans);
      line1.textContent = short(n.label, 24);
      line2.textContent = short(n.output_layouts.join(', '), 26);
    }
    v.elems.set(u, box);
  }
  svgEl('rect', {'class': 'bounds', width: v.width, height: v.height, fill: 'none'}, v.g);
  mark();
}

// Zoom and pan: the content group is scaled and moved in the SVG's pixels.
// Until the user zooms, pans or selects, the graphs stay fitted to their views.
let touched = false;
function apply(v){
  v.g.setAttribute('transform', `translate(${v.tx},${v.ty}) scale(${v.scale})`);
  if(v.k === 0) $('zoom-level').textContent = Math.round(v.scale * 100) + '%';
}
function zoomAt(v, factor, cx, cy){
  touched = true;
  const s = Math.min(4, Math.max(0.01, v.scale * factor));
  v.tx = cx - (cx - v.tx) * s / v.scale;
  v.ty = cy - (cy - v.ty) * s / v.scale;
  v.scale = s;
  apply(v);
}
function fit(v){
  touched = false;
  const w = v.svg.clientWidth, h = v.svg.clientHeight;
  v.scale = fitScale(v);
  v.tx = (w - v.width * v.scale) / 2;
  v.ty = (h - v.height * v.scale) / 2;
  apply(v);
}
function centreOn(v, u, minScale){
  const p = v.pos.get(u);
  if(!p) return;
  touched = true;
  v.scale = Math.max(v.scale, minScale);
  v.tx = v.svg.clientWidth / 2 - (p.x + NODE_W / 2) * v.scale;
  v.ty = v.svg.clientHeight / 2 - (p.y + NODE_H / 2) * v.scale;
  apply(v);
}
let dragged = false;
views.forEach(v => {
  v.svg.addEventListener('wheel', e => {
    e.preventDefault();
    const r = v.svg.getBoundingClientRect();
    zoomAt(v, Math.exp(-e.deltaY * 0.0015), e.clientX - r.left, e.clientY - r.top);
  }, {passive: false});
  let start = null;
  v.svg.addEventListener('pointerdown', e => { start = {x: e.clientX, y: e.clientY, tx: v.tx, ty: v.ty}; dragged = false; });
  v.svg.addEventListener('pointermove', e => {
    if(!start) return;
    const dx = e.clientX - start.x, dy = e.clientY - start.y;
    if(!dragged && Math.hypot(dx, dy) < 4) return;
    if(!dragged){ dragged = true; v.svg.setPointerCapture(e.pointerId); v.svg.classList.add('dragging'); }
    v.tx = start.tx + dx; v.ty = start.ty + dy;
    touched = true;
    apply(v);
  });
  const end = () => { start = null; v.svg.classList.remove('dragging'); };
  v.svg.addEventListener('pointerup', end);
  v.svg.addEventListener('pointercancel', end);
  // A click (not the end of a drag) selects a node or opens a region.
  v.svg.addEventListener('click', e => {
    if(dragged) return;
    const box = e.target.closest('.node,.region');
    if(!box) return;
    if(box.classList.contains('region')) openRegion(+box.dataset.region, v);
    else { select(box.dataset.id); history.replaceState(null, '', '#node=' + box.dataset.id); }
  });
});
function centreOfView(v){ return [v.svg.clientWidth / 2, v.svg.clientHeight / 2]; }
$('zoom-in').addEventListener('click', () => views.forEach(v => zoomAt(v, 1.25, ...centreOfView(v))));
$('zoom-out').addEventListener('click', () => views.forEach(v => zoomAt(v, 0.8, ...centreOfView(v))));
$('zoom-fit').addEventListener('click', () => views.forEach(fit));

// Collapsing: a collapsed region is one box; the graphs are laid out anew.
function redraw(){ views.forEach(draw); }
function openRegion(r, v){
  collapsed.delete(r);
  const first = v.plan.nodes.findIndex(n => ancestors(n.region).includes(r));
  redraw();
  if(first >= 0) centreOn(v, v.unit[first], 0);
}
function collapseRegion(r){
  collapsed.add(r);
  redraw();
  views.forEach(v => { if(v.pos.has('r' + r)) centreOn(v, 'r' + r, 0); });
}
const maxDepth = Math.max(0, ...regionDepth);
for(let d = 1; d <= maxDepth; d++) $('collapse-depth').appendChild(el('option', {value: d}, String(d)));
function collapseAt(d){
  collapsed.clear();
  if(d) regionDepth.forEach((rd, r) => { if(rd === d) collapsed.add(r); });
  $('collapse-depth').value = String(d);
}
$('collapse-depth').addEventListener('change', e => { collapseAt(+e.target.value); redraw(); views.forEach(fit); });
// A large graph opens with regions collapsed at the deepest level at which
// the whole graph fits its view at a readable scale.
const READABLE = 0.3;
function fitScale(v){ return Math.min(1, v.svg.clientWidth / v.width, v.svg.clientHeight / v.height); }
function overviewDepth(){
  for(let d = 0; d <= maxDepth; d++){
    const depth = d ? maxDepth + 1 - d : 0;
    collapseAt(depth);
    views.forEach(layout);
    if(views.every(v => fitScale(v) >= READABLE)) return depth;
  }
  return maxDepth ? 1 : 0;
}
$('expand-all').addEventListener('click', () => { collapsed.clear(); $('collapse-depth').value = '0'; redraw(); views.forEach(fit); });

// Search: nodes whose name, op or a source layer contains the text; matches
// are highlighted (a collapsed region holding one too), and Enter or the
// arrows open, centre and select them in turn.
let matches = [], current = -1, selected = null;
function search(){
  const q = $('search').value.trim().toLowerCase();
  matches = [];
  current = -1;
  if(q) views.forEach(v => v.plan.nodes.forEach((n, i) => {
    if(n.name.toLowerCase().includes(q) || n.op.toLowerCase().includes(q) || n.spans.some(s => s.layer.toLowerCase().includes(q)))
      matches.push('p' + v.k + 'n' + i);
  }));
  $('search-count').textContent = q ? matches.length + ' matches' : '';
  mark();
}
function step(delta){
  if(!matches.length) return;
  current = (current + delta + matches.length) % matches.length;
  $('search-count').textContent = (current + 1) + ' / ' + matches.length + ' matches';
  select(matches[current]);
}
$('search').addEventListener('input', search);
$('search').addEventListener('keydown', e => { if(e.key === 'Enter') step(e.shiftKey ? -1 : 1); });
$('search-next').addEventListener('click', () => step(1));
$('search-prev').addEventListener('click', () => step(-1));

function parseId(id){ const m = /^p(\d+)n(\d+)$/.exec(id); return m && D.plans[+m[1]] && D.plans[+m[1]].nodes[+m[2]] ? [+m[1], +m[2]] : null; }

// Classes that follow the selection and the search: selected, peer (same
// source layer in another plan), match.
function mark(){
  views.forEach(v => v.elems.forEach(e => e.classList.remove('selected', 'peer', 'match')));
  for(const id of matches){
    const [k, i] = parseId(id);
    const e = views[k].elems.get(views[k].unit[i]);
    if(e) e.classList.add('match');
  }
  const at = selected && parseId(selected);
  if(!at) return;
  const [k, i] = at, v = views[k], e = v.elems.get('n' + i);
  if(e) e.classList.add('selected');
  const layers = v.plan.nodes[i].spans.map(s => s.layer);
  views.forEach(o => { if(o !== v) o.plan.nodes.forEach((n, j) => {
    if(n.spans.some(s => layers.includes(s.layer))){ const pe = o.elems.get('n' + j); if(pe) pe.classList.add('peer'); }
  }); });
}

// A loop nest's text and line diff after each step, rebuilt from its edits
// (a count of lines kept, a negative count removed, or a line added).
function replay(tir){
  let prev = [];
  return tir.steps.map(s => {
    const lines = [], diff = [];
    let at = 0;
    for(const e of s.edits){
      if(typeof e === 'string'){ diff.push(['+', e]); lines.push(e); }
      else if(e > 0) for(let j = 0; j < e; j++){ diff.push([' ', prev[at]]); lines.push(prev[at++]); }
      else for(let j = 0; j < -e; j++) diff.push(['-', prev[at++]]);
    }
    prev = lines;
    return {primitive: s.primitive, text: lines.join('\n'), diff};
  });
}

function section(title){ panel.appendChild(el('h3', {}, title)); }
// Selects a node: opens the regions hiding it, centres it in its plan (and
// its first peer in the others) and shows its details.
function select(id){
  const at = parseId(id);
  if(!at) return;
  const [k, i] = at, n = D.plans[k].nodes[i];
  selected = id;
  const hidden = ancestors(n.region).filter(r => collapsed.has(r));
  if(hidden.length){ hidden.forEach(r => collapsed.delete(r)); redraw(); }
  else mark();
  centreOn(views[k], 'n' + i, 1);
  const layers = n.spans.map(s => s.layer);
  views.forEach(o => { if(o.k === k) return;
    const j = o.plan.nodes.findIndex(m => m.spans.some(s => layers.includes(s.layer)));
    if(j >= 0) centreOn(o, o.unit[j], views[k].scale);
  });
  showDetails(n);
}
function showDetails(n){
  panel.innerHTML = '';
  panel.appendChild(el('h2', {id: 'node-name'}, n.name));
  const classes = n.class.split(' ');
  const kind = classes.includes('transform') ? ' (kept layout transform)'
    : classes.includes('relabel') ? ' (relabel: no data moved)' : '';
  panel.appendChild(el('p', {id: 'node-op'}, n.op + kind));
  if(n.region !== undefined){
    const p = el('p', {id: 'region-path'}, 'region: ');
    ancestors(n.region).reverse().forEach(r => {
      const b = el('button', {title: 'collapse ' + D.regions[r].name}, regionLabel(r));
      b.addEventListener('click', () => collapseRegion(r));
      p.appendChild(b);
    });
    panel.appendChild(p);
  }
  section('Source spans');
  const ul = el('ul', {id: 'spans'});
  n.spans.forEach(s => ul.appendChild(el('li', {'class': 'span'}, "layer '" + s.layer + "' (" + s.op_type + ' #' + s.index + ') in ' + s.file)));
  if(!n.spans.length) ul.appendChild(el('li', {}, '(none)'));
  panel.appendChild(ul);
  section('Fusion');
  panel.appendChild(el('p', {id: 'fused'}, n.fused || 'runs as a step of its own'));
  section('Layouts');
  panel.appendChild(el('p', {id: 'layouts'}, 'inputs: ' + (n.input_layouts.join(', ') || '-') + ' → outputs: ' + n.output_layouts.join(', ')));
  panel.appendChild(el('p', {}, 'outputs: ' + n.outputs.map(o => o.name + ' ' + o.ty).join(', ')));
  section('Loop nest');
  if(n.tir === undefined){ panel.appendChild(el('p', {id: 'tir-note'}, n.tir_note || 'no loop nest')); return; }
  const tir = D.tirs[n.tir], steps = replay(tir);
  if(tir.layouts.length) panel.appendChild(el('p', {}, 'buffers: ' + tir.layouts.join('; ')));
  panel.appendChild(el('pre', {id: 'loop-nest'}, steps[steps.length - 1].text));
  section('Schedule record');
  const ol = el('ol', {id: 'schedule-record'});
  steps.forEach((s, i) => {
    const li = el('li', {'class': 'step'});
    li.appendChild(el('h4', {}, s.primitive));
    const changed = s.diff.filter(d => d[0] !== ' ').length;
    li.appendChild(el('p', {}, i === 0 ? 'the unscheduled loop nest' : changed + ' lines changed'));
    const pre = el('pre', {'class': 'diff'});
    s.diff.forEach(([tag, text]) => pre.appendChild(el('div', {'class': tag === '+' ? 'add' : tag === '-' ? 'del' : 'same'}, (tag === '+' ? '+ ' : tag === '-' ? '- ' : '  ') + text)));
    li.appendChild(pre);
    ol.appendChild(li);
  });
  panel.appendChild(ol);
}

// Laid out once the page has its final size (the header may still reflow
// while the script runs).
window.addEventListener('load', () => {
  collapseAt(overviewDepth());
  redraw();
  views.forEach(fit);
  const m = location.hash.match(/^#node=(.+)$/);
  if(m) select(decodeURIComponent(m[1]));
  const resized = new ResizeObserver(() => { if(!touched) views.forEach(fit); });
  views.forEach(v => resized.observe(v.svg));
});
})();
