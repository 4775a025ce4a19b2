"""The command line: the parser and its help (by group), the arguments made a QuantConfig, the quantize command and the others (verify, data, calibrate, merge), progress on stderr."""
