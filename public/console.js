// Optional enhancement of the sless console (everything works without it): a Copy
// button next to every URL. Loaded with the page's CSP nonce; no inline code.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  if (!navigator.clipboard) return;
  for (const url of document.querySelectorAll("code.url")) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "button-quiet copy";
    button.textContent = "Copy";
    button.setAttribute("aria-label", "Copy the URL " + url.textContent);
    button.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(url.textContent);
        button.textContent = "Copied";
      } catch {
        getSelection().selectAllChildren(url);
        button.textContent = "Press Ctrl+C";
      }
      setTimeout(() => { button.textContent = "Copy"; }, 2000);
    });
    url.after(button);
  }
});

// A live tail on the function page: a "Live" button that appends each new log line as
// it is printed (the page's Refresh link does the same without this script).
document.addEventListener("DOMContentLoaded", () => {
  const panel = document.querySelector("section[data-live]");
  if (!panel || !window.EventSource) return;
  const links = panel.querySelector(".panel-links");
  const button = document.createElement("button");
  button.type = "button";
  button.className = "button-quiet live";
  button.textContent = "Live";
  button.setAttribute("aria-pressed", "false");
  links.prepend(button, " ");
  let source = null;
  const lines = () => {
    let pre = panel.querySelector("pre.logs");
    if (!pre) {
      pre = document.createElement("pre");
      pre.className = "logs";
      pre.setAttribute("aria-live", "polite");
      const empty = panel.querySelector("p.muted");
      if (empty) empty.replaceWith(pre); else panel.append(pre);
    }
    return pre;
  };
  const append = (text, stream, meta) => {
    const span = document.createElement("span");
    span.className = "log-line log-" + stream;
    const head = document.createElement("span");
    head.className = "log-meta";
    head.textContent = meta;
    span.append(head, text + "\n");
    const pre = lines();
    pre.append(span);
    pre.scrollTop = pre.scrollHeight;
  };
  const stop = () => {
    if (source) source.close();
    source = null;
    delete panel.dataset.streaming;
    button.textContent = "Live";
    button.setAttribute("aria-pressed", "false");
  };
  button.addEventListener("click", () => {
    if (source) return stop();
    source = new EventSource(panel.dataset.live);
    // Open: every line printed from now on comes.
    source.addEventListener("open", () => { panel.dataset.streaming = "true"; });
    button.textContent = "Stop live";
    button.setAttribute("aria-pressed", "true");
    source.addEventListener("line", (event) => {
      const line = JSON.parse(event.data);
      const call = line.request_id ? "[" + line.request_id + "] " : "";
      append(call + line.line, line.stream, line.time + " " + line.stream + " ");
    });
    source.addEventListener("lagged", (event) => {
      append(event.data + " lines went by too fast to show", "stderr", "");
    });
  });
});
