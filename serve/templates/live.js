// Live updates of an evc page: /live sends a pulse for each event the outbox commits; the page's
// main part is then fetched again and swapped in, a quarter of a second after the first pulse
// of a burst. A page answering a form does not take part, and neither does a page whose form
// the reader is filling in: it is refreshed once the reader leaves the form alone.
(() => {
  "use strict";
  if (!document.querySelector("main[data-live]") || !window.EventSource) {
    return;
  }
  let timer = null;
  let running = false;
  const busy = () =>
    Array.from(document.querySelectorAll("main input, main textarea, main select")).some(
      (field) =>
        field === document.activeElement ||
        (field.type !== "hidden" && field.value !== field.defaultValue),
    );
  const schedule = (delay) => {
    if (timer === null) {
      timer = setTimeout(refresh, delay);
    }
  };
  async function refresh() {
    timer = null;
    if (running || busy()) {
      schedule(1000);
      return;
    }
    running = true;
    try {
      const response = await fetch(location.href, { credentials: "same-origin" });
      if (response.ok && !response.redirected) {
        const page = new DOMParser().parseFromString(await response.text(), "text/html");
        const next = page.querySelector("main[data-live]");
        const current = document.querySelector("main[data-live]");
        if (next && current && !busy()) {
          current.replaceWith(next);
          document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
        }
      }
    } catch (_) {
      // The next pulse tries again.
    } finally {
      running = false;
    }
  }
  const source = new EventSource("/live");
  // Whatever committed between rendering the page and opening the stream.
  source.addEventListener("open", () => {
    document.body.dataset.live = "open";
    schedule(0);
  });
  source.addEventListener("error", () => {
    document.body.dataset.live = "reconnecting";
  });
  for (const kind of ["event", "summary"]) {
    source.addEventListener(kind, () => schedule(250));
  }
})();
