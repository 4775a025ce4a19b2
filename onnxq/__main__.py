import sys

from onnxq.cli.main import main

sys.exit(main())
