// The attempt page: renders the task tree from the page's task list (filters by state
// and name, folding groups, jumping to the first failure), draws the task graph
// (attempt_graph.js; groups fold together with the tree), refreshes both while the
// attempt runs, and opens a task's log in the pane beside the tree (attempt_log.js).
// State colours come from /ui/states.css (--state-NAME).
// Data is only ever put in the page as text (textContent, text nodes, attributes).
"use strict";

(() => {
  const POLL_MS = 2000;
  // An attempt of more tasks than this is refreshed less often: its data is large.
  const LARGE_TREE = 500;
  const LARGE_TREE_POLL_MS = 5000;
  // At most about this many tasks are drawn at first: larger groups start collapsed, and
  // a top group with more children shows its first ones and a box for the rest.
  const VISIBLE_BUDGET = 100;
  const MIN_SHOWN = 20;
  // Tasks in these states are shown at first wherever they are (their groups open).
  const NOTABLE = new Set(["error", "running", "retry_waiting"]);
  const MAX_NOTABLE = 100;
  // Rows the tree renders at a time; a button renders more.
  const ROW_PAGE = 400;
  // Longest the graph waits for the first log to be shown before it is laid out.
  const GRAPH_WAIT_MS = 2000;

  function element(name, className, text) {
    const made = document.createElement(name);
    if (className) made.className = className;
    if (text !== undefined) made.textContent = text;
    return made;
  }

  function readGraph() {
    const block = document.getElementById("attempt-graph");
    return block ? JSON.parse(block.textContent) : null;
  }

  const { TaskGraph, svg, stateColour, ZOOM_STEP } = window.TickworkGraph;

  // Durations and times as the server writes them (static/display.js).
  const durationText = window.TickworkDisplay.duration;
  const timeText = (seconds, zone) => window.TickworkDisplay.time(new Date(seconds * 1000), zone);

  // -- the tasks, shared by the tree and the graph ---------------------------------------

  // The attempt's tasks: ids as strings (the keys of maps and data-* attributes), each
  // task's full name (its parent's followed by its name where the data leaves it out),
  // its children, depth and place; and which groups are folded, for tree and graph alike.
  class Tasks {
    constructor(data) {
      this.collapsed = new Set();
      this.partial = new Map();
      this.load(data);
      this.foldAtFirst();
    }

    load(data) {
      for (const task of data.tasks) {
        task.id = String(task.id);
        if (task.parent !== undefined && task.parent !== null) task.parent = String(task.parent);
      }
      data.edges = data.edges.map(([upstream, downstream]) => [String(upstream), String(downstream)]);
      this.data = data;
      this.list = data.tasks;
      this.byId = new Map(data.tasks.map((task) => [task.id, task]));
      this.children = new Map();
      this.place = new Map();
      this.depth = new Map();
      this.roots = [];
      for (const task of data.tasks) {
        const parent = task.parent && this.byId.get(task.parent);
        if (task.full_name === undefined) task.full_name = parent ? parent.full_name + task.name : task.name;
        task.lower = task.full_name.toLowerCase();
        if (parent) {
          if (!this.children.has(task.parent)) this.children.set(task.parent, []);
          this.place.set(task.id, this.children.get(task.parent).length);
          this.children.get(task.parent).push(task);
          this.depth.set(task.id, this.depth.get(task.parent) + 1);
        } else {
          this.roots.push(task);
          this.depth.set(task.id, 0);
        }
      }
    }

    kids(id) {
      return this.children.get(id) || [];
    }

    ancestors(id) {
      const found = [];
      let task = this.byId.get(id);
      while (task && task.parent && this.byId.has(task.parent)) {
        found.push(task.parent);
        task = this.byId.get(task.parent);
      }
      return found;
    }

    // Groups open breadth first while the tasks shown stay within VISIBLE_BUDGET (a
    // layout of thousands of boxes would take seconds); the groups of failed and running
    // tasks open too.
    foldAtFirst() {
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
          this.collapsed.add(task.id);
        }
      }
      let notable = 0;
      for (const task of this.list) {
        if (notable >= MAX_NOTABLE) break;
        if (!NOTABLE.has(task.state) || task.group) continue;
        notable += 1;
        for (const id of this.ancestors(task.id)) this.collapsed.delete(id);
      }
    }

    // The tasks that failed themselves (not only because a child did), in tree order.
    failures() {
      const failedParents = new Set(this.list.filter((t) => (t.own || t.state) === "error").map((t) => t.parent));
      return this.list.filter((t) => (t.own || t.state) === "error" && !failedParents.has(t.id));
    }

    toggle(id, open) {
      const close = open === undefined ? !this.collapsed.has(id) : !open;
      if (close) this.collapsed.add(id);
      else {
        this.collapsed.delete(id);
        this.partial.delete(id);
      }
    }

    // Open the groups of a task; whether any was folded.
    reveal(id) {
      let changed = false;
      for (const ancestor of this.ancestors(id)) {
        changed = this.collapsed.delete(ancestor) || changed;
        changed = this.partial.delete(ancestor) || changed;
      }
      return changed;
    }
  }

  // -- the tree ------------------------------------------------------------------------

  // The tree's rows, rendered from the task list: those the folding shows, or with a
  // filter every task that matches and its groups; ROW_PAGE at a time.
  class TaskTree {
    constructor(tasks, onChange, onOpen) {
      this.tasks = tasks;
      this.onChange = onChange;
      this.onOpen = onOpen;
      this.name = "";
      this.state = "";
      this.limit = ROW_PAGE;
      this.selected = null;
    }

    filtering() {
      return Boolean(this.name || this.state);
    }

    matches(task) {
      return (!this.name || task.lower.includes(this.name)) && (!this.state || task.state === this.state);
    }

    rowsToShow() {
      const tasks = this.tasks;
      if (this.filtering()) {
        const keep = new Set();
        let matched = 0;
        for (const task of tasks.list) {
          if (!this.matches(task)) continue;
          matched += 1;
          keep.add(task.id);
          for (const id of tasks.ancestors(task.id)) keep.add(id);
        }
        this.matched = matched;
        return tasks.list.filter((task) => keep.has(task.id));
      }
      this.matched = null;
      const shown = [];
      const hidden = new Set();
      for (const task of tasks.list) {
        if (task.parent && (hidden.has(task.parent) || tasks.collapsed.has(task.parent))) {
          hidden.add(task.id);
          continue;
        }
        shown.push(task);
      }
      return shown;
    }

    render() {
      const table = document.getElementById("task-tree");
      if (!table) return;
      const live = document.getElementById("attempt-live");
      this.attempt = document.getElementById("log-pane")?.dataset.attempt;
      this.zone = live?.dataset.zone || "UTC";
      const rows = this.rowsToShow();
      this.span = this.timeSpan();
      const body = document.createElement("tbody");
      const fragment = document.createDocumentFragment();
      for (const task of rows.slice(0, this.limit)) fragment.append(this.row(task));
      if (rows.length > this.limit) fragment.append(this.moreRow(rows.length - this.limit));
      body.append(fragment);
      table.tBodies[0].replaceWith(body);
      table.dataset.rendered = "true";
      this.rows = rows;
      const count = document.getElementById("filter-count");
      if (count) {
        const total = this.tasks.list.length;
        count.textContent = this.matched === null ? `${rows.length} of ${total} tasks shown` : `${this.matched} of ${total} tasks match`;
      }
      document.querySelector(".folded-note")?.setAttribute("hidden", "");
      tickRunning();
    }

    timeSpan() {
      let first = Infinity;
      let last = -Infinity;
      const now = Date.now() / 1000;
      for (const task of this.tasks.list) {
        if (task.started === undefined) continue;
        first = Math.min(first, task.started);
        last = Math.max(last, task.finished ?? now);
      }
      return first === Infinity ? null : [first, Math.max(1, last - first)];
    }

    row(task) {
      const tasks = this.tasks;
      const row = element("tr");
      row.id = `task-${task.id}`;
      row.dataset.taskId = task.id;
      row.dataset.state = task.state;
      if (this.selected === task.id) row.classList.add("selected");
      const name = element("td", "name");
      name.append(element("span", "indent", "\u2003".repeat(tasks.depth.get(task.id) || 0)));
      if (tasks.kids(task.id).length) {
        const open = this.filtering() || !tasks.collapsed.has(task.id);
        const fold = element("button", "fold", open ? "▾" : "▸");
        fold.type = "button";
        fold.dataset.group = task.id;
        fold.setAttribute("aria-expanded", String(open));
        fold.setAttribute("aria-label", `${open ? "Collapse" : "Expand"} ${task.full_name}`);
        fold.disabled = this.filtering();
        name.append(fold);
      }
      const link = element("a", "open-log", task.name);
      link.href = `/ui/attempts/${this.attempt}/tasks/${task.id}/log`;
      link.title = task.full_name;
      link.dataset.taskId = task.id;
      name.append(link);
      if (task.group) name.append(" ", element("span", "muted", `group (${tasks.kids(task.id).length})`));
      const state = element("td");
      state.append(element("span", `state state-${task.state}`, task.state));
      if (task.pool) state.append(" ", element("span", "muted waiting-pool", `waiting for pool ${task.pool}`));
      const retries = element("td", "", task.retries ? String(task.retries) : "");
      const started = element("td", "when");
      if (task.started !== undefined) {
        const time = element("time", "", timeText(task.started, this.zone));
        time.setAttribute("datetime", new Date(task.started * 1000).toISOString().replace(".000Z", "Z"));
        time.dataset.zone = this.zone;
        started.append(time);
      } else started.textContent = "-";
      const duration = element("td");
      if ((task.own || task.state) === "running" && task.started !== undefined) {
        const running = element("span", "running-for");
        running.dataset.since = String(task.started);
        duration.append(running);
      } else {
        duration.textContent = durationText(task.finished !== undefined && task.started !== undefined ? task.finished - task.started : null);
      }
      const timeline = element("td", "timeline");
      if (this.span && task.started !== undefined) timeline.append(this.bar(task));
      const error = element("td", "error");
      if (task.error) error.append(element("pre", "message", task.error));
      row.append(name, state, retries, started, duration, timeline, error);
      return row;
    }

    bar(task) {
      const [first, seconds] = this.span;
      const start = task.started - first;
      const end = (task.finished ?? Date.now() / 1000) - first;
      const left = Math.round((10000 * start) / seconds) / 100;
      const width = Math.max(0.3, Math.min((100 * (end - start)) / seconds, 100 - left));
      const picture = svg("svg", { class: "bar", width: "100%", height: 12, role: "img", "aria-label": `ran ${durationText(end - start)}` });
      picture.append(svg("rect", { class: `run st-${task.state}`, x: `${left}%`, width: `${width}%`, y: 1, height: 10, rx: 2, fill: stateColour(task.own || task.state) }));
      return picture;
    }

    moreRow(left) {
      const row = element("tr", "more-rows");
      const cell = element("td");
      cell.colSpan = 7;
      const button = element("button", "", `Show ${Math.min(left, ROW_PAGE)} more rows (${left} not shown)`);
      button.type = "button";
      button.addEventListener("click", () => {
        this.limit += ROW_PAGE;
        this.render();
      });
      cell.append(button);
      row.append(cell);
      return row;
    }

    // Show a task's row (opening its groups, clearing a filter that hides it), scrolled
    // into view.
    show(id) {
      const task = this.tasks.byId.get(id);
      if (!task) return;
      if (this.filtering() && !this.matches(task)) this.clearFilters();
      const opened = this.tasks.reveal(id);
      this.selected = id;
      this.render();
      const index = this.rows.findIndex((t) => t.id === id);
      if (index >= this.limit) {
        this.limit = index + ROW_PAGE;
        this.render();
      }
      if (opened) this.onChange();  // the graph is laid out again only for a change
      const row = document.getElementById(`task-${id}`);
      if (row) row.scrollIntoView({ block: "center" });
    }

    clearFilters() {
      this.name = "";
      this.state = "";
      const name = document.getElementById("task-filter");
      const state = document.getElementById("state-filter");
      if (name) name.value = "";
      if (state) state.value = "";
    }

    select(id) {
      this.selected = id;
      for (const row of document.querySelectorAll("#task-tree tr.selected")) row.classList.remove("selected");
      if (id) document.getElementById(`task-${id}`)?.classList.add("selected");
    }
  }

  // -- the page ------------------------------------------------------------------------

  function tickRunning() {
    const now = Date.now() / 1000;
    for (const span of document.querySelectorAll(".running-for[data-since]")) {
      if (!span.dataset.since) continue;
      span.textContent = `running for ${durationText(now - Number(span.dataset.since))}`;
    }
  }

  // elkjs is large: it is fetched and compiled only when the graph is drawn.
  function loadScript(source) {
    return new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = source;
      script.addEventListener("load", resolve);
      script.addEventListener("error", reject);
      document.head.append(script);
    });
  }

  // The log lines under "Why it failed", with their ANSI colours (attempt_log.js).
  function colourTails() {
    if (!window.TickworkLog) return;
    for (const tail of document.querySelectorAll("section.failures pre.tail:not([data-coloured])")) {
      const pieces = new window.TickworkLog.AnsiReader().read(tail.textContent);
      tail.replaceChildren(...pieces.map(window.TickworkLog.pieceNode));
      tail.dataset.coloured = "true";
    }
  }

  function pollPause() {
    const live = document.getElementById("attempt-live");
    const count = live ? Number(live.dataset.tasks) : 0;
    return count > LARGE_TREE ? LARGE_TREE_POLL_MS : POLL_MS;
  }

  function stateOptions(tasksList) {
    const select = document.getElementById("state-filter");
    if (!select) return;
    const counts = new Map();
    for (const task of tasksList) counts.set(task.state, (counts.get(task.state) || 0) + 1);
    const chosen = select.value;
    const options = [element("option", "", "any")];
    options[0].value = "";
    for (const [state, count] of [...counts.entries()].sort()) {
      const option = element("option", "", `${state} (${count})`);
      option.value = state;
      options.push(option);
    }
    select.replaceChildren(...options);
    select.value = counts.has(chosen) ? chosen : "";
  }

  function start() {
    const data = readGraph();
    if (!data) return;
    const model = new Tasks(data);
    const paneElement = document.getElementById("log-pane");
    const pane = paneElement && window.TickworkLog ? new window.TickworkLog.LogPane(paneElement) : null;
    let graph = null;
    const open = (id) => {
      tree.select(String(id));
      if (pane) pane.open(id);
    };
    const redraw = () => {
      tree.render();
      if (graph) graph.draw();
    };
    const tree = new TaskTree(model, () => graph && graph.draw(), open);
    if (pane) pane.onOpen = (id) => tree.select(id);

    const tools = document.getElementById("tree-tools");
    if (tools) {
      tools.hidden = false;
      stateOptions(model.list);
      const name = document.getElementById("task-filter");
      name.addEventListener("input", () => {
        tree.name = name.value.trim().toLowerCase();
        tree.limit = ROW_PAGE;
        tree.render();
      });
      const state = document.getElementById("state-filter");
      state.addEventListener("change", () => {
        tree.state = state.value;
        tree.limit = ROW_PAGE;
        tree.render();
      });
      document.getElementById("jump-failure").addEventListener("click", () => {
        const first = model.failures()[0];
        if (!first) return;
        tree.show(first.id);
        open(first.id);
      });
      document.getElementById("jump-failure").disabled = !model.failures().length;
      document.getElementById("expand-all").addEventListener("click", () => {
        model.collapsed.clear();
        model.partial.clear();
        redraw();
      });
      document.getElementById("collapse-all").addEventListener("click", () => {
        for (const task of model.list) if (model.kids(task.id).length) model.collapsed.add(task.id);
        redraw();
      });
    }
    // One listener for the rows: a name opens the task's log; the arrow folds a group.
    document.addEventListener("click", (event) => {
      const fold = event.target.closest("#task-tree button.fold");
      if (fold) {
        model.toggle(fold.dataset.group);
        redraw();
        return;
      }
      const link = event.target.closest("#task-tree a.open-log, section.failures a.task-name[data-task-id]");
      if (link && pane && !(event.ctrlKey || event.metaKey || event.shiftKey)) {
        event.preventDefault();
        const id = link.dataset.taskId || link.closest("tr")?.dataset.taskId;
        if (id) {
          if (link.matches("section.failures a")) tree.show(id);
          open(id);
        }
      }
    });
    tree.render();
    performance.mark("tickwork:tree-shown");
    colourTails();

    const params = document.querySelector("[data-values-from]");
    if (params && window.TickworkLog) {
      const source = document.getElementById(params.dataset.valuesFrom);
      params.replaceChildren(window.TickworkLog.valueTree(JSON.parse(source.textContent)));
      params.parentElement.querySelector("table.params")?.setAttribute("hidden", "");
    }

    // The graph's layout holds the page's only thread for a moment (a second for the
    // largest): it starts once the failed task's log is on screen, or at once.
    const drawGraph = async () => {
      const container = document.getElementById("graph");
      if (container && typeof ELK === "undefined" && container.dataset.elkSrc) {
        await loadScript(container.dataset.elkSrc).catch(() => null);
      }
      if (container && typeof ELK !== "undefined") {
        if (!model.list.length) container.querySelector("p").textContent = "No tasks yet.";
        graph = new TaskGraph(container, model, redraw, (id) => {
          tree.show(id);
          open(id);
        });
        graph.draw().catch((error) => {
          container.replaceChildren(element("p", "muted", `The graph could not be drawn: ${error}`));
        });
        const graphTools = document.getElementById("graph-tools");
        if (graphTools) {
          graphTools.hidden = false;
          graphTools.addEventListener("click", (event) => {
            const button = event.target.closest("button[data-zoom]");
            if (!button || !graph.view) return;
            if (button.dataset.zoom === "in") graph.zoom(ZOOM_STEP);
            else if (button.dataset.zoom === "out") graph.zoom(1 / ZOOM_STEP);
            else graph.fit();
          });
        }
      }
    };
    if (pane && paneElement.dataset.openTask) {
      tree.select(paneElement.dataset.openTask);
      const { openLog, openSize } = paneElement.dataset;
      const hint = openLog ? { id: openLog, size: Number(openSize) } : null;
      const opened = pane.open(paneElement.dataset.openTask, hint);
      const later = new Promise((resolve) => window.setTimeout(resolve, GRAPH_WAIT_MS));
      Promise.race([opened, later]).then(drawGraph, drawGraph);
    } else drawGraph();
    document.body.dataset.attemptReady = "true";
    pollLivePart(model, tree, () => graph, pane);
    window.setInterval(tickRunning, 1000);
  }

  // While the attempt runs, its live part is fetched again and put in place; the tree
  // is rendered again from its fresh task list, keeping the filters and folding.
  function pollLivePart(model, tree, graphOf, pane) {
    const tick = async () => {
      const current = document.getElementById("attempt-live");
      if (!current || current.dataset.done === "true") return;
      try {
        const response = await fetch(current.dataset.liveUrl, { cache: "no-store" });
        if (response.ok) {
          const parsed = new DOMParser().parseFromString(await response.text(), "text/html");
          const fresh = parsed.getElementById("attempt-live");
          if (fresh) {
            const known = model.list.length;
            current.replaceWith(document.adoptNode(fresh));
            model.load(readGraph());
            colourTails();
            stateOptions(model.list);
            tree.render();
            const shown = pane && pane.taskId ? model.byId.get(pane.taskId) : null;
            if (shown) pane.setState(shown.state, shown.started);
            const graph = graphOf();
            if (graph) {
              if (model.list.length !== known) graph.draw();
              else graph.recolour();
            }
          }
        }
      } catch (error) {
        // The server is away for a moment: try again at the next tick.
      }
      window.setTimeout(tick, pollPause());
    };
    window.setTimeout(tick, pollPause());
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
