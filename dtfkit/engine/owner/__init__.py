"""The owner's side, in the notebook kernel (or a script): the session that owns a cluster's tasks,
their events, the calls sent to them and what they print. Never imports TensorFlow."""
