"""MkDocs hook: serve MathJax 3 from our own site, taken from a pinned PyPI package.

`django-static-mathjax==3.2.2.1` (a pure data wheel, pinned in pyproject.toml and the lock) ships
MathJax 3.2.2 under `mathjax/static/mathjax/es5/`. Nothing is committed: at build (and serve) time
this hook adds the files MathJax needs to the site under `assets/vendor/mathjax/`:
the `tex-chtml.js` bundle, the CHTML woff fonts it loads from next to itself, the TeX
extensions it may autoload, and the licence.

One font is cut down: MathJax_AMS-Regular.woff (41 KB) holds some 260 AMS symbols, and the book draws
only the blackboard-bold letters with it (𝔼 for expectations, ℝ), which MathJax writes as the plain
letters A-Z and k in that font. Eight chapter pages loaded the whole file for one glyph. The site gets a
subset with the characters in AMS_KEEP (8 KB), made by fontTools at build time. The browser test
(tests/site/test_site_browser.py) reads the characters every page draws with this font and fails if
one is missing from the subset: add it to AMS_KEEP.
"""

from __future__ import annotations

import io
from pathlib import Path

import mathjax  # the django-static-mathjax package
from fontTools import subset
from fontTools.ttLib import TTFont
from mkdocs.structure.files import File

ES5 = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
DEST = "assets/vendor/mathjax"
WANTED = ["tex-chtml.js", "output/chtml/fonts/woff-v2/*.woff", "input/tex/extensions/*.js"]
AMS = "output/chtml/fonts/woff-v2/MathJax_AMS-Regular.woff"
AMS_KEEP = " \u00a0ABCDEFGHIJKLMNOPQRSTUVWXYZk"  # blackboard bold: \mathbb{E} is "E" in this font


def ams_subset() -> bytes:
    """MathJax's AMS font cut down to the characters in AMS_KEEP (same glyphs, hinting and names)."""
    font = TTFont(ES5 / AMS, recalcTimestamp=False)
    options = subset.Options(flavor="woff", layout_features=["*"], name_IDs=["*"], glyph_names=True, hinting=True)
    options.notdef_outline = True
    options.drop_tables += ["FFTM"]  # FontForge's timestamp table: unused, and fontTools logs that it cannot subset it
    subsetter = subset.Subsetter(options)
    subsetter.populate(unicodes=[ord(c) for c in AMS_KEEP])
    subsetter.subset(font)
    out = io.BytesIO()
    font.save(out)
    return out.getvalue()


def on_files(files, config):
    for pattern in WANTED:
        for path in sorted(ES5.glob(pattern)):
            rel = path.relative_to(ES5).as_posix()
            if rel == AMS:
                files.append(File.generated(config, f"{DEST}/{rel}", content=ams_subset()))
                continue
            files.append(
                File(
                    rel,
                    src_dir=str(ES5),
                    dest_dir=config["site_dir"],
                    use_directory_urls=False,
                    dest_uri=f"{DEST}/{rel}",
                )
            )
    licence = ES5.parent / "LICENSE"
    files.append(
        File(
            "LICENSE",
            src_dir=str(licence.parent),
            dest_dir=config["site_dir"],
            use_directory_urls=False,
            dest_uri=f"{DEST}/LICENSE.txt",
        )
    )
    return files
