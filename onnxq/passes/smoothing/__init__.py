"""SmoothQuant's rescaling on the float graph (graph): X / s and s · W per group of layers reading one activation, and those layers' weights seen by input channel (weights)."""
