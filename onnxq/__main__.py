import sys

from onnxq.cli import main

sys.exit(main())
