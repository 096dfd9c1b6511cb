// The attempt page's task graph: tasks as boxes laid out by elkjs's ELK, groups holding
// their children (folded with the tree, see attempt.js), zoom, pan and fit. State colours
// come from /ui/states.css (--state-NAME). Data is only ever put in the page as text.
"use strict";

(() => {
  const SVG_NS = "http://www.w3.org/2000/svg";
  const NODE_HEIGHT = 28;
  const CHAR_WIDTH = 7.4;
  const MAX_LABEL_CHARS = 36;
  const GROUP_PADDING = "[top=30,left=12,bottom=12,right=12]";
  const MORE = "more:";
  const LAYOUT = {
    "elk.algorithm": "layered",
    "elk.direction": "RIGHT",
    "elk.spacing.nodeNode": "12",
    "elk.layered.spacing.nodeNodeBetweenLayers": "28",
    "elk.layered.considerModelOrder.strategy": "NODES_AND_EDGES",
    "elk.layered.nodePlacement.strategy": "BRANDES_KOEPF",
  };
  // Past this many boxes the layout tries fewer orders to cross fewer arrows: faster.
  const LARGE_GRAPH = 60;
  const ZOOM_STEP = 1.25;
  // The smallest scale the graph is first shown at (labels stay legible).
  const FIRST_ZOOM = 0.6;
  const MIN_ZOOM = 0.05;
  const MAX_ZOOM = 4;

  function svg(name, attributes) {
    const element = document.createElementNS(SVG_NS, name);
    for (const [key, value] of Object.entries(attributes || {})) {
      element.setAttribute(key, String(value));
    }
    return element;
  }

  // A state's colour, from the generated stylesheet's custom property.
  function stateColour(state) {
    const value = getComputedStyle(document.documentElement).getPropertyValue(`--state-${state}`).trim();
    return value || getComputedStyle(document.documentElement).getPropertyValue("--muted").trim() || "#888";
  }

  function label(task, collapsedCount) {
    const name = task.name.length > MAX_LABEL_CHARS ? task.name.slice(0, MAX_LABEL_CHARS - 1) + "…" : task.name;
    return collapsedCount ? `${name} ▸ ${collapsedCount}` : name;
  }

  // The task graph: tasks as boxes, groups as boxes holding their children (or one box
  // when collapsed), an arrow from each task to those that wait for it; zoomed and
  // panned by a transform on one group of the picture.
  class TaskGraph {
    constructor(container, tasks, onToggle, onOpen) {
      this.container = container;
      this.tasks = tasks;
      this.onToggle = onToggle;
      this.onOpen = onOpen;
      this.elk = new ELK();
      this.drawing = 0;
      this.view = null;
    }

    // Each task's drawn stand-in: itself, its outermost collapsed ancestor, or the box
    // of the children a partly shown group leaves out.
    standIns() {
      const tasks = this.tasks;
      const shown = new Map();
      for (const task of tasks.list) {
        const parent = task.parent && tasks.byId.has(task.parent) ? task.parent : null;
        if (parent === null) shown.set(task.id, task.id);
        else if (shown.get(parent) !== parent) shown.set(task.id, shown.get(parent));
        else if (tasks.collapsed.has(parent)) shown.set(task.id, parent);
        else if (tasks.place.get(task.id) >= (tasks.partial.get(parent) ?? Infinity)) shown.set(task.id, MORE + parent);
        else shown.set(task.id, task.id);
      }
      return shown;
    }

    ancestors(id) {
      if (id.startsWith(MORE)) {
        const group = id.slice(MORE.length);
        return [group, ...this.tasks.ancestors(group)];
      }
      return this.tasks.ancestors(id);
    }

    elkGraph() {
      const tasks = this.tasks;
      const shown = this.standIns();
      const thoroughness = new Set(shown.values()).size > LARGE_GRAPH ? "1" : "7";
      const layout = { ...LAYOUT, "elk.layered.thoroughness": thoroughness };
      const nodes = new Map();
      const build = (task) => {
        const kids = tasks.kids(task.id);
        const closed = kids.length > 0 && tasks.collapsed.has(task.id);
        const text = label(task, closed ? kids.length : 0);
        const node = { id: task.id, width: Math.max(60, text.length * CHAR_WIDTH + 20), height: NODE_HEIGHT, text };
        nodes.set(task.id, node);
        if (kids.length && !closed) {
          const count = tasks.partial.get(task.id) ?? kids.length;
          node.layoutOptions = { ...layout, "elk.padding": GROUP_PADDING };
          node.children = kids.slice(0, count).map(build);
          node.edges = [];
          if (count < kids.length) {
            const more = `… ${kids.length - count} more tasks`;
            node.children.push({ id: MORE + task.id, width: more.length * CHAR_WIDTH + 20, height: NODE_HEIGHT, text: more });
          }
        }
        return node;
      };
      const root = { id: "graph-root", layoutOptions: layout, children: tasks.roots.map(build), edges: [] };
      nodes.set(root.id, root);
      const seen = new Set();
      for (const [upstream, downstream] of tasks.data.edges) {
        const from = shown.get(upstream);
        const to = shown.get(downstream);
        const key = `${from}>${to}`;
        if (!from || !to || from === to || seen.has(key)) continue;
        const fromAncestors = this.ancestors(from);
        const toAncestors = this.ancestors(to);
        if (fromAncestors.includes(to) || toAncestors.includes(from)) continue;
        seen.add(key);
        const container = fromAncestors.find((id) => toAncestors.includes(id)) || root.id;
        if (fromAncestors[0] !== toAncestors[0]) root.layoutOptions = { ...layout, "elk.hierarchyHandling": "INCLUDE_CHILDREN" };
        nodes.get(container).edges.push({ id: `e${seen.size}`, sources: [from], targets: [to] });
      }
      return root;
    }

    async draw() {
      const ticket = ++this.drawing;
      const laid = await this.elk.layout(this.elkGraph());
      if (ticket !== this.drawing) return;
      this.size = { width: Math.ceil(laid.width), height: Math.ceil(laid.height) };
      const picture = svg("svg", {
        id: "task-graph", width: "100%", height: "100%",
        role: "group", "aria-label": `Task graph of ${this.tasks.list.length} tasks`,
      });
      const defs = svg("defs");
      const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" });
      marker.append(svg("path", { d: "M0,0 L10,5 L0,10 z" }));
      defs.append(marker);
      const viewport = svg("g", { class: "viewport" });
      const nodeLayer = svg("g");
      const edgeLayer = svg("g");
      this.places = new Map();
      const walk = (node, x0, y0) => {
        for (const child of node.children || []) {
          const x = x0 + child.x;
          const y = y0 + child.y;
          this.places.set(child.id, { x, y, width: child.width, height: child.height });
          nodeLayer.append(this.box(child, x, y));
          walk(child, x, y);
        }
        for (const edge of node.edges || []) {
          for (const section of edge.sections || []) {
            const points = [section.startPoint, ...(section.bendPoints || []), section.endPoint];
            const d = points.map((p, i) => `${i ? "L" : "M"}${x0 + p.x},${y0 + p.y}`).join(" ");
            edgeLayer.append(svg("path", { class: "edge", d, "marker-end": "url(#arrow)" }));
          }
        }
      };
      walk(laid, 0, 0);
      viewport.append(nodeLayer, edgeLayer);
      picture.append(defs, viewport);
      this.picture = picture;
      this.viewport = viewport;
      this.container.replaceChildren(picture);
      this.listen(picture);
      if (this.view) this.apply();
      else this.firstView();
      document.body.dataset.graphDrawn = "true";
    }

    // Zoom and pan: the transform of the picture's viewport group.
    apply() {
      const { x, y, k } = this.view;
      this.viewport.setAttribute("transform", `translate(${x},${y}) scale(${k})`);
      this.container.dataset.zoom = k.toFixed(3);
    }

    fit(atMostOne = false) {
      const box = this.container.getBoundingClientRect();
      const width = box.width || 800;
      const height = box.height || 400;
      let k = Math.min(width / (this.size.width + 20), height / (this.size.height + 20));
      if (atMostOne) k = Math.min(1, k);
      k = Math.max(MIN_ZOOM, Math.min(MAX_ZOOM, k));
      this.view = { k, x: (width - this.size.width * k) / 2, y: Math.max(4, (height - this.size.height * k) / 2) };
      this.apply();
    }

    // At first: the whole graph if it is legible so, else legible (at least FIRST_ZOOM)
    // around the first failure (or from the left).
    firstView() {
      this.fit(true);
      if (this.view.k >= FIRST_ZOOM) return;
      const box = this.container.getBoundingClientRect();
      const k = FIRST_ZOOM;
      const failed = this.tasks.failures()[0];
      const stand = failed && this.standIns().get(failed.id);
      const place = stand && this.places.get(stand);
      if (place) {
        const x = box.width / 2 - (place.x + place.width / 2) * k;
        const y = box.height / 2 - (place.y + place.height / 2) * k;
        this.view = { k, x, y };
      } else {
        this.view = { k, x: 8, y: Math.max(4, (box.height - this.size.height * k) / 2) };
      }
      this.apply();
    }

    zoom(factor, cx, cy) {
      if (!this.view) return;
      const box = this.container.getBoundingClientRect();
      const px = cx ?? box.width / 2;
      const py = cy ?? box.height / 2;
      const k = Math.max(MIN_ZOOM, Math.min(MAX_ZOOM, this.view.k * factor));
      const ratio = k / this.view.k;
      this.view = { k, x: px - (px - this.view.x) * ratio, y: py - (py - this.view.y) * ratio };
      this.apply();
    }

    listen(picture) {
      picture.addEventListener("wheel", (event) => {
        event.preventDefault();
        const box = this.container.getBoundingClientRect();
        this.zoom(event.deltaY < 0 ? ZOOM_STEP : 1 / ZOOM_STEP, event.clientX - box.left, event.clientY - box.top);
      }, { passive: false });
      let drag = null;
      picture.addEventListener("pointerdown", (event) => {
        if (event.button !== 0) return;
        drag = { x: event.clientX, y: event.clientY, view: { ...this.view }, moved: false };
      });
      picture.addEventListener("pointermove", (event) => {
        if (!drag) return;
        const dx = event.clientX - drag.x;
        const dy = event.clientY - drag.y;
        if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
        if (!drag.moved) picture.setPointerCapture(event.pointerId);
        drag.moved = true;
        this.view = { ...drag.view, x: drag.view.x + dx, y: drag.view.y + dy };
        this.apply();
      });
      const end = (event) => {
        if (drag && drag.moved) {
          this.dragged = true;
          window.setTimeout(() => { this.dragged = false; }, 0);
          if (picture.hasPointerCapture(event.pointerId)) picture.releasePointerCapture(event.pointerId);
        }
        drag = null;
      };
      picture.addEventListener("pointerup", end);
      picture.addEventListener("pointercancel", end);
    }

    // The box standing for the children a partly shown group leaves out: a click shows all.
    moreBox(node, x, y) {
      const group = svg("g", { class: "more", tabindex: 0, role: "button" });
      const text = svg("text", { x: x + 10, y: y + 18 });
      text.textContent = node.text;
      group.append(svg("rect", { x, y, width: node.width, height: node.height, rx: 4 }), text);
      const showAll = () => {
        if (this.dragged) return;
        this.tasks.partial.delete(node.id.slice(MORE.length));
        this.onToggle();
      };
      group.addEventListener("click", showAll);
      group.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          showAll();
        }
      });
      return group;
    }

    // A task's box opens its log in the pane (and shows its row); a group's box is a
    // button that opens or closes it, in the graph and the tree together.
    box(node, x, y) {
      if (node.id.startsWith(MORE)) return this.moreBox(node, x, y);
      const task = this.tasks.byId.get(node.id);
      const open = Boolean(node.children);
      const closed = !open && this.tasks.kids(task.id).length > 0;
      const group = svg("g", { class: this.nodeClass(open, closed), "data-task-id": task.id, "data-state": task.state });
      const title = svg("title");
      title.textContent = `${task.full_name} (${task.state})`;
      const text = svg("text", { x: x + 10, y: y + 18 });
      text.textContent = node.text;
      const shape = svg("rect", { x, y, width: node.width, height: node.height, rx: 4, stroke: stateColour(task.state) });
      group.append(title, shape, text);
      group.setAttribute("tabindex", "0");
      group.setAttribute("role", "button");
      const act = () => {
        if (this.dragged) return;
        if (open || closed) {
          this.tasks.toggle(task.id);
          this.onToggle();
        } else this.onOpen(task.id);
      };
      if (open || closed) group.setAttribute("aria-expanded", String(open));
      group.addEventListener("click", (event) => {
        event.stopPropagation();
        act();
      });
      group.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          act();
        }
      });
      return group;
    }

    nodeClass(open, closed) {
      return `node${open ? " group" : ""}${closed ? " collapsed" : ""}`;
    }

    // New states: recolour the boxes; new tasks (generated ones): draw again.
    recolour() {
      for (const box of this.container.querySelectorAll("g.node")) {
        const task = this.tasks.byId.get(box.dataset.taskId);
        if (!task) continue;
        box.dataset.state = task.state;
        box.querySelector("rect").setAttribute("stroke", stateColour(task.state));
        box.querySelector("title").textContent = `${task.full_name} (${task.state})`;
      }
    }
  }

  window.TickworkGraph = { TaskGraph, svg, stateColour, ZOOM_STEP, MORE };
})();
