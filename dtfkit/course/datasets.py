"""The data sets' old address: they moved to ``dtfkit.datasets``, below the recipes, the lab and the course.

Example::

    from dtfkit.course.datasets import load_digits  # the same function as dtfkit.datasets.load_digits
"""

from dtfkit.datasets import *  # noqa: F403
from dtfkit.datasets import __all__  # noqa: F401
