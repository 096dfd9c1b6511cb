// The attempt page: draws the task graph (laid out by elkjs's ELK), refreshes the state
// and task tree while the attempt runs, and loads and follows the task logs.
// Data is only ever put in the page as text (textContent, text nodes, attributes).
"use strict";

(() => {
  const SVG_NS = "http://www.w3.org/2000/svg";
  const POLL_MS = 2000;
  // An attempt of more tasks than this is refreshed less often: its data is large.
  const LARGE_TREE = 500;
  const LARGE_TREE_POLL_MS = 5000;
  const NODE_HEIGHT = 28;
  const CHAR_WIDTH = 7.4;
  const MAX_LABEL_CHARS = 36;
  const GROUP_PADDING = "[top=30,left=12,bottom=12,right=12]";
  // At most about this many tasks are drawn at first: larger groups start collapsed, and
  // a top group with more children shows its first ones and a box for the rest.
  const VISIBLE_BUDGET = 100;
  const MIN_SHOWN = 20;
  const MORE = "more:";
  const STATE_KINDS = {
    success: "ok", error: "bad", canceled: "muted", running: "live", queued: "wait",
    planned: "wait", blocked: "wait", ready: "wait", retry_waiting: "warn", delayed: "warn",
  };
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

  function svg(name, attributes) {
    const element = document.createElementNS(SVG_NS, name);
    for (const [key, value] of Object.entries(attributes || {})) {
      element.setAttribute(key, String(value));
    }
    return element;
  }

  function readGraph() {
    const block = document.getElementById("attempt-graph");
    return block ? JSON.parse(block.textContent) : null;
  }

  function label(task, collapsedCount) {
    const name = task.name.length > MAX_LABEL_CHARS ? task.name.slice(0, MAX_LABEL_CHARS - 1) + "…" : task.name;
    return collapsedCount ? `${name} ▸ ${collapsedCount}` : name;
  }

  // The task graph: tasks as boxes, groups as boxes holding their children (or one box
  // when collapsed), an arrow from each task to those that wait for it.
  class TaskGraph {
    constructor(container, data) {
      this.container = container;
      this.load(data);
      this.partial = new Map();
      this.collapsed = this.defaultCollapsed();
      this.elk = new ELK();
      this.drawing = 0;
    }

    // Ids become strings (the keys of maps and data-* attributes); a task without a full
    // name has its parent's followed by its own name (tasks come parents first).
    load(data) {
      for (const task of data.tasks) {
        task.id = String(task.id);
        if (task.parent !== undefined && task.parent !== null) task.parent = String(task.parent);
      }
      data.edges = data.edges.map(([upstream, downstream]) => [String(upstream), String(downstream)]);
      this.data = data;
      this.byId = new Map(data.tasks.map((task) => [task.id, task]));
      for (const task of data.tasks) {
        if (task.full_name === undefined) {
          const parent = this.byId.get(task.parent);
          task.full_name = parent ? parent.full_name + task.name : task.name;
        }
      }
      this.children = new Map();
      this.place = new Map();
      this.roots = [];
      for (const task of data.tasks) {
        if (task.parent && this.byId.has(task.parent)) {
          if (!this.children.has(task.parent)) this.children.set(task.parent, []);
          this.place.set(task.id, this.children.get(task.parent).length);
          this.children.get(task.parent).push(task);
        } else {
          this.roots.push(task);
        }
      }
    }

    kids(id) {
      return this.children.get(id) || [];
    }

    // Groups open breadth first while the tasks drawn stay within VISIBLE_BUDGET; the
    // rest start collapsed (a layout of thousands of boxes would take seconds).
    defaultCollapsed() {
      const collapsed = new Set();
      let visible = this.roots.length;
      const queue = [...this.roots];
      while (queue.length) {
        const task = queue.shift();
        const kids = this.kids(task.id);
        if (!kids.length) continue;
        if (visible + kids.length <= VISIBLE_BUDGET) {
          visible += kids.length;
          queue.push(...kids);
        } else if (this.roots.includes(task)) {
          const shown = Math.max(MIN_SHOWN, VISIBLE_BUDGET - visible);
          this.partial.set(task.id, shown);
          visible += shown + 1;
          queue.push(...kids.slice(0, shown));
        } else {
          collapsed.add(task.id);
        }
      }
      return collapsed;
    }

    // Each task's drawn stand-in: itself, its outermost collapsed ancestor, or the box
    // of the children a partly shown group leaves out.
    standIns() {
      const shown = new Map();
      for (const task of this.data.tasks) {
        const parent = task.parent && this.byId.has(task.parent) ? task.parent : null;
        if (parent === null) shown.set(task.id, task.id);
        else if (shown.get(parent) !== parent) shown.set(task.id, shown.get(parent));
        else if (this.collapsed.has(parent)) shown.set(task.id, parent);
        else if (this.place.get(task.id) >= (this.partial.get(parent) ?? Infinity)) shown.set(task.id, MORE + parent);
        else shown.set(task.id, task.id);
      }
      return shown;
    }

    ancestors(id) {
      if (id.startsWith(MORE)) {
        const group = id.slice(MORE.length);
        return [group, ...this.ancestors(group)];
      }
      const found = [];
      let task = this.byId.get(id);
      while (task && task.parent && this.byId.has(task.parent)) {
        found.push(task.parent);
        task = this.byId.get(task.parent);
      }
      return found;
    }

    elkGraph() {
      const shown = this.standIns();
      const thoroughness = new Set(shown.values()).size > LARGE_GRAPH ? "1" : "7";
      const layout = { ...LAYOUT, "elk.layered.thoroughness": thoroughness };
      const nodes = new Map();
      const build = (task) => {
        const kids = this.kids(task.id);
        const closed = kids.length > 0 && this.collapsed.has(task.id);
        const text = label(task, closed ? kids.length : 0);
        const node = { id: task.id, width: Math.max(60, text.length * CHAR_WIDTH + 20), height: NODE_HEIGHT, text };
        nodes.set(task.id, node);
        if (kids.length && !closed) {
          const shown = this.partial.get(task.id) ?? kids.length;
          node.layoutOptions = { ...layout, "elk.padding": GROUP_PADDING };
          node.children = kids.slice(0, shown).map(build);
          node.edges = [];
          if (shown < kids.length) {
            const more = `… ${kids.length - shown} more tasks`;
            node.children.push({ id: MORE + task.id, width: more.length * CHAR_WIDTH + 20, height: NODE_HEIGHT, text: more });
          }
        }
        return node;
      };
      const root = { id: "graph-root", layoutOptions: layout, children: this.roots.map(build), edges: [] };
      nodes.set(root.id, root);
      const seen = new Set();
      for (const [upstream, downstream] of this.data.edges) {
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
      const picture = svg("svg", {
        id: "task-graph", width: Math.ceil(laid.width), height: Math.ceil(laid.height),
        role: "group", "aria-label": `Task graph of ${this.data.tasks.length} tasks`,
      });
      const defs = svg("defs");
      const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" });
      marker.append(svg("path", { d: "M0,0 L10,5 L0,10 z" }));
      defs.append(marker);
      const nodeLayer = svg("g");
      const edgeLayer = svg("g");
      const walk = (node, x0, y0) => {
        for (const child of node.children || []) {
          const x = x0 + child.x;
          const y = y0 + child.y;
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
      picture.append(defs, nodeLayer, edgeLayer);
      const hint = document.createElement("p");
      hint.className = "hint";
      hint.textContent = "Open or close a group by clicking it; a task's box leads to its row in the tree.";
      this.container.replaceChildren(hint, picture);
      document.body.dataset.graphDrawn = "true";
    }

    // The box standing for the children a partly shown group leaves out: a click shows all.
    moreBox(node, x, y) {
      const group = svg("g", { class: "more", tabindex: 0, role: "button" });
      const text = svg("text", { x: x + 10, y: y + 18 });
      text.textContent = node.text;
      group.append(svg("rect", { x, y, width: node.width, height: node.height, rx: 4 }), text);
      const showAll = () => {
        this.partial.delete(node.id.slice(MORE.length));
        this.container.querySelector(".hint").textContent = "Laying out every task…";
        this.draw();
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

    // A task's box links to its row in the tree (the whole tree when the row is folded
    // away); a group's box is a button that opens or closes it.
    box(node, x, y) {
      if (node.id.startsWith(MORE)) return this.moreBox(node, x, y);
      const task = this.byId.get(node.id);
      const open = Boolean(node.children);
      const closed = !open && this.kids(task.id).length > 0;
      const group = svg("g", { class: this.nodeClass(task, open, closed), "data-task-id": task.id });
      const title = svg("title");
      title.textContent = `${task.full_name} (${task.state})`;
      const text = svg("text", { x: x + 10, y: y + 18 });
      text.textContent = node.text;
      const shape = svg("rect", { x, y, width: node.width, height: node.height, rx: 4 });
      if (!open && !closed) {
        const link = svg("a", { href: this.rowLink(task.id) });
        link.append(title, shape, text);
        group.append(link);
        return group;
      }
      group.append(title, shape, text);
      group.setAttribute("tabindex", "0");
      group.setAttribute("role", "button");
      group.setAttribute("aria-expanded", String(open));
      group.addEventListener("click", (event) => {
        event.stopPropagation();
        this.toggle(task.id);
      });
      group.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          this.toggle(task.id);
        }
      });
      return group;
    }

    rowLink(id) {
      if (document.getElementById(`task-${id}`)) return `#task-${id}`;
      const query = new URLSearchParams(window.location.search);
      query.set("tree", "all");
      return `?${query}#task-${id}`;
    }

    nodeClass(task, open, closed) {
      const kind = STATE_KINDS[task.state] || "muted";
      return `node s-${kind}${open ? " group" : ""}${closed ? " collapsed" : ""}`;
    }

    toggle(id) {
      if (this.collapsed.has(id)) this.collapsed.delete(id);
      else this.collapsed.add(id);
      this.draw();
    }

    // New states: recolour the boxes; new tasks (generated ones): draw again.
    update(data) {
      const sameTasks = data.tasks.length === this.data.tasks.length && data.tasks.every((task) => this.byId.has(task.id));
      this.load(data);
      if (!sameTasks) {
        this.draw();
        return;
      }
      for (const box of this.container.querySelectorAll("g.node")) {
        const task = this.byId.get(box.dataset.taskId);
        if (!task) continue;
        const open = box.classList.contains("group");
        const closed = box.classList.contains("collapsed");
        box.setAttribute("class", this.nodeClass(task, open, closed));
        box.querySelector("title").textContent = `${task.full_name} (${task.state})`;
      }
    }
  }

  function startGraph() {
    const container = document.getElementById("graph");
    const data = readGraph();
    if (!container || !data || typeof ELK === "undefined") return null;
    if (!data.tasks.length) {
      container.querySelector("p").textContent = "No tasks yet.";
    }
    const graph = new TaskGraph(container, data);
    graph.draw().catch((error) => {
      container.querySelector("p").textContent = `The graph could not be drawn: ${error}`;
    });
    return graph;
  }

  function pollPause() {
    const live = document.getElementById("attempt-live");
    const tasks = live ? Number(live.dataset.tasks) : 0;
    return tasks > LARGE_TREE ? LARGE_TREE_POLL_MS : POLL_MS;
  }

  // While the attempt runs, its live part is fetched again every POLL_MS and put in place.
  function pollLivePart(graph) {
    const tick = async () => {
      const current = document.getElementById("attempt-live");
      if (!current || current.dataset.done === "true") return;
      try {
        const response = await fetch(current.dataset.liveUrl, { cache: "no-store" });
        if (response.ok) {
          const parsed = new DOMParser().parseFromString(await response.text(), "text/html");
          const fresh = parsed.getElementById("attempt-live");
          if (fresh) {
            current.replaceWith(document.adoptNode(fresh));
            const data = readGraph();
            if (graph && data) graph.update(data);
          }
        }
      } catch (error) {
        // The server is away for a moment: try again at the next tick.
      }
      window.setTimeout(tick, pollPause());
    };
    window.setTimeout(tick, pollPause());
  }

  function logDetails(list, task) {
    for (const details of list.querySelectorAll("details.log")) {
      if (details.dataset.task === task) return details;
    }
    const details = document.createElement("details");
    details.className = "log";
    details.dataset.task = task;
    const summary = document.createElement("summary");
    const name = document.createElement("span");
    name.className = "task-name";
    name.textContent = task;
    summary.append(name);
    const text = document.createElement("pre");
    text.className = "log-text";
    text.tabIndex = 0;
    details.append(summary, text);
    list.querySelector(".no-logs")?.remove();
    list.append(details);
    return details;
  }

  // A running attempt's logs arrive by one event stream (from its start); an ended
  // attempt's log is fetched when its task's details are opened.
  function startLogs() {
    const list = document.getElementById("logs-list");
    if (!list) return;
    let source = null;
    if (list.dataset.followUrl && typeof EventSource !== "undefined") {
      source = new EventSource(list.dataset.followUrl);
      source.addEventListener("log", (event) => {
        const part = JSON.parse(event.data);
        const details = logDetails(list, part.task || part.file);
        const text = details.querySelector("pre.log-text");
        const atEnd = text.scrollTop + text.clientHeight >= text.scrollHeight - 4;
        text.append(document.createTextNode(part.text));
        details.dataset.loaded = "true";
        if (atEnd) text.scrollTop = text.scrollHeight;
      });
      for (const name of ["end", "timeout"]) source.addEventListener(name, () => source.close());
    }
    const streaming = () => source !== null && source.readyState !== EventSource.CLOSED;
    list.addEventListener("toggle", async (event) => {
      const details = event.target;
      const link = details.querySelector("a.log-link");
      if (!details.open || details.dataset.loaded || !link || streaming()) return;
      details.dataset.loaded = "true";
      const text = details.querySelector("pre.log-text");
      text.textContent = "Loading…";
      try {
        const response = await fetch(link.href, { cache: "no-store" });
        text.textContent = await response.text();
      } catch (error) {
        delete details.dataset.loaded;
        text.textContent = `The log could not be read: ${error}`;
      }
    }, true);
  }

  function start() {
    const graph = startGraph();
    pollLivePart(graph);
    startLogs();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
