"""The float model made ready to plan, one preparation at a time (steps), and the checks before planning (checks): opset upgrade, functions inlined, constant weights folded, standard forms."""
