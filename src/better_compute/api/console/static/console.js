// better-compute console: progressive enhancement only. Without this script every page works
// (a reload shows the latest state); with it, /ui/events says when this tenant's Nodes or pools
// changed and the page fetches its own live fragment (?fragment=1) and swaps it in. No polling.
// A change that arrives while a fetch is on its way fetches once more after it: that fetch may
// have been answered before the change.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !live.dataset.live || !window.EventSource) { return; }
  var status = document.querySelector("[data-live-status]");
  var pending = null;
  var again = false;
  function refresh() {
    if (pending) { again = true; return; }
    pending = fetch(live.dataset.live, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) {
        if (response.redirected || response.status === 401) { window.location.assign("/ui/sign-in"); return null; }
        return response.ok ? response.text() : null;
      })
      .then(function (html) {
        if (html !== null && html !== undefined) {
          live.innerHTML = html;
          if (status) { status.textContent = "Updated " + new Date().toLocaleTimeString(); }
        }
      })
      .catch(function () { if (status) { status.textContent = "Live updates paused: reload to retry"; } })
      .finally(function () {
        pending = null;
        if (again) { again = false; refresh(); }
      });
  }
  var events = new EventSource("/ui/events");
  events.addEventListener("change", refresh);
  events.addEventListener("open", function () { if (status) { status.textContent = "Live"; } });
}());
