"""The compiled modules' build step; everything else is in pyproject.toml.

``kit.web.zim._tagscan`` (the local web's noise cut in C, ``kit/web/zim/_tagscan.c``) and
``kit.web.zim._textscan`` (the runs of non-ASCII characters the index folds, ``_textscan.c``) are
optional: an install without a C compiler still succeeds, and ``kit.web.zim.precut`` and
``kit.web.zim.text`` then run the same rules in Python (slower). ``pip install -e .`` builds them
in place.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("kit.web.zim._tagscan", ["kit/web/zim/_tagscan.c"], optional=True),
                   Extension("kit.web.zim._textscan", ["kit/web/zim/_textscan.c"], optional=True)])
