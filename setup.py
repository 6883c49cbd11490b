"""The one compiled module's build step; everything else is in pyproject.toml.

``kit.web.zim._tagscan`` (the local web's noise cut in C, ``kit/web/zim/_tagscan.c``) is optional:
an install without a C compiler still succeeds, and ``kit.web.zim.precut`` then runs the same
rules in Python (slower). ``pip install -e .`` builds it in place.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("kit.web.zim._tagscan", ["kit/web/zim/_tagscan.c"], optional=True)])
