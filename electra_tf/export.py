"""`python -m electra_tf.export`, the documented command line: it runs `electra_tf/cli/export.py`,
which is also installed as the `electra-export` command."""

import sys

from electra_tf.cli.export import main

if __name__ == "__main__":
    sys.exit(main())
