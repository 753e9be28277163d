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
