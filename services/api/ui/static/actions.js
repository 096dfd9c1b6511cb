// Actions on runs: confirmed forms, and more param rows on the start form.
// Every action works without this script (the server asks for confirmation itself).
"use strict";

// A form whose data-confirm dialog was accepted (ui.js asks, on the document, before this
// listener on the window runs) is sent as confirmed, so the server does not ask again.
window.addEventListener("submit", (event) => {
  const form = event.target;
  if (!(form instanceof HTMLFormElement) || !form.dataset.confirm || event.defaultPrevented) {
    return;
  }
  const confirmed = form.elements.namedItem("confirmed");
  if (confirmed instanceof HTMLInputElement) {
    confirmed.value = "yes";
  }
});

// The start form's param rows: a button adds an empty row.
for (const rows of document.querySelectorAll("[data-param-rows]")) {
  const button = document.createElement("button");
  button.type = "button";
  button.textContent = "Add a param";
  button.addEventListener("click", () => {
    const last = rows.lastElementChild;
    if (!last) {
      return;
    }
    const row = last.cloneNode(true);
    const number = rows.children.length + 1;
    for (const input of row.querySelectorAll("input")) {
      input.value = "";
      const part = input.name === "param_key" ? "key" : "value";
      input.setAttribute("aria-label", `Param ${number} ${part}`);
    }
    rows.appendChild(row);
    row.querySelector("input")?.focus();
  });
  rows.closest("table")?.after(button);
}
