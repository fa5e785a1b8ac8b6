"""An interactive HTML view of a memory graph: one self-contained file that opens offline.

Nodes are coloured by type and edges by type (with their label on hover); a click on a node
shows its text, time, source turns, attributes and neighbours; the search box highlights the
nodes whose id or text contains the words typed; drag pans, the wheel zooms. A link ending in
``#node=<id>`` opens with that node shown. The layout is
computed here (``networkx.spring_layout``, seeded, so the same memory draws the same way) and
the page only draws it, with no script or style fetched from anywhere.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path

import networkx as nx

from memlab.fileio import atomic_file
from memlab.memory.graph import MemoryGraph


def write_viewer(graph: MemoryGraph, path: str | os.PathLike, title: str = "memlab memory") -> Path:
    """Write the view of ``graph`` to ``path`` (atomically); returns ``path``."""
    data = graph.to_dict()
    layout = nx.Graph()
    layout.add_nodes_from(node["id"] for node in data["nodes"])
    layout.add_edges_from((edge["src"], edge["dst"]) for edge in data["edges"])
    positions = nx.spring_layout(layout, seed=0, iterations=100 if len(data["nodes"]) <= 2000 else 30)
    nodes = [{"id": n["id"], "type": n["type"], "text": n["text"], "time": n["timestamp"],
              "provenance": n["provenance"], "attributes": n["attributes"],
              "x": round(float(positions[n["id"]][0]), 4), "y": round(float(positions[n["id"]][1]), 4)}
             for n in data["nodes"]]
    edges = [{"src": e["src"], "dst": e["dst"], "type": e["type"], "label": e["label"], "directed": e["directed"]}
             for e in data["edges"]]
    payload = json.dumps({"title": title, "nodes": nodes, "edges": edges}, ensure_ascii=False, default=str)
    page = _PAGE.replace("__TITLE__", html.escape(title)).replace("__DATA__", payload.replace("</", "<\\/"))
    path = Path(path)
    with atomic_file(path) as tmp:
        tmp.write_text(page, encoding="utf-8")
    return path


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body{margin:0;font-family:sans-serif;display:flex;height:100vh}
#main{flex:1;position:relative;overflow:hidden;background:#fafafa}
svg{width:100%;height:100%;cursor:grab}
#side{width:360px;border-left:1px solid #ccc;padding:10px;overflow:auto;font-size:13px}
#side h2{font-size:15px;margin:4px 0}
#search{width:100%;box-sizing:border-box;padding:4px;margin-bottom:6px}
#legend span{display:inline-block;margin:2px 8px 2px 0}
#legend i{display:inline-block;width:10px;height:10px;border-radius:5px;margin-right:3px}
.node{stroke:#fff;stroke-width:0.6;cursor:pointer}
.node.dim{opacity:0.12}.node.hit{stroke:#000;stroke-width:2}.node.selected{stroke:#d00;stroke-width:3}
.edge{stroke-width:1.2;opacity:0.6}.edge.dim{opacity:0.05}
#details .text{white-space:pre-wrap;background:#f3f3f3;padding:6px;margin:6px 0}
#details dt{font-weight:bold;margin-top:4px}
</style></head><body>
<div id="main"><svg id="canvas" xmlns="http://www.w3.org/2000/svg">
<g id="viewport"><g id="edges"></g><g id="nodes"></g></g></svg></div>
<div id="side">
<h2 id="title"></h2><div id="summary"></div>
<input id="search" type="search" placeholder="search text or id"><div id="hits"></div>
<div id="legend"></div>
<div id="details"><p>Click a node to see its text, time and source turns.</p></div>
</div>
<script id="memory-data" type="application/json">__DATA__</script>
<script>
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("memory-data").textContent);
  var SVG = "http://www.w3.org/2000/svg";
  var nodePalette = ["#1f77b4","#ff7f0e","#2ca02c","#d62728","#9467bd","#8c564b","#e377c2","#bcbd22","#17becf"];
  var edgePalette = ["#555555","#b07aa1","#59a14f","#e15759","#76b7b2","#edc948","#9c755f","#4e79a7"];
  function colours(values, palette) {
    var map = {}; values.forEach(function (v, i) { map[v] = palette[i % palette.length]; }); return map;
  }
  var nodeTypes = Array.from(new Set(data.nodes.map(function (n) { return n.type; }))).sort();
  var edgeTypes = Array.from(new Set(data.edges.map(function (e) { return e.type; }))).sort();
  var nodeColour = colours(nodeTypes, nodePalette), edgeColour = colours(edgeTypes, edgePalette);
  var byId = {}; data.nodes.forEach(function (n) { byId[n.id] = n; });
  var size = 1000, radius = Math.max(2.5, Math.min(9, 260 / Math.sqrt(data.nodes.length + 1)));
  function px(n) { return (n.x + 1.1) / 2.2 * size; } function py(n) { return (n.y + 1.1) / 2.2 * size; }
  document.getElementById("title").textContent = data.title;
  document.getElementById("summary").textContent = data.nodes.length + " nodes, " + data.edges.length + " edges";
  var svg = document.getElementById("canvas"), viewport = document.getElementById("viewport");
  var edgeLayer = document.getElementById("edges"), nodeLayer = document.getElementById("nodes");
  var edgeElements = data.edges.map(function (e) {
    var a = byId[e.src], b = byId[e.dst], line = document.createElementNS(SVG, "line");
    line.setAttribute("x1", px(a)); line.setAttribute("y1", py(a));
    line.setAttribute("x2", px(b)); line.setAttribute("y2", py(b));
    line.setAttribute("class", "edge"); line.setAttribute("stroke", edgeColour[e.type]);
    var tip = document.createElementNS(SVG, "title");
    tip.textContent = e.type + (e.label ? ": " + e.label : ""); line.appendChild(tip);
    edgeLayer.appendChild(line); return line;
  });
  var nodeElements = {};
  data.nodes.forEach(function (n) {
    var c = document.createElementNS(SVG, "circle");
    c.setAttribute("cx", px(n)); c.setAttribute("cy", py(n)); c.setAttribute("r", radius);
    c.setAttribute("fill", nodeColour[n.type]); c.setAttribute("class", "node"); c.setAttribute("data-id", n.id);
    var tip = document.createElementNS(SVG, "title");
    tip.textContent = n.type + ": " + n.text.slice(0, 120); c.appendChild(tip);
    c.addEventListener("click", function (event) { event.stopPropagation(); show(n.id); });
    nodeLayer.appendChild(c); nodeElements[n.id] = c;
  });
  var legend = document.getElementById("legend");
  function addLegend(label, colour, kind) {
    var s = document.createElement("span"), i = document.createElement("i"); i.style.background = colour;
    if (kind === "edge") { i.style.height = "3px"; i.style.borderRadius = "0"; i.style.verticalAlign = "middle"; }
    s.appendChild(i); s.appendChild(document.createTextNode(kind + " " + label)); legend.appendChild(s);
  }
  nodeTypes.forEach(function (t) { addLegend(t, nodeColour[t], "node"); });
  edgeTypes.forEach(function (t) { addLegend(t, edgeColour[t], "edge"); });
  function field(list, name, value) {
    var dt = document.createElement("dt"), dd = document.createElement("dd");
    dt.textContent = name; dd.textContent = value; list.appendChild(dt); list.appendChild(dd);
  }
  var selected = null;
  function show(id) {
    var n = byId[id], details = document.getElementById("details");
    if (selected) nodeElements[selected].classList.remove("selected");
    selected = id; nodeElements[id].classList.add("selected");
    details.textContent = "";
    var h = document.createElement("h2"); h.textContent = n.type + " " + n.id; details.appendChild(h);
    var text = document.createElement("div");
    text.className = "text"; text.id = "node-text"; text.textContent = n.text; details.appendChild(text);
    var list = document.createElement("dl");
    field(list, "time", n.time || "-");
    field(list, "source turns", (n.provenance || []).join(", ") || "-");
    Object.keys(n.attributes || {}).forEach(function (k) {
      var v = n.attributes[k]; field(list, k, typeof v === "string" ? v : JSON.stringify(v));
    });
    var links = data.edges.filter(function (e) { return e.src === id || e.dst === id; });
    field(list, "edges", links.length ? "" : "none");
    details.appendChild(list);
    var ul = document.createElement("ul");
    links.slice(0, 200).forEach(function (e) {
      var other = e.src === id ? e.dst : e.src, li = document.createElement("li"), a = document.createElement("a");
      a.href = "#";
      a.textContent = (e.src === id ? "-> " : "<- ") + e.type + (e.label ? " (" + e.label + ")" : "") + ": "
        + byId[other].text.slice(0, 80);
      a.addEventListener("click", function (event) { event.preventDefault(); show(other); });
      li.appendChild(a); ul.appendChild(li);
    });
    details.appendChild(ul);
  }
  document.getElementById("search").addEventListener("input", function () {
    var words = this.value.toLowerCase().split(/\\s+/).filter(Boolean), hits = 0;
    data.nodes.forEach(function (n) {
      var hay = (n.id + " " + n.text).toLowerCase();
      var hit = words.length && words.every(function (w) { return hay.indexOf(w) >= 0; });
      nodeElements[n.id].classList.toggle("hit", !!hit);
      nodeElements[n.id].classList.toggle("dim", words.length > 0 && !hit);
      if (hit) hits += 1;
    });
    edgeElements.forEach(function (line) { line.classList.toggle("dim", words.length > 0); });
    document.getElementById("hits").textContent = words.length ? hits + " matching nodes" : "";
  });
  var view = {x: 0, y: 0, k: 1}, drag = null;
  function apply() {
    viewport.setAttribute("transform", "translate(" + view.x + "," + view.y + ") scale(" + view.k + ")");
  }
  svg.setAttribute("viewBox", "0 0 " + size + " " + size);
  svg.addEventListener("mousedown", function (e) { drag = {x: e.clientX - view.x, y: e.clientY - view.y}; });
  window.addEventListener("mousemove", function (e) {
    if (drag) { view.x = e.clientX - drag.x; view.y = e.clientY - drag.y; apply(); }
  });
  window.addEventListener("mouseup", function () { drag = null; });
  svg.addEventListener("wheel", function (e) {
    e.preventDefault(); var f = e.deltaY < 0 ? 1.15 : 1 / 1.15;
    view.x = e.offsetX - (e.offsetX - view.x) * f; view.y = e.offsetY - (e.offsetY - view.y) * f; view.k *= f; apply();
  }, {passive: false});
  function showLinked() {
    var linked = decodeURIComponent(location.hash.replace(/^#node=/, ""));
    if (location.hash.indexOf("#node=") === 0 && byId[linked]) show(linked);
  }
  window.addEventListener("hashchange", showLinked);
  showLinked();
  document.body.setAttribute("data-ready", "true");
})();
</script></body></html>
"""
