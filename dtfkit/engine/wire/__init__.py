"""What the owner and its tasks agree on, imported by both: the protocol, the control socket's
handshake, layouts, how code and its source travel, how frames and stack dumps read."""
