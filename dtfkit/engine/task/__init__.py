"""The task's side: the program every task process runs (``task_main``) and its delaying relay.
The only wing that imports TensorFlow."""
