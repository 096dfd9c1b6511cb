// The attempt page's log pane: one task's log beside the tree (its tail first, earlier
// ranges on demand), ANSI colours as classes, wrapping, search, download, following the
// log while the task runs; and the task's values as collapsible trees.
// Log text only ever reaches the page through textContent and text nodes.
"use strict";

(() => {
  const TAIL_BYTES = 64 * 1024;
  const EARLIER_BYTES = 256 * 1024;
  const ESCAPE = /\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?/g;

  // Reads ANSI escape sequences: SGR colours (30-37, 90-97, 39; 40-47, 49), bold (1, 22)
  // and reset (0) become classes; every other sequence is dropped. It keeps its state
  // between pieces of text, so a colour set in one event goes on in the next.
  class AnsiReader {
    constructor() {
      this.fg = null;
      this.bg = null;
      this.bold = false;
    }

    classes() {
      const names = [];
      if (this.fg) names.push(`ansi-fg-${this.fg}`);
      if (this.bg) names.push(`ansi-bg-${this.bg}`);
      if (this.bold) names.push("ansi-bold");
      return names.join(" ");
    }

    apply(parameters) {
      const codes = parameters === "" ? [0] : parameters.split(";").map((part) => Number(part || 0));
      for (const code of codes) {
        if (code === 0) {
          this.fg = null;
          this.bg = null;
          this.bold = false;
        } else if (code === 1) this.bold = true;
        else if (code === 22) this.bold = false;
        else if ((code >= 30 && code <= 37) || (code >= 90 && code <= 97)) this.fg = code;
        else if (code === 39) this.fg = null;
        else if (code >= 40 && code <= 47) this.bg = code;
        else if (code === 49) this.bg = null;
      }
    }

    // The pieces of ``text``: [{text, cls}], escape sequences taken out.
    read(text) {
      const pieces = [];
      let last = 0;
      for (const match of text.matchAll(ESCAPE)) {
        if (match.index > last) pieces.push({ text: text.slice(last, match.index), cls: this.classes() });
        const sequence = match[0];
        if (sequence.startsWith("\x1b[") && sequence.endsWith("m")) this.apply(sequence.slice(2, -1));
        last = match.index + sequence.length;
      }
      if (last < text.length) pieces.push({ text: text.slice(last), cls: this.classes() });
      return pieces;
    }
  }

  // The first byte of ``bytes`` that starts a UTF-8 character (a range read from the
  // middle of a log may begin inside one).
  function characterStart(bytes) {
    let index = 0;
    while (index < bytes.length && index < 4 && (bytes[index] & 0xc0) === 0x80) index += 1;
    return index;
  }

  // A JSON value as a tree: objects and lists as nested lists, each member under a
  // <details> when it holds more; leaves as text.
  function valueTree(value, depth = 0) {
    if (value === null || typeof value !== "object") {
      const leaf = document.createElement("code");
      leaf.className = `value value-${value === null ? "null" : typeof value}`;
      leaf.textContent = typeof value === "string" ? value : JSON.stringify(value);
      return leaf;
    }
    const entries = Array.isArray(value) ? value.map((item, index) => [String(index), item]) : Object.entries(value);
    const list = document.createElement("ul");
    list.className = "value-list";
    if (!entries.length) {
      const empty = document.createElement("li");
      empty.className = "muted";
      empty.textContent = Array.isArray(value) ? "[] (empty)" : "{} (empty)";
      list.append(empty);
    }
    for (const [key, item] of entries) {
      const row = document.createElement("li");
      const name = document.createElement("span");
      name.className = "value-key";
      name.textContent = key;
      if (item !== null && typeof item === "object") {
        const details = document.createElement("details");
        details.open = depth < 2;
        const summary = document.createElement("summary");
        const size = document.createElement("span");
        size.className = "muted";
        size.textContent = Array.isArray(item) ? ` [${item.length}]` : ` {${Object.keys(item).length}}`;
        summary.append(name, size);
        details.append(summary, valueTree(item, depth + 1));
        row.append(details);
      } else {
        row.append(name, document.createTextNode(": "), valueTree(item, depth + 1));
      }
      list.append(row);
    }
    return list;
  }

  function fillValues(container, value, emptyText) {
    if (!container) return;
    if (!value || (typeof value === "object" && !Object.keys(value).length)) {
      const none = document.createElement("p");
      none.className = "muted";
      none.textContent = emptyText;
      container.replaceChildren(none);
      return;
    }
    container.replaceChildren(valueTree(value));
  }

  function latestRun(logs) {
    let latest = null;
    for (const log of logs) {
      if (!latest || log.run > latest.run || (log.run === latest.run && Number(log.id) > Number(latest.id))) latest = log;
    }
    return latest;
  }

  // The pane: one task at a time.
  class LogPane {
    constructor(element) {
      this.element = element;
      this.attempt = element.dataset.attempt;
      this.view = element.querySelector(".log-view");
      this.note = element.querySelector(".log-note");
      this.earlier = element.querySelector(".log-earlier");
      this.search = element.querySelector(".log-search");
      this.matchesText = element.querySelector(".log-matches");
      this.download = element.querySelector(".log-download");
      this.pieces = [];
      this.matches = [];
      this.current = -1;
      this.source = null;
      this.ticket = 0;
      this.taskId = null;
      this.onOpen = null;
      element.querySelector(".pane-close").addEventListener("click", () => this.close());
      element.querySelector(".log-wrap").addEventListener("change", (event) => {
        this.view.classList.toggle("wrap", event.target.checked);
      });
      this.search.addEventListener("input", () => this.find(0));
      this.search.addEventListener("keydown", (event) => {
        if (event.key === "Enter") {
          event.preventDefault();
          this.step(event.shiftKey ? -1 : 1);
        }
      });
      element.querySelector(".log-next").addEventListener("click", () => this.step(1));
      element.querySelector(".log-prev").addEventListener("click", () => this.step(-1));
      this.earlier.addEventListener("click", () => this.loadEarlier());
    }

    close() {
      this.stopFollowing();
      this.element.hidden = true;
      this.taskId = null;
      document.body.classList.remove("pane-open");
      if (this.onOpen) this.onOpen(null);
    }

    stopFollowing() {
      if (this.source) this.source.close();
      this.source = null;
    }

    // ``hint``: the id and size of the task's latest log when the page knows them, so
    // its tail is fetched at once, beside the task's JSON.
    async open(taskId, hint) {
      const ticket = ++this.ticket;
      this.early = hint && hint.size > 0 ? { ...hint, response: this.fetchTail(hint.id, hint.size) } : null;
      this.stopFollowing();
      this.taskId = String(taskId);
      this.element.hidden = false;
      document.body.classList.add("pane-open");
      this.element.dataset.taskId = this.taskId;
      delete this.element.dataset.loaded;
      this.view.replaceChildren();
      this.pieces = [];
      this.note.textContent = "Loading…";
      performance.mark("tickwork:log-open");
      if (this.onOpen) this.onOpen(this.taskId);
      let task;
      try {
        const response = await fetch(`/ui/attempts/${this.attempt}/tasks/${this.taskId}`, { cache: "no-store" });
        if (!response.ok) throw new Error(`${response.status} ${await response.text()}`);
        task = await response.json();
      } catch (error) {
        if (ticket === this.ticket) this.note.textContent = `The task could not be read: ${error.message}`;
        return;
      }
      if (ticket !== this.ticket) return;
      this.showTask(task);
      await this.loadTail(task, ticket);
    }

    // The open task's state as the attempt's live part last gave it (``started``: Unix
    // seconds), so that the pane's badge and running time follow the tree's.
    setState(state, started) {
      const badge = this.element.querySelector(".pane-state");
      if (!this.task || badge.textContent === state) return;
      badge.className = `pane-state state state-${state}`;
      badge.textContent = state;
      const running = this.element.querySelector(".pane-running");
      running.dataset.since = state === "running" && started ? String(started) : "";
      running.classList.toggle("running-for", Boolean(running.dataset.since));
      if (!running.dataset.since) running.textContent = "";
    }

    showTask(task) {
      this.task = task;
      this.element.querySelector(".pane-task").textContent = task.full_name;
      const state = this.element.querySelector(".pane-state");
      state.className = `pane-state state state-${task.state}`;
      state.textContent = task.state;
      const running = this.element.querySelector(".pane-running");
      running.dataset.since = task.state === "running" && task.started_at ? String(Date.parse(task.started_at) / 1000) : "";
      running.classList.toggle("running-for", Boolean(running.dataset.since));
      running.textContent = "";
      for (const input of this.element.querySelectorAll(".pane-retry-from input[name=from]")) input.value = task.full_name;
      fillValues(this.element.querySelector(".pane-stored"), task.stored, "It stored no values.");
      fillValues(this.element.querySelector(".pane-exported"), task.exported, "It exports nothing.");
      fillValues(this.element.querySelector(".pane-params"), task.params, "No params.");
    }

    async loadTail(task, ticket) {
      this.log = latestRun(task.logs);
      this.reader = new AnsiReader();
      this.earlier.hidden = true;
      if (!this.log) {
        this.download.hidden = true;
        this.note.textContent = task.is_group ? "A group writes no log of its own: open one of its tasks." : "No log yet.";
        this.element.dataset.loaded = "true";
        this.follow(task);
        return;
      }
      this.download.hidden = false;
      this.download.href = `/ui/attempts/${this.attempt}/logs/${this.log.id}?download=true`;
      this.runLabel = task.logs.length > 1 ? `Run ${this.log.run} of ${task.logs.length}` : "";
      let start = 0;
      let size = this.log.size_bytes;
      if (this.log.pruned_at) {
        this.note.textContent = this.runNote("the log retention removed this log.");
        this.element.dataset.loaded = "true";
        return;
      }
      if (size > 0) {
        const early = this.early && this.early.id === this.log.id && this.early.size === size;
        const response = await (early ? this.early.response : this.fetchTail(this.log.id, size));
        this.early = null;
        if (ticket !== this.ticket) return;
        if (!response.ok) {
          this.note.textContent = `The log could not be read: ${response.status}`;
          return;
        }
        const bytes = new Uint8Array(await response.arrayBuffer());
        if (ticket !== this.ticket) return;
        const range = /bytes (\d+)-(\d+)\/(\d+)/.exec(response.headers.get("Content-Range") || "");
        start = range ? Number(range[1]) : 0;
        size = range ? Math.max(size, Number(range[3])) : bytes.length;
        const skip = start > 0 ? characterStart(bytes) : 0;
        this.append(new TextDecoder().decode(bytes.subarray(skip)));
        start += skip;
      }
      this.loadedFrom = start;
      this.earlier.hidden = start === 0;
      this.note.textContent = this.runNote(start > 0 ? `the last ${window.TickworkDisplay.size(size - start)} of ${window.TickworkDisplay.size(size)}.` : "");
      this.view.scrollTop = this.view.scrollHeight;
      this.element.dataset.loaded = "true";
      // When the log is on screen: what bench/ui.py measures.
      performance.mark("tickwork:log-shown");
      this.follow(task);
    }

    // The note above the log: which run it is (when the task ran more than once) and
    // ``text`` (how much of it is shown), as one sentence.
    runNote(text) {
      if (!this.runLabel) return text ? text[0].toUpperCase() + text.slice(1) : "";
      return text ? `${this.runLabel}: ${text}` : `${this.runLabel}.`;
    }

    // The last TAIL_BYTES of a log up to ``size`` (the size the task's JSON gave: the
    // stream follows on from there).
    fetchTail(id, size) {
      return fetch(`/ui/attempts/${this.attempt}/logs/${id}`, {
        cache: "no-store", headers: { Range: `bytes=${Math.max(0, size - TAIL_BYTES)}-${size - 1}` },
      });
    }

    async loadEarlier() {
      if (!this.log || !this.loadedFrom) return;
      const ticket = this.ticket;
      const end = this.loadedFrom;
      const first = Math.max(0, end - EARLIER_BYTES);
      this.earlier.disabled = true;
      try {
        const response = await fetch(`/ui/attempts/${this.attempt}/logs/${this.log.id}`, {
          cache: "no-store", headers: { Range: `bytes=${first}-${end - 1}` },
        });
        if (ticket !== this.ticket || !response.ok) return;
        const bytes = new Uint8Array(await response.arrayBuffer());
        if (ticket !== this.ticket) return;
        const skip = first > 0 ? characterStart(bytes) : 0;
        const pieces = new AnsiReader().read(new TextDecoder().decode(bytes.subarray(skip)));
        const height = this.view.scrollHeight;
        this.pieces = pieces.concat(this.pieces);
        this.loadedFrom = first + skip;
        this.render();
        this.view.scrollTop += this.view.scrollHeight - height;
        this.earlier.hidden = this.loadedFrom === 0;
        const size = this.log.size_bytes;
        this.note.textContent = this.runNote(this.loadedFrom > 0 ? `the last ${window.TickworkDisplay.size(size - this.loadedFrom)} of ${window.TickworkDisplay.size(size)}.` : "");
      } finally {
        this.earlier.disabled = false;
      }
    }

    // While the attempt runs, its event stream (from where the logs stand now) brings
    // new text; the text of this task's runs is added.
    follow(task) {
      const live = document.getElementById("attempt-live");
      if (!live || live.dataset.done === "true" || typeof EventSource === "undefined") return;
      const offset = task.stream_offset ?? 0;
      const source = new EventSource(`${this.element.dataset.followUrl}?offset=${offset}`);
      this.source = source;
      source.addEventListener("log", (event) => {
        const part = JSON.parse(event.data);
        if (part.task !== task.full_name) return;
        if (!this.log) this.note.textContent = "";  // its first run has begun
        const atEnd = this.view.scrollTop + this.view.clientHeight >= this.view.scrollHeight - 4;
        this.append(part.text);
        if (atEnd) this.view.scrollTop = this.view.scrollHeight;
      });
      for (const name of ["end", "timeout"]) source.addEventListener(name, () => source.close());
    }

    append(text) {
      const pieces = this.reader.read(text);
      this.pieces.push(...pieces);
      if (this.search.value) {
        this.render();
        this.find(this.current);
      } else {
        this.view.append(...pieces.map(pieceNode));
      }
    }

    // The log's pieces as nodes, with the search's matches marked.
    render() {
      const query = this.search.value.toLowerCase();
      if (!query) {
        this.matches = [];
        this.view.replaceChildren(...this.pieces.map(pieceNode));
        return;
      }
      const text = this.pieces.map((piece) => piece.text).join("");
      const lower = text.toLowerCase();
      const ranges = [];
      for (let at = lower.indexOf(query); at !== -1 && ranges.length < 10000; at = lower.indexOf(query, at + query.length)) {
        ranges.push([at, at + query.length]);
      }
      const nodes = [];
      const marks = [];
      let offset = 0;
      let next = 0;
      for (const piece of this.pieces) {
        const end = offset + piece.text.length;
        let at = offset;
        while (at < end) {
          while (next < ranges.length && ranges[next][1] <= at) next += 1;
          const range = ranges[next];
          if (!range || range[0] >= end) {
            nodes.push(pieceNode({ text: text.slice(at, end), cls: piece.cls }));
            at = end;
          } else if (range[0] > at) {
            nodes.push(pieceNode({ text: text.slice(at, range[0]), cls: piece.cls }));
            at = range[0];
          } else {
            const stop = Math.min(range[1], end);
            const mark = document.createElement("mark");
            mark.dataset.match = String(next);
            mark.append(pieceNode({ text: text.slice(at, stop), cls: piece.cls }));
            nodes.push(mark);
            if (!marks[next]) marks[next] = mark;
            at = stop;
          }
        }
        offset = end;
      }
      this.view.replaceChildren(...nodes);
      this.matches = marks;
    }

    find(index) {
      this.render();
      this.current = this.matches.length ? Math.min(Math.max(index, 0), this.matches.length - 1) : -1;
      this.show();
    }

    step(direction) {
      if (!this.matches.length) return;
      this.current = (this.current + direction + this.matches.length) % this.matches.length;
      this.show();
    }

    show() {
      for (const mark of this.view.querySelectorAll("mark.current")) mark.classList.remove("current");
      if (this.current < 0) {
        this.matchesText.textContent = this.search.value ? "no match" : "";
        return;
      }
      for (const mark of this.view.querySelectorAll(`mark[data-match="${this.current}"]`)) mark.classList.add("current");
      this.matchesText.textContent = `${this.current + 1} of ${this.matches.length}`;
      const mark = this.matches[this.current];
      this.view.scrollTop = mark.offsetTop - this.view.offsetTop - this.view.clientHeight / 2;
    }
  }

  function pieceNode(piece) {
    if (!piece.cls) return document.createTextNode(piece.text);
    const span = document.createElement("span");
    span.className = piece.cls;
    span.textContent = piece.text;
    return span;
  }

  window.TickworkLog = { AnsiReader, LogPane, valueTree, fillValues, pieceNode };
})();
