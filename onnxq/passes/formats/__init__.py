"""Output formats' lowerings after the QDQ rewrite (qlinear, qoperator) and the deployed graph's last touches (clamps, adds, float readers)."""
