// Starts Swagger UI on /api/docs with the OpenAPI document named by the page's
// data-spec-url; nothing is fetched from another host (no validator badge).
(function () {
  "use strict";
  var root = document.getElementById("swagger-ui");
  root.textContent = "";
  window.SwaggerUIBundle({
    url: root.dataset.specUrl,
    domNode: root,
    deepLinking: true,
    presets: [window.SwaggerUIBundle.presets.apis],
    plugins: [window.SwaggerUIBundle.plugins.DownloadUrl],
    layout: "BaseLayout",
    validatorUrl: null,
  });
})();
