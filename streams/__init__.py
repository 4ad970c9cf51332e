"""loopwarden: the stream processor (Faust layer, CLI) around the pure detection engine."""
