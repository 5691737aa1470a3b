// Refreshes the parts of a page marked data-live while the page is visible: nothing is asked
// of the server while nobody looks.
(function () {
  "use strict";
  var EVERY = 5000;
  function refresh() {
    if (document.visibilityState !== "visible") return;
    document.querySelectorAll("[data-live]").forEach(function (part) {
      if (part.querySelector("details[open]")) return; // someone is reading a table
      fetch(part.getAttribute("data-live"), { credentials: "same-origin" })
        .then(function (r) {
          // The session ended (the answer is the sign-in page): load the page itself, which
          // goes to the sign-in form and back here, instead of showing that form inside it.
          if (r.redirected) { window.location.reload(); return null; }
          return r.ok ? r.text() : null;
        })
        .then(function (html) { if (html !== null) part.innerHTML = html; })
        .catch(function () {});
    });
  }
  setInterval(refresh, EVERY);
  document.addEventListener("visibilitychange", refresh);
})();
