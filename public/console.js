// Optional enhancement of the sless console (everything works without it): a Copy
// button next to every URL field. Loaded with the page's CSP nonce; no inline code.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  if (!navigator.clipboard) return;
  for (const input of document.querySelectorAll("input.url")) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "button-quiet copy";
    button.textContent = "Copy";
    button.setAttribute("aria-label", "Copy " + (input.getAttribute("aria-label") || "URL"));
    button.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(input.value);
        button.textContent = "Copied";
      } catch {
        input.select();
        button.textContent = "Press Ctrl+C";
      }
      setTimeout(() => { button.textContent = "Copy"; }, 2000);
    });
    input.after(button);
  }
});
