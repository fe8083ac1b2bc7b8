"""``python -m predictor --model_name NAME --model_dir DIR``: the KServe custom runtime."""

import sys

from predictor._main import main

sys.exit(main(sys.argv[1:]))
