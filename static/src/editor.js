// The exercise editor: CodeMirror 6 in place of the page's <textarea>, which stays in
// the form (hidden) and always holds the editor's text, so the form posts the same
// way with or without this script. Drafts are saved to the server as the learner types.
//
// The editor lives in a shadow root: CodeMirror then styles itself with constructed
// stylesheets (adoptedStyleSheets) instead of a <style> element, which the site's
// Content-Security-Policy (style-src 'self') rightly refuses. CSS custom properties
// inherit into the shadow root, so the theme below uses the site's colours.
import { EditorView, basicSetup } from "codemirror";
import { keymap } from "@codemirror/view";
import { indentWithTab } from "@codemirror/commands";
import { python } from "@codemirror/lang-python";

const SAVE_DELAY_MS = 1500;

const theme = EditorView.theme({
  "&": {
    border: "1px solid var(--line)",
    borderRadius: "6px",
    background: "var(--panel)",
    color: "var(--fg)",
    fontSize: "0.92rem",
    maxHeight: "70vh",
  },
  "&.cm-focused": { outline: "2px solid var(--focus)", outlineOffset: "1px" },
  ".cm-scroller": {
    fontFamily: "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace",
    minHeight: "16rem",
  },
  ".cm-gutters": { background: "var(--code)", color: "var(--muted)", borderRight: "1px solid var(--line)" },
  ".cm-activeLine, .cm-activeLineGutter": { background: "var(--accent-soft)" },
  ".cm-content": { caretColor: "var(--fg)" },
});

function csrfToken(form) {
  const field = form.querySelector('input[name="csrf_token"]');
  return field ? field.value : "";
}

function attach(textarea) {
  const form = textarea.form;
  const label = document.querySelector(`label[for="${textarea.id}"]`);
  let timer = null;
  const save = () => {
    const url = form && form.dataset.draftUrl;
    if (!url) return;
    const body = new URLSearchParams({ code: textarea.value, csrf_token: csrfToken(form) });
    fetch(url, { method: "POST", body, headers: { "X-CSRF-Token": csrfToken(form) } }).catch(() => {});
  };
  const host = document.createElement("div");
  host.className = "code-editor";
  textarea.after(host);
  const shadow = host.attachShadow({ mode: "open" });
  const view = new EditorView({
    doc: textarea.value,
    root: shadow,
    parent: shadow,
    extensions: [
      basicSetup,
      theme,
      python(),
      // Tab indents; Esc then Tab moves focus on (CodeMirror's escape hatch).
      keymap.of([indentWithTab]),
      EditorView.lineWrapping,
      EditorView.contentAttributes.of({
        "aria-label": label ? label.textContent : "Code editor",
        autocapitalize: "off",
        autocorrect: "off",
        spellcheck: "false",
      }),
      EditorView.updateListener.of((update) => {
        if (!update.docChanged) return;
        textarea.value = update.state.doc.toString();
        clearTimeout(timer);
        timer = setTimeout(save, SAVE_DELAY_MS);
      }),
    ],
  });
  textarea.hidden = true;
  if (label) label.addEventListener("click", () => view.focus());
  if (form) form.addEventListener("submit", () => { textarea.value = view.state.doc.toString(); });
}

function init() {
  document.querySelectorAll("textarea[data-editor]").forEach(attach);
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
else init();
