"""`python -m electra_tf.export_openvino`, the documented command line: it runs
`electra_tf/cli/export_openvino.py`, which is also installed as the `electra-export-openvino`
command."""

import sys

from electra_tf.cli.export_openvino import main

if __name__ == "__main__":
    sys.exit(main())
