// MathJax 3 (served by this site; see hooks/vendor_mathjax.py).
// Typeset only from Material's document$ (first load and every instant-navigation page swap):
// typesetting at startup as well would leave formulas with invisible glyphs.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"], ["$", "$"]],
    displayMath: [["\\[", "\\]"], ["$$", "$$"]],
    processEscapes: true,
    processEnvironments: true,
    tags: "ams",
    macros: {
      piold: "\\pi_{\\theta_{\\text{old}}}",
      piref: "\\pi_{\\text{ref}}",
      clip: "\\operatorname{clip}",
      KL: "\\mathrm{KL}",
    },
  },
  options: {
    ignoreHtmlClass: "[^ ]+",
    processHtmlClass: "arithmatex|jp-RenderedMarkdown|jp-RenderedLatex",
  },
  startup: { typeset: false },
};

document$.subscribe(() => {
  const mj = window.MathJax;
  if (!mj || !mj.startup || !mj.startup.promise) return;
  mj.startup.promise = mj.startup.promise.then(() => {
    mj.startup.output.clearCache();
    mj.typesetClear();
    mj.texReset();
    return mj.typesetPromise();
  });
});
