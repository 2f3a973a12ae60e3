"""`python -m electra_tf.convert`, the documented command line: it runs `electra_tf/cli/convert.py`,
which is also installed as the `electra-convert` command."""

import sys

from electra_tf.cli.convert import main

if __name__ == "__main__":
    sys.exit(main())
