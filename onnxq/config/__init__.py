"""One frozen configuration for the API, the CLI and TOML files: its schema, how it is read, and the ranges and
rules every value is checked against."""

from onnxq.config.checks import RANGES, Range
from onnxq.config.data import NORMALIZATIONS, DataConfig, Normalization
from onnxq.config.schema import (PROVIDER_ALIASES, BlockConfig, CalibrationConfig, QScheme, QuantConfig, Tolerance,
                                 VerifyConfig)

__all__ = ["QScheme", "BlockConfig", "CalibrationConfig", "DataConfig", "NORMALIZATIONS", "Normalization", "Tolerance", "VerifyConfig", "QuantConfig",
           "PROVIDER_ALIASES", "RANGES", "Range"]
