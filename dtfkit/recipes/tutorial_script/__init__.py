"""The tutorial's MNIST script as chapters 2 and 3 run it: read its source, launch it, read what it printed.

``dtfkit/examples/distributed_mnist.py`` is the ``distributed_mnist.py`` of Ye Hu's
*分布式TensorFlow入门教程* (2018), ported to TensorFlow 2.21. The notebooks run it
unchanged with ``dtfkit.launch`` (one process per task, ``--ps_hosts --worker_hosts
--job_name --task_index``); nothing here imports TensorFlow or the script, so the
kernel stays free of TensorFlow.

Example (in a notebook)::

    from dtfkit.recipes import tutorial_script as script
    script.show("main")                       # the script's own main(), numbered
    result = dtfkit.launch(script.PATH, ps=2, workers=2, args=["--log_every=10"],
                           echo=script.echo_script_lines)
    script.worker_reports(result)             # {'worker:0': {'printed': [10, 30, ...], 'local_steps': ..., ...}}

Its code is in ``kernel_side`` (the notebook kernel); every name is reachable from here.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
