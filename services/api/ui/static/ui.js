// Enhancements of tickwork's pages; every page works without this script.
"use strict";

// A form marked data-confirm asks before it is sent (actions that cannot be undone).
document.addEventListener("submit", (event) => {
  const form = event.target;
  if (form instanceof HTMLFormElement && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
    event.preventDefault();
  }
});
