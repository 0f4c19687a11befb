// MathJax 3 (served by this site; see hooks/vendor_mathjax.py).
// Typeset only from Material's document$ (first load and every instant-navigation page swap):
// typesetting at startup as well would leave formulas with invisible glyphs.
//
// Math is only looked for inside `arithmatex` elements: pymdownx.arithmatex writes them on chapter and
// API pages, hooks/notebook_slim.py makes nbconvert write the same markup in notebook Markdown cells.
// So dollar signs in prose ("定价 $5") never become math. `jp-RenderedLatex` = text/latex cell outputs;
// table-of-contents entries of headings with math are typeset explicitly (tocWithMath).
//
// TeX errors are made loud for the browser tests (tests/site/test_browser.py): `noundefined` is removed
// (an unknown macro is then an error, not red text), and every error is recorded in
// window.rlhfMath.errors. When a page's math is typeset and its fonts are loaded,
// <html data-math="done"> is set and window.rlhfMath.visibleAt holds performance.now(); typesetStart and
// typesetEnd (same clock) bracket MathJax's own work, for benchmarks/site_weight.py.
window.rlhfMath = { errors: [], visibleAt: null, typesetStart: null, typesetEnd: null, runs: 0 };

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
    // md-ellipsis: a table-of-contents entry. Entries copy headings such as "用法：几个 $d$ 上的值与梯度"
    // as plain text with the \( \) delimiters left in; they sit inside Material's classed wrappers, which
    // the filter above never descends into, so they are typeset explicitly (tocWithMath below).
    processHtmlClass: "arithmatex|jp-RenderedLatex|md-ellipsis",
    // Measured and kept (benchmarks/site_weight.py, issue #3): turning off the right-click menu
    // (`enableMenu: false`) saved ~8 % of the typesetting time on the chapter with the most formulas and
    // nothing measurable on a notebook page, not worth losing "show math as TeX" and zoom; turning off
    // the assistive MathML saved 10-20 % but would leave screen-reader users with no math at all.
  },
  startup: { typeset: false },
};

document$.subscribe(() => {
  const mj = window.MathJax;
  if (!mj || !mj.startup || !mj.startup.promise) return;
  document.documentElement.dataset.math = "pending";
  mj.startup.promise = mj.startup.promise
    .then(() => {
      window.rlhfMath.typesetStart = performance.now();
      mj.startup.output.clearCache();
      mj.typesetClear();
      mj.texReset();
      return mj.typesetPromise().then(() => {
        const toc = tocWithMath();
        return toc.length ? mj.typesetPromise(toc) : null;
      });
    })
    .then(() => {
      window.rlhfMath.typesetEnd = performance.now();
      return document.fonts.ready;
    })
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

// Table-of-contents entries (desktop sidebar and the mobile drawer) whose heading had math.
function tocWithMath() {
  return [...document.querySelectorAll(".md-nav--secondary .md-ellipsis")].filter((e) => e.textContent.includes("\\("));
}

// Inline formulas cannot break across lines; one wider than its paragraph gets .arithmatex--wide
// (docs/stylesheets/extra.css makes it scroll). Re-checked when the window is resized.
// All sizes are read first, then the classes are set: changing a class between two reads forces the browser
// to lay the page out again for each formula (200-450 ms on the API page, now ~5 ms). The class does not
// change either size it reads (the formula's own width, the paragraph's width).
function markWideInlineMath() {
  const spans = [...document.querySelectorAll("span.arithmatex")];
  const wide = spans.map((span) => {
    const mjx = span.querySelector("mjx-container");
    const block = span.closest("p, li, td, th, dd, div");
    return Boolean(mjx && block) && mjx.getBoundingClientRect().width > block.clientWidth;
  });
  spans.forEach((span, i) => span.classList.toggle("arithmatex--wide", wide[i]));
  document.documentElement.dataset.wideMathWidth = String(window.innerWidth); // the width last checked (tests wait on it)
}
let wideTimer = null;
window.addEventListener("resize", () => {
  clearTimeout(wideTimer);
  wideTimer = setTimeout(markWideInlineMath, 100);
});
