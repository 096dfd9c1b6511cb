// Enhancements of tickwork's pages; every page works without this script.
"use strict";

// A form marked data-confirm asks before it is sent (actions that cannot be undone).
document.addEventListener("submit", (event) => {
  const form = event.target;
  if (form instanceof HTMLFormElement && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
    event.preventDefault();
  }
});

// Times: every <time datetime="UTC"> shows in the zone the viewer chose in the header's
// switch (remembered in localStorage): the workflow's (as the server wrote it, the
// element's data-zone), UTC, or the browser's own.
(() => {
  const KEY = "tickwork.zone";
  const CHOICES = ["workflow", "utc", "local"];

  function chosen() {
    try {
      const value = window.localStorage.getItem(KEY);
      return CHOICES.includes(value) ? value : "workflow";
    } catch (error) {
      return "workflow";
    }
  }

  function remember(value) {
    try {
      window.localStorage.setItem(KEY, value);
    } catch (error) {
      // Storage is off (a private window's policy): the choice lasts for this page only.
    }
  }

  function apply(root) {
    const choice = chosen();
    const local = Intl.DateTimeFormat().resolvedOptions().timeZone;
    for (const element of root.querySelectorAll("time[datetime]")) {
      if (!("shown" in element.dataset)) element.dataset.shown = element.textContent;
      const instant = new Date(element.getAttribute("datetime"));
      if (choice === "workflow" || Number.isNaN(instant.getTime())) {
        element.textContent = element.dataset.shown;
      } else {
        element.textContent = window.TickworkDisplay.time(instant, choice === "utc" ? "UTC" : local);
      }
    }
    document.documentElement.dataset.zone = choice;
  }

  function setUpSwitch() {
    const select = document.getElementById("zone-switch");
    if (!select) return;
    const local = Intl.DateTimeFormat().resolvedOptions().timeZone;
    const option = select.querySelector('option[value="local"]');
    if (option) option.textContent = `Browser (${local})`;
    select.value = chosen();
    select.addEventListener("change", () => {
      remember(select.value);
      apply(document);
    });
    select.closest("[hidden]")?.removeAttribute("hidden");
  }

  // Times a page's own script puts in later (the attempt page's live part, a log pane)
  // follow the choice too; with the workflow's zone there is nothing to change.
  function followNewTimes() {
    new MutationObserver((changes) => {
      if (chosen() === "workflow") return;
      for (const change of changes) {
        for (const node of change.addedNodes) {
          if (node instanceof Element && (node.matches("time[datetime]") || node.querySelector("time[datetime]"))) {
            apply(node.matches("time[datetime]") ? node.parentElement || node : node);
          }
        }
      }
    }).observe(document.body, { childList: true, subtree: true });
  }

  window.tickworkTimes = { apply };
  setUpSwitch();
  apply(document);
  followNewTimes();
})();

// Live parts: an element with data-live-part="URL" is fetched again from that URL (the server
// renders the same part afresh) and put in place, often while it shows something running
// (data-live-active="true"), seldom otherwise, never while the tab is hidden, and less
// often after each failed fetch. Only that part is replaced: the filters above it, the
// page's scroll position and whatever has the focus stay as they are.
(() => {
  const ACTIVE_MS = 3000;
  const IDLE_MS = 30000;
  const MAX_ERROR_MS = 60000;
  let failures = 0;
  let timer = null;

  function livePart() {
    return document.querySelector("[data-live-part]");
  }

  function pause(part) {
    const base = part.dataset.liveActive === "true" ? ACTIVE_MS : IDLE_MS;
    return failures === 0 ? base : Math.min(MAX_ERROR_MS, base * 2 ** failures);
  }

  function schedule() {
    window.clearTimeout(timer);
    timer = null;
    const part = livePart();
    if (part && !document.hidden) timer = window.setTimeout(refresh, pause(part));
  }

  // What has the focus inside the part, found again in its new copy by id or by link.
  function focusKey(part) {
    const active = document.activeElement;
    if (!active || !part.contains(active) || active === part) return null;
    if (active.id) return `#${CSS.escape(active.id)}`;
    const href = active.getAttribute("href");
    return href ? `[href="${CSS.escape(href)}"]` : null;
  }

  function replace(part, fresh) {
    const focus = focusKey(part);
    const scrolls = [...part.querySelectorAll(".table-wrap")].map((wrap) => wrap.scrollLeft);
    part.replaceWith(fresh);
    fresh.querySelectorAll(".table-wrap").forEach((wrap, index) => {
      if (index < scrolls.length) wrap.scrollLeft = scrolls[index];
    });
    if (focus) fresh.querySelector(focus)?.focus({ preventScroll: true });
    if (window.tickworkTimes) window.tickworkTimes.apply(fresh);
    document.dispatchEvent(new CustomEvent("tickwork:live", { detail: fresh }));
  }

  async function refresh() {
    const part = livePart();
    if (!part || document.hidden) return;
    try {
      const response = await fetch(part.dataset.livePart, {
        cache: "no-store", credentials: "same-origin", headers: { Accept: "text/html" },
      });
      if (!response.ok || response.redirected) throw new Error(`HTTP ${response.status}`);
      const parsed = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = parsed.getElementById(part.id);
      if (!fresh) throw new Error("no live part in the answer");
      replace(part, document.adoptNode(fresh));
      failures = 0;
    } catch (error) {
      failures += 1;
    }
    schedule();
  }

  document.addEventListener("visibilitychange", () => {
    if (document.hidden) {
      window.clearTimeout(timer);
      timer = null;
    } else if (livePart()) {
      refresh();
    }
  });
  schedule();
})();
