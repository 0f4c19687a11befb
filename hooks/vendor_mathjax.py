"""MkDocs hook: serve MathJax 3 from our own site, taken from a pinned PyPI package.

`django-static-mathjax==3.2.2.1` (a pure data wheel, pinned in pyproject.toml and the lock) ships
MathJax 3.2.2 under `mathjax/static/mathjax/es5/`. Nothing is committed: at build (and serve) time
this hook adds the files MathJax needs to the site under `assets/vendor/mathjax/`:
the `tex-chtml.js` bundle, the CHTML woff fonts it loads from next to itself, the TeX
extensions it may autoload, and the licence.
"""

from __future__ import annotations

from pathlib import Path

import mathjax  # the django-static-mathjax package
from mkdocs.structure.files import File

ES5 = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
DEST = "assets/vendor/mathjax"
WANTED = ["tex-chtml.js", "output/chtml/fonts/woff-v2/*.woff", "input/tex/extensions/*.js"]


def on_files(files, config):
    for pattern in WANTED:
        for path in sorted(ES5.glob(pattern)):
            rel = path.relative_to(ES5).as_posix()
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
