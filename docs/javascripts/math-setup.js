// MathJax 3 (served by this site; see hooks/vendor_mathjax.py).
// Typeset only from Material's document$ (first load and every instant-navigation page swap):
// typesetting at startup as well would leave formulas with invisible glyphs.
//
// Math is only looked for inside `arithmatex` elements: pymdownx.arithmatex writes them on chapter and
// API pages, hooks/notebook_slim.py makes nbconvert write the same markup in notebook Markdown cells.
// So dollar signs in prose ("定价 $5") never become math. `jp-RenderedLatex` = text/latex cell outputs.
//
// TeX errors are made loud for the browser tests (tests/site/test_browser.py): `noundefined` is removed
// (an unknown macro is then an error, not red text), and every error is recorded in
// window.rlhfMath.errors. When a page's math is typeset and its fonts are loaded,
// <html data-math="done"> is set and window.rlhfMath.visibleAt holds performance.now().
window.rlhfMath = { errors: [], visibleAt: null, runs: 0 };

window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"], ["$", "$"]],
    displayMath: [["\\[", "\\]"], ["$$", "$$"]],
    processEscapes: true,
    processEnvironments: true,
    tags: "ams",
    packages: { "[-]": ["noundefined"] },
    macros: {
      piold: "\\pi_{\\theta_{\\text{old}}}",
      piref: "\\pi_{\\text{ref}}",
      clip: "\\operatorname{clip}",
      KL: "\\mathrm{KL}",
    },
    formatError(jax, err) {
      window.rlhfMath.errors.push(String(err.message));
      console.error("TeX error: " + err.message);
      return jax.formatError(err);
    },
  },
  options: {
    ignoreHtmlClass: "[^ ]+",
    processHtmlClass: "arithmatex|jp-RenderedLatex",
  },
  startup: { typeset: false },
};

document$.subscribe(() => {
  const mj = window.MathJax;
  if (!mj || !mj.startup || !mj.startup.promise) return;
  document.documentElement.dataset.math = "pending";
  mj.startup.promise = mj.startup.promise
    .then(() => {
      mj.startup.output.clearCache();
      mj.typesetClear();
      mj.texReset();
      return mj.typesetPromise();
    })
    .then(() => document.fonts.ready)
    .then(() => {
      markWideInlineMath();
      window.rlhfMath.runs += 1;
      window.rlhfMath.visibleAt = performance.now();
      document.documentElement.dataset.math = "done";
    })
    .catch((err) => {
      window.rlhfMath.errors.push(String(err && err.message ? err.message : err));
      document.documentElement.dataset.math = "done";
    });
});

// Inline formulas cannot break across lines; one wider than its paragraph gets .arithmatex--wide
// (docs/stylesheets/extra.css makes it scroll). Re-checked when the window is resized.
function markWideInlineMath() {
  for (const span of document.querySelectorAll("span.arithmatex")) {
    const mjx = span.querySelector("mjx-container");
    const block = span.closest("p, li, td, th, dd, div");
    if (!mjx || !block) continue;
    span.classList.remove("arithmatex--wide");
    if (mjx.getBoundingClientRect().width > block.clientWidth) span.classList.add("arithmatex--wide");
  }
}
let wideTimer = null;
window.addEventListener("resize", () => {
  clearTimeout(wideTimer);
  wideTimer = setTimeout(markWideInlineMath, 100);
});
